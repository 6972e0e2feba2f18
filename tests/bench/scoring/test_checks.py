"""The forward-contract probes, on plain numpy "models" fed like T6 (one overlapping window at a time).

A probe is answered by a fresh model (a new instance: nothing it saw before) and compared with what the scored
instance answered. Honest models pass every probe; each cheat is caught by the probe made for it, and the
numbers the cheats differ by are far above the tolerances (which only absorb float rounding).
"""

from __future__ import annotations

import numpy as np

from bench.scoring.checks import disagreement, probes

SEQ, PRED, N = 12, 4, 60


def windows() -> list[dict[str, np.ndarray]]:
    series = np.random.default_rng(0).standard_normal((N + SEQ + PRED, 3)).astype(np.float32)
    return [{"x": series[i : i + SEQ][None]} for i in range(N)]


class Honest:
    """Repeats each window's mean: depends on its own window only."""

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return np.repeat(x.mean(axis=1, keepdims=True), PRED, axis=1)


class OnlineLearner(Honest):
    """Learns from the stream: each window reveals the previous windows' targets, and it keeps a running
    correction from them (test-time training on evaluation labels)."""

    def __init__(self) -> None:
        self.seen: list[np.ndarray] = []

    def __call__(self, x: np.ndarray) -> np.ndarray:
        self.seen.append(x[:, -1])
        bias = np.mean(self.seen, axis=0)[:, None, :] if len(self.seen) > 1 else 0.0
        return super().__call__(x) + 0.5 * bias


class BatchMixer(Honest):
    """Adds the batch mean: reads the other samples of its batch."""

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return super().__call__(x) + x.mean(axis=(0, 1))[None, None, :]


def verdicts(model_class) -> dict[str, str | None]:
    scored = model_class()
    batches = windows()
    outputs = [scored(b["x"]) for b in batches]
    return {
        p.id: disagreement(p.view(model_class()(p.inputs["x"])), p.view(p.expected), "cpu")
        for p in probes(batches, outputs, causal=None)
    }


def test_an_honest_model_passes_every_probe():
    assert verdicts(Honest) == {"determinism": None, "history-independence": None, "batch-independence": None}


def test_a_model_that_learns_from_the_evaluation_stream_is_caught_by_history_independence():
    found = verdicts(OnlineLearner)
    assert found["determinism"] is None  # the first window comes before any history: no help there
    assert found["history-independence"] is not None


def test_a_model_that_reads_its_batch_is_caught_by_batch_independence():
    found = verdicts(BatchMixer)
    assert found["batch-independence"] is not None


def test_history_probe_takes_later_samples_spread_over_the_evaluation():
    batches = windows()
    outputs = [Honest()(b["x"]) for b in batches]
    (history,) = [p for p in probes(batches, outputs, causal=None) if p.id == "history-independence"]
    picked = [next(i for i, b in enumerate(batches) if np.array_equal(b["x"][0], row)) for row in history.inputs["x"]]
    assert picked == sorted(picked) and picked[0] == 1 and picked[-1] == N - 1 and len(picked) == 8


def test_a_single_batch_has_no_history_probe():
    batches = windows()[:1]
    assert [p.id for p in probes(batches, [Honest()(batches[0]["x"])], causal=None)] == ["determinism"]
