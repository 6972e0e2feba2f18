"""What the forward contract promises, checked from outputs alone (the scorer runs no agent code to check it).

Each probe is a batch built from evaluation inputs the scored predictor has already answered, sent to a SECOND,
fresh predictor process, whose answers are compared sample by sample with the scored ones. A fresh process knows
nothing the first one saw, so a model cannot recognise a probe by having seen its twin:

* determinism: the first scored batch again, as it was; the same outputs ("the same number twice");
* history independence: samples from across the evaluation (the last of evenly spaced later batches), which the
  scored process answered after seeing everything before them; a fresh process must answer them the same. A model
  that learns from the evaluation stream (T6's windows and T1's blocks reveal earlier targets) does not;
* batch independence: the first samples in reverse order, one fewer, in one batch (for T6, consecutive windows that
  overlap each other's targets); a sample's outputs must not depend on which other samples share its batch;
* causality (tasks that name a causal input, T1): the same blocks with every position after a cut replaced by
  text from other blocks; the outputs up to the cut must not change.

Tolerances allow float rounding of different batch shapes (and bf16 autocast on a GPU), nothing like the
differences a model that reads other samples or later positions produces (measured in the tests).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

PROBE_SAMPLES = 8  # samples per probe batch: enough to mix windows, small enough to cost nothing
TOLERANCE = {"cpu": 1e-4, "cuda": 5e-2}  # max |a - b| / max |b| for float outputs
MISMATCH = {"cpu": 1e-3, "cuda": 1e-2}  # fraction of differing integer outputs (argmax ties)


@dataclass
class Probe:
    id: str  # determinism, batch-independence, causality@<cut>
    name: str  # what a failure means, in words
    inputs: dict[str, np.ndarray]
    expected: np.ndarray  # the scored predictor's outputs for the same samples
    view: Callable[[np.ndarray], np.ndarray] = lambda out: out  # which part of the outputs must agree


def _take(batches: list[dict[str, np.ndarray]], k: int) -> tuple[dict[str, np.ndarray], list[tuple[int, int]]]:
    """Up to ``k`` samples of the scored batches as one batch (only batches shaped like the first one: T1's shorter
    last block is left out), and where each came from as (batch, row)."""
    shape = {name: a.shape[1:] for name, a in batches[0].items()}
    where: list[tuple[int, int]] = []
    for b, inputs in enumerate(batches):
        if {name: a.shape[1:] for name, a in inputs.items()} == shape:
            n = len(next(iter(inputs.values())))
            where += [(b, r) for r in range(n)][: k - len(where)]
        if len(where) == k:
            break
    rows = {name: np.concatenate([batches[b][name][r : r + 1] for b, r in where]) for name in shape}
    return rows, where


def _spread(batches: list[dict[str, np.ndarray]], k: int) -> list[tuple[int, int]]:
    """(batch, last row) of up to ``k`` evenly spaced batches after the first, shaped like the first one."""
    shape = {name: a.shape[1:] for name, a in batches[0].items()}
    alike = [b for b in range(1, len(batches)) if {n: a.shape[1:] for n, a in batches[b].items()} == shape]
    if not alike:
        return []
    picked = sorted({alike[i] for i in np.linspace(0, len(alike) - 1, min(k, len(alike))).round().astype(int)})
    return [(b, len(next(iter(batches[b].values()))) - 1) for b in picked]


def probes(
    batches: list[dict[str, np.ndarray]], outputs: list[np.ndarray], causal: str | None, seed: int = 0
) -> list[Probe]:
    """The probes for one scored evaluation: ``batches`` were sent, ``outputs`` came back."""
    found = [
        Probe(
            "determinism",
            "the same inputs gave different outputs (the model is not deterministic)",
            batches[0],
            outputs[0],
        )
    ]
    later = _spread(batches, PROBE_SAMPLES)
    if later:
        found.append(
            Probe(
                "history-independence",
                "outputs changed with what the predictor had been sent before (a model must not learn from the "
                "evaluation inputs)",
                {name: np.concatenate([batches[b][name][r : r + 1] for b, r in later]) for name in batches[0]},
                np.concatenate([outputs[b][r : r + 1] for b, r in later]),
            )
        )
    sample, where = _take(batches, PROBE_SAMPLES)
    if len(where) >= 2:
        expected = np.concatenate([outputs[b][r : r + 1] for b, r in where])
        # reversed AND one sample fewer: the batch's members change, not only their order, so mixing that ignores
        # order (adding the batch mean) is caught even when the first scored batch held these very samples
        order = np.arange(len(where))[::-1][:-1]
        found.append(
            Probe(
                "batch-independence",
                "a sample's outputs changed with the other samples in its batch (outputs must not depend on them)",
                {k: v[order] for k, v in sample.items()},
                expected[order],
            )
        )
    if causal:
        x = sample[causal]
        expected = np.concatenate([outputs[b][r : r + 1] for b, r in where])
        rng = np.random.default_rng(seed)
        length = x.shape[1]
        for cut in sorted({length // 2, int(rng.integers(1, max(2, length - 1)))}):
            changed = x.copy()
            donor = np.roll(x, 1, axis=0) if len(x) > 1 else x[:, ::-1]
            changed[:, cut + 1 :] = donor[:, cut + 1 :]
            if np.array_equal(changed, x):
                continue
            found.append(
                Probe(
                    f"causality@{cut}",
                    f"outputs at positions <= {cut} changed when only later positions did (the model is not causal)",
                    {**sample, causal: changed},
                    expected,
                    view=lambda out, c=cut: out[:, : c + 1],
                )
            )
    return found


def disagreement(got: np.ndarray, expected: np.ndarray, device: str) -> str | None:
    """Why ``got`` does not match ``expected`` within the device's tolerance, or None."""
    if got.shape != expected.shape:
        return f"shape {got.shape} instead of {expected.shape}"
    if expected.dtype.kind == "f" or got.dtype.kind == "f":
        a, b = got.astype(np.float64), expected.astype(np.float64)
        scale = max(float(np.abs(b).max(initial=0.0)), 1e-6)
        err = float(np.abs(a - b).max(initial=0.0)) / scale
        return None if err <= TOLERANCE[device] else f"max relative difference {err:.3g}"
    frac = float(np.mean(got != expected)) if got.size else 0.0
    return None if frac <= MISMATCH[device] else f"{frac:.1%} of the outputs differ"
