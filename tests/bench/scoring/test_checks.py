"""The forward-contract probes, on plain numpy "models" fed like T6 (one overlapping window at a time) and T1 (one
block of token ids at a time), and on a feed of several samples a batch (T2-T5, T7).

A "process" is one model instance: the scored one answers the feed in order, a fresh one answers the plan's probes
in order, exactly as the scorer does (bench/scoring/scorer.py). Honest models pass every probe; each cheat is
caught by the probe made for it, including models written to evade the old, fixed probes (the first batch, batches
of several samples, the last row of evenly spaced batches), and the numbers the cheats differ by are far above the
tolerances (which only absorb float rounding).
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.scoring import checks
from bench.scoring.checks import BATCH, CAUSALITY, DETERMINISM, HISTORY, draw_secret, judge, plan

SEQ, PRED, N = 12, 4, 300
SECRETS = [f"{i:032x}" for i in range(1, 41)] + [draw_secret() for _ in range(10)]


def windows(n: int = N) -> list[dict[str, np.ndarray]]:
    series = np.random.default_rng(0).standard_normal((n + SEQ + PRED, 3)).astype(np.float32)
    return [{"x": series[i : i + SEQ][None]} for i in range(n)]


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
        self.seen.append(x[:, -1].mean(axis=0))
        bias = np.mean(self.seen, axis=0)[None, None, :] if len(self.seen) > 1 else 0.0
        return super().__call__(x) + 0.5 * bias


def old_probed(n: int) -> set[int]:
    """Where the probes before issue 21 looked, from their public source: the first 8 batches (determinism, batch
    independence) and the last row of 8 evenly spaced batches after the first (history independence)."""
    return set(range(8)) | {int(b) for b in 1 + np.linspace(0, n - 2, 8).round()}


class Evader(OnlineLearner):
    """The online learner, stateless exactly where the old probes looked: the first request of a process, any batch
    of more than one sample, and the old positions in the scored feed (it counts its requests)."""

    def __init__(self, n: int = N) -> None:
        super().__init__()
        self.calls, self.probed = 0, old_probed(n)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        call, self.calls = self.calls, self.calls + 1
        learned = super().__call__(x)
        return Honest.__call__(self, x) if len(x) > 1 or call in self.probed else learned


class LastN(Honest):
    """State over its last 3 requests only (a short memory of revealed targets)."""

    def __init__(self) -> None:
        self.recent: list[np.ndarray] = []

    def __call__(self, x: np.ndarray) -> np.ndarray:
        self.recent = [*self.recent, x[:, -1].mean(axis=0)][-3:]
        return super().__call__(x) + 0.5 * np.mean(self.recent, axis=0)[None, None, :]


class WarmUp(OnlineLearner):
    """Stateless for the first 100 requests of a process (longer than any stretch), then it learns."""

    def __call__(self, x: np.ndarray) -> np.ndarray:
        learned = super().__call__(x)
        return learned if len(self.seen) > 100 else Honest.__call__(self, x)


class Noisy(Honest):
    """Not deterministic (dropout left on)."""

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return super().__call__(x) * np.random.default_rng().uniform(0.5, 1.5)


class BatchMixer(Honest):
    """Adds the batch mean: reads the other samples of its batch."""

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return super().__call__(x) + x.mean(axis=(0, 1))[None, None, :]


def run(model_class, feed, secret: str, causal: str | None = None, key: str = "x") -> tuple[checks.Plan, list[str]]:
    """The scorer's two processes on ``feed``: the scored instance answers the feed, a fresh one the probes."""
    scored = model_class()
    outputs = [scored(b[key]) for b in feed]
    found = plan(feed, causal, secret)
    fresh = model_class()
    return found, judge(found, [fresh(p.inputs[key]) for p in found.probes], outputs, "cpu")


# ---------------------------------------------------------------------------------------------------------------
# The secret -> the positions
# ---------------------------------------------------------------------------------------------------------------


def test_the_secret_alone_decides_the_positions_and_each_secret_gives_others():
    feed = windows()
    assert len(draw_secret()) == 32 and draw_secret() != draw_secret()  # 128 random bits each time
    first = plan(feed, None, SECRETS[0]).evidence()
    assert plan(feed, None, SECRETS[0]).evidence() == first  # recomputable from the recorded secret
    assert first["secret"] == SECRETS[0] and first["batches"] == N
    starts = {tuple(s for s, _ in plan(feed, None, secret).stretches) for secret in SECRETS}
    assert len(starts) == len(SECRETS)  # no two secrets replay the same stretches
    # every mid-stream batch is a stretch start for some secret: nothing in the feed is never or always asked
    first_starts = [plan(feed, None, secret).stretches[0][0] for secret in SECRETS]
    assert min(first_starts) == 1 and len(set(first_starts)) >= 10


def test_stretches_are_spread_after_gaps_and_an_eighth_of_the_feed():
    # 2,785 windows (T6's test split): 16 segments of (2785 - 1) / 16 = 174 batches, shifted by a secret offset (so
    # 16 or 17 of them, the ends partial); ceil(2785 / 8) = 349, 349 // 16 = 21 per stretch: 17 x 21 = 357 at most
    feed = [{"x": np.zeros((1, 2), np.float32)}] * 2785
    for secret in SECRETS[:10]:
        found = plan(feed, None, secret)
        assert len(found.stretches) in (16, 17) and all(1 <= e - s <= 21 for s, e in found.stretches)
        assert 320 <= found.evidence()["replayed"] <= 357
        assert found.stretches[0][0] >= 1  # never from the feed's start: the fresh process lacks history at once
        assert all(b[0] > a[1] for a, b in zip(found.stretches[:-1], found.stretches[1:], strict=True))  # a gap
        starts = np.array([s for s, _ in found.stretches])
        assert np.diff(starts).max() < 2 * 174 + 21  # stratified: no stretch-free span of two segments


def test_every_batch_but_the_first_is_replayed_for_some_secrets_and_none_for_all():
    """No batch is a position the replays never reach (a model could be stateful there for free) or always reach."""
    n = 300
    feed = [{"x": np.zeros((1, 2), np.float32)}] * n
    covered = np.zeros(n)
    for i in range(400):
        for s, e in plan(feed, None, f"{i + 7:032x}").stretches:
            covered[s:e] += 1
    assert covered[0] == 0 and covered[1:].min() >= 10 and covered[1:].max() < 400 * 0.6, covered


def test_a_one_batch_feed_is_replayed_whole_as_its_determinism_check():
    feed = [{"x": np.ones((4, 3), np.float32)}]
    found = plan(feed, None, SECRETS[0])
    assert found.stretches == ((0, 1),) and found.promises == [DETERMINISM, BATCH]
    assert found.probes[-1].rows[0][0] == 0 and len(found.probes[-1].rows) == 3  # reversed, one fewer


# ---------------------------------------------------------------------------------------------------------------
# Probe requests look like the feed's
# ---------------------------------------------------------------------------------------------------------------


def test_replays_send_the_feeds_own_batches_in_order_and_only_the_last_probe_has_another_size():
    feed = windows()
    for secret in SECRETS[:10]:
        found = plan(feed, None, secret)
        replay = [p for p in found.probes if p.promise == HISTORY]
        expected = [b for s, e in found.stretches for b in range(s, e)]
        assert [p.rows[0][0] for p in replay] == expected
        assert all(p.inputs["x"] is feed[p.rows[0][0]]["x"] for p in replay)  # the very batches, unchanged
        assert [p.promise for p in found.probes][-1] == BATCH and len(found.probes) == len(replay) + 1
        assert found.probes[-1].inputs["x"].shape == (7, SEQ, 3)  # 8 consecutive windows reversed, one fewer
        rows = [b for b, _ in found.probes[-1].rows]
        assert rows == list(range(rows[0], rows[0] - 7, -1))


def test_with_several_samples_a_batch_the_batch_probe_has_the_feeds_own_shape():
    rng = np.random.default_rng(1)
    feed = [{"x": rng.standard_normal((4, SEQ, 3)).astype(np.float32), "m": np.ones((4, 2), bool)} for _ in range(9)]
    feed.append({"x": rng.standard_normal((2, SEQ, 3)).astype(np.float32), "m": np.ones((2, 2), bool)})  # remainder
    for secret in SECRETS[:10]:
        found = plan(feed, None, secret)
        shapes = {tuple((k, v.shape) for k, v in b.items()) for b in feed}
        assert all(tuple((k, v.shape) for k, v in p.inputs.items()) in shapes for p in found.probes)
        (probe,) = [p for p in found.probes if p.promise == BATCH]
        assert len({b for b, _ in probe.rows}) == 2 and len(set(probe.rows)) == 4  # two batches' samples mixed
        for i, (b, r) in enumerate(probe.rows):
            assert np.array_equal(probe.inputs["x"][i], feed[b]["x"][r])
    found, broken = run(BatchMixer, feed, SECRETS[0])
    assert len(broken) == 1 and broken[0].startswith(checks.REASONS[BATCH])
    assert run(Honest, feed, SECRETS[0])[1] == []


# ---------------------------------------------------------------------------------------------------------------
# Replays match for honest models and catch stateful ones wherever they guess the probes are
# ---------------------------------------------------------------------------------------------------------------


def test_an_honest_model_passes_every_probe_for_every_secret():
    for secret in SECRETS:
        found, broken = run(Honest, windows(), secret)
        assert broken == [] and found.promises == [DETERMINISM, HISTORY, BATCH]


@pytest.mark.parametrize("model_class", [OnlineLearner, Evader, LastN, WarmUp])
def test_a_stateful_model_is_caught_by_the_cold_replays_whatever_it_does_where_the_old_probes_looked(model_class):
    for secret in SECRETS:
        _, broken = run(model_class, windows(), secret)
        assert broken and broken[0].startswith(checks.REASONS[HISTORY]) and "sent before" in broken[0], secret


def test_the_evader_passes_the_old_fixed_probes_so_the_test_is_about_them():
    """What the old scorer asked (bench/scoring/checks.py before issue 21), rebuilt here: the first batch in a fresh
    process, 8 evenly spaced later windows in one batch, the first 8 windows reversed minus one in one batch."""
    feed = windows()
    scored = Evader()
    outputs = [scored(b["x"]) for b in feed]
    spread = sorted({int(b) for b in 1 + np.linspace(0, N - 2, 8).round()})
    old = [([0], feed[0]["x"]), (spread, np.concatenate([feed[b]["x"] for b in spread]))]
    old.append((list(range(7, 0, -1)), np.concatenate([feed[b]["x"] for b in range(7, 0, -1)])))
    fresh = Evader()
    for rows, x in old:
        assert checks.disagreement(fresh(x), np.concatenate([outputs[b] for b in rows]), "cpu") is None
    learned = sum(checks.disagreement(outputs[b], Honest()(feed[b]["x"]), "cpu") is not None for b in range(N))
    assert learned > N * 0.9  # ... while it answered from what it learned nearly everywhere else


def test_a_model_that_is_not_deterministic_is_caught():
    _, broken = run(Noisy, windows(), SECRETS[0])
    assert broken and broken[0].startswith(checks.REASONS[HISTORY])
    _, broken = run(Noisy, [{"x": np.ones((3, SEQ, 3), np.float32)}], SECRETS[0])  # one batch: determinism alone
    assert broken[0].startswith(checks.REASONS[DETERMINISM])


def test_the_t6_peek_model_is_caught_by_the_batch_probe():
    class Peek(Honest):  # the adversarial suite's PEEK: reads the next windows of its batch
        def __call__(self, x):
            pred = np.repeat(x[:, -1:], PRED, axis=1)
            for j in range(1, min(len(x), PRED + 1)):
                pred[: len(x) - j, j - 1] = x[j:, -1]
            return pred

    _, broken = run(Peek, windows(), SECRETS[0])
    assert len(broken) == 1 and broken[0].startswith(checks.REASONS[BATCH])


# ---------------------------------------------------------------------------------------------------------------
# Causality (T1-like feed: one block of token ids a batch)
# ---------------------------------------------------------------------------------------------------------------

V, T = 12, 32


def blocks(n: int = 60) -> list[dict[str, np.ndarray]]:
    text = np.random.default_rng(2).integers(0, V, n * (T + 1) + 10)
    return [{"idx": text[b * (T + 1) : b * (T + 1) + T][None]} for b in range(n)]


class Causal:
    """Bigram counts of the block so far: logits at t depend on positions <= t only."""

    def __call__(self, idx: np.ndarray) -> np.ndarray:
        same = idx[:, :, None] == idx[:, None, :-1]  # [B, t, s]: the token at s is the one at t
        earlier = np.arange(idx.shape[1] - 1)[None, :] < np.arange(idx.shape[1])[:, None]  # s < t: s + 1 <= t
        return ((same & earlier).astype(np.float32) @ np.eye(V, dtype=np.float32)[idx[:, 1:]]).astype(np.float32)


class PeekNext(Causal):
    """Reads the next token (the target itself)."""

    def __call__(self, idx: np.ndarray) -> np.ndarray:
        out = super().__call__(idx)
        out[:, :-1] += 10 * np.eye(V)[idx[:, 1:]]
        return out


class Cache(Causal):
    """Causal, but adds the bigram counts of every block it was sent before (a cache of the text so far)."""

    def __init__(self) -> None:
        self.counts = np.zeros((V, V), np.float32)

    def __call__(self, idx: np.ndarray) -> np.ndarray:
        out = super().__call__(idx) + self.counts[idx]
        np.add.at(self.counts, (idx[:, :-1], idx[:, 1:]), 1)
        return out


def test_causality_probes_are_feed_shaped_spliced_blocks_that_read_on_naturally():
    feed = blocks()
    for secret in SECRETS[:10]:
        found = plan(feed, "idx", secret)
        causal = [p for p in found.probes if p.promise == CAUSALITY]
        assert len(causal) == 2 and found.promises == [DETERMINISM, HISTORY, BATCH, CAUSALITY]
        for probe, record in zip(causal, found.evidence()["causality"], strict=True):
            (b, _), cut = probe.rows[0], probe.upto
            x, original = probe.inputs["idx"][0], feed[b]["idx"][0]
            assert x.shape == original.shape and record["batch"] == b and record["cut"] == cut
            assert np.array_equal(x[: cut + 1], original[: cut + 1]) and x[cut + 1] != original[cut + 1]
            (r, p) = record["donors"][0]  # the new text followed the same character elsewhere in the feed
            donor = np.concatenate([blk["idx"] for blk in feed])[r]
            assert donor[p] == x[cut] and np.array_equal(donor[p + 1 : p + T - cut], x[cut + 1 :])
            s, e = found.stretches[probe.stretch]
            assert s <= b < e  # sent in its stretch's place, so its order gives nothing away


def test_a_model_that_reads_the_next_token_is_caught_by_causality_alone():
    for secret in SECRETS[:10]:
        _, broken = run(PeekNext, blocks(), secret, causal="idx", key="idx")
        assert broken and broken[-1].startswith(checks.REASONS[CAUSALITY])
        assert not any(b.startswith(checks.REASONS[HISTORY]) for b in broken)
    assert run(Causal, blocks(), SECRETS[0], causal="idx", key="idx")[1] == []


def test_a_cache_of_earlier_text_is_caught_as_history_not_misnamed_non_causal():
    for secret in SECRETS[:10]:
        _, broken = run(Cache, blocks(), secret, causal="idx", key="idx")
        assert [b.split(" (")[0] for b in broken][:1] == [checks.REASONS[HISTORY].split(" (")[0]]
        assert not any(b.startswith(checks.REASONS[CAUSALITY]) for b in broken)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 8])
def test_a_short_feed_keeps_a_plain_replay_beside_its_causality_probes_whatever_the_secret(n):
    """A short feed (a test's generated split) may have no more stretch batches than causality probes; the plan
    then replays those batches too, so every secret checks history and causality (once, 47-83 % of secrets on
    3-6 blocks lost the replay). A cache of earlier text is still named history there."""
    feed = blocks(n)
    for secret in SECRETS:
        found = plan(feed, "idx", secret)
        assert found.promises == [DETERMINISM, HISTORY, BATCH, CAUSALITY], (n, secret, found.stretches)
    for secret in SECRETS[:10]:
        _, broken = run(Cache, feed, secret, causal="idx", key="idx")
        assert broken and broken[0].startswith(checks.REASONS[HISTORY].split(" (")[0])
    assert run(Causal, feed, SECRETS[0], causal="idx", key="idx")[1] == []
