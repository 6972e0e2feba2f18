"""What the forward contract promises, checked from outputs alone.

With probes the model cannot see coming.

The scorer runs no agent code to check the contract. It asks a SECOND, fresh predictor process again
for parts of the scored feed and compares its answers, sample by sample, with what the scored
predictor answered. Where it asks comes from a per-evaluation secret (:func:`draw_secret`, the
:mod:`secrets` module) that no predictor ever sees; the scorer records the secret and the plan it
gave (:meth:`Plan.evidence`) in its result only after scoring, so anyone can recompute the positions
from the secret and the feed (:func:`plan` is a pure function of both).

* **Cold replays** (determinism, history independence). Stretches of consecutive feed batches at
  secret positions, sent to the fresh predictor as the scorer sent them: the same batches, shapes
  and order, one after another, with a gap of at least one batch between stretches. The first
  stretch never starts at the feed's start, so the fresh process lacks the history the scored one
  had before every stretch. A model that learns from the evaluation stream (T6's windows reveal
  earlier windows' targets; T1's blocks are the text so far) cannot reproduce outputs that depended
  on what it never saw, whatever it guesses about where it is; a model that keeps state over only
  its last N requests differs on the first N outputs of each stretch, and every output of a stretch
  is compared. Stretches are stratified (one in each of :data:`STRETCHES` equal segments of the
  feed, at a secret offset), so a model that is stateful only over part of the feed meets a stretch
  with a probability that grows with that part (every part longer than two segments surely; see the
  residual risk below). The segments' grid is shifted by the secret too: no batch is replayed for no
  secret (or for every one).
* **Causality** (tasks that name a causal input, T1): inside a replay stretch, one batch (at a
  secret offset) has every position after a secret cut replaced by text from elsewhere in the feed
  that follows the same characters (so the splice reads like text), the character right after the
  cut differing; the outputs up to the cut must not change. Judged only when the replay itself
  matched (a stateful model is already caught, for that reason).
* **Batch independence**: samples of the feed regrouped into batches of the feed's own size (two
  full batches mixed, reordered); where the feed has no two full batches alike (one sample per
  batch: T1, T6; or one batch) the batch is consecutive samples at a secret position, reversed and
  one fewer (the old probe). That one has a size the feed never had, so it is the LAST request the
  fresh predictor gets: recognising it gains nothing, every replay answer is in.

Residual risk (stated, not hidden; measured over 3,000 secrets): a model stateful over one short
contiguous part of the feed only escapes when no stretch meets that part. On T6's 2,785 windows a
part of 10 windows (0.4 %) escapes 84 % of the time at its worst position, 100 windows (3.6 %) 37 %,
200 (7.2 %) 6 %, 348 (12.5 %) never; on T1's 435 blocks, 10 blocks (2.3 %) 58 %, 50 never. Its gain
is bounded by that part's share of the score. Scattered positions multiply: each batch after the
first is replayed for at least ~10 % of secrets, so a model stateful at 20 scattered batches escapes
at most ~14 % of the time. Replays are compared within :func:`tolerance`: the predictor runs
deterministic kernels (:mod:`bench.scoring.predictor`) and a replay sends the feed's own batches in
their own shapes, so on a CPU they agree to 1e-4 of the output's scale and on a GPU to the task's
measured epsilon (``[scoring] cuda_replay_tolerance`` in task.toml, measured by the GPU proof kit's
``replay_epsilon``; until a task has one, :data:`CUDA_REPLAY_DEFAULT`): a stateful correction
smaller than that passes. Only the batch-independence probe, a batch size the feed never had (other
kernels), keeps the looser :data:`BATCH_TOLERANCE`. Where the evaluation inputs are the agent's own
data (T1 scores on val), a model can carry them in its weights: no probe can tell that from
learning, and it needs no state.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, field

import numpy as np

PROBE_SAMPLES = 8  # samples of the batch-independence probe when the feed sends one sample a batch
REPLAY_SHARE = 1 / 8  # share of the feed's batches the cold replays send again (T6: 16 x 21 = 336 of 2,785)
MIN_REPLAYED = 16  # ... but at least this many (short feeds cost nothing)
STRETCHES = 16  # stratified stretches (fewer on short feeds: each needs a gap before it)
CAUSAL_CUTS = 2  # causality probes (each in its own stretch when there are two)
TOLERANCE = {"cpu": 1e-4}  # max |a - b| / max |b| for float outputs of a replay (the feed's own shapes)
# A GPU's replay default while a task has no measured epsilon: 20x under the 2 % stateful correction
# that passed the old flat 5e-2 (issue 29) and 50x tighter than it; deterministic float32 kernels in
# the same shapes agree bitwise, and this leaves room for the rare op without a deterministic kernel
# (warned about in the predictor's log)
CUDA_REPLAY_DEFAULT = 1e-3
BATCH_TOLERANCE = {"cpu": 1e-4, "cuda": 5e-2}  # the batch probe: a shape the feed never had (bf16 kernels differ)
MISMATCH = {"cpu": 1e-3, "cuda": 1e-2}  # fraction of differing integer outputs (argmax ties)


@dataclass(frozen=True)
class Tolerance:
    """How far a fresh predictor's answer may lie from the scored one's.

    ``replay`` for the feed's own batches replayed (determinism, history, causality), ``batch`` for
    the batch probe, ``mismatch`` for integer outputs.
    """

    replay: float
    batch: float
    mismatch: float


def tolerance(device: str, cuda_replay: float | None = None) -> Tolerance:
    """The tolerance on ``device``; ``cuda_replay``.

    The task's measured GPU epsilon (None: the default).
    """
    if device == "cuda":
        replay = CUDA_REPLAY_DEFAULT if cuda_replay is None else float(cuda_replay)
        return Tolerance(replay, max(replay, BATCH_TOLERANCE["cuda"]), MISMATCH["cuda"])
    return Tolerance(TOLERANCE["cpu"], BATCH_TOLERANCE["cpu"], MISMATCH["cpu"])


DETERMINISM, HISTORY, BATCH, CAUSALITY = "determinism", "history-independence", "batch-independence", "causality"

Feed = list[dict[str, np.ndarray]]


def draw_secret() -> str:
    """A fresh secret for one evaluation (128 bits).

    The probes' positions follow from it and nothing else.
    """
    return secrets.token_hex(16)


@dataclass(frozen=True)
class Probe:
    """One request to the fresh predictor and the scored outputs it must reproduce."""

    promise: str  # DETERMINISM, HISTORY, BATCH or CAUSALITY
    inputs: dict[str, np.ndarray]
    rows: tuple[tuple[int, int], ...]  # (batch, row) of the scored feed whose outputs it must give, in order
    stretch: int | None = None  # which replay stretch it belongs to
    upto: int | None = None  # causality: only positions <= upto (dim 1) must agree
    where: str = ""  # in words, for the reason

    def expected(self, outputs: list[np.ndarray]) -> np.ndarray:
        """The scored outputs this probe's answer must reproduce, row by row."""
        (b, _), n = self.rows[0], len(self.rows)
        if n == len(outputs[b]) and all(r == i and c == b for i, (c, r) in enumerate(self.rows)):
            return outputs[b]
        return np.concatenate([outputs[c][r : r + 1] for c, r in self.rows])

    def view(self, out: np.ndarray) -> np.ndarray:
        """The part of an output that must agree (causality: the positions up to ``upto``)."""
        return out if self.upto is None else out[:, : self.upto + 1]


@dataclass(frozen=True)
class Plan:
    """The probes of one evaluation, in the order the fresh predictor gets them.

    And what to record about them.
    """

    secret: str
    n_batches: int
    stretches: tuple[tuple[int, int], ...]  # [start, end) of feed batches, replayed in this order
    probes: tuple[Probe, ...]
    record: dict = field(default_factory=dict)  # causality and batch-independence details, for the evidence

    @property
    def promises(self) -> list[str]:
        """The promises these probes check, in a fixed order (the scorer's ``checks``)."""
        found = {p.promise for p in self.probes}
        if self.stretches and self.stretches[0][0] > 0:
            found.add(DETERMINISM)  # a replay from mid-stream checks both
        return [p for p in (DETERMINISM, HISTORY, BATCH, CAUSALITY) if p in found]

    def evidence(self) -> dict:
        """What the result records after scoring: the secret and every position it gave."""
        replayed = sum(e - s for s, e in self.stretches)
        stretches = [list(s) for s in self.stretches]
        return {
            "secret": self.secret,
            "batches": self.n_batches,
            "replayed": replayed,
            "stretches": stretches,
            **self.record,
        }


def _shape(inputs: dict[str, np.ndarray]) -> tuple:
    return tuple((name, a.shape) for name, a in inputs.items())


def _sample_shape(inputs: dict[str, np.ndarray]) -> tuple:
    return tuple((name, a.shape[1:]) for name, a in inputs.items())


def _stretches(n: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """Stratified stretches over batches 1.. n-1, each after a gap.

    Over batch 0 alone for a one-batch feed.

    The segments' grid is shifted by a secret offset, so that no batch is a segment's edge for every
    secret (a stretch never starts on a segment's first batch, which keeps the gap): every batch is
    replayed with about the same probability, none never.
    """
    if n <= 1:
        return [(0, 1)] if n else []
    mid = n - 1
    k = min(STRETCHES, max(1, mid // 2))
    seg = mid / k
    budget = min(mid, max(MIN_REPLAYED, math.ceil(n * REPLAY_SHARE)))
    length = max(1, min(budget // k, int(seg) - 1 if k > 1 else int(seg)))
    shift = rng.uniform(0, seg)
    edges = sorted({1, n} | {e for j in range(k + 1) if 1 < (e := int(round(1 + shift + j * seg))) < n})
    out: list[tuple[int, int]] = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        first = lo + (1 if out else 0)  # a gap after the stretch before: its history is not the scored one
        if out and first <= out[-1][1]:
            first = out[-1][1] + 1
        if first >= hi:
            continue
        size = min(length, hi - first)
        out.append((s := int(rng.integers(first, hi - size + 1)), s + size))
    return out


def _splice(rows: np.ndarray, block: np.ndarray, cut: int, rng: np.random.Generator) -> tuple[np.ndarray, list[int]]:
    """``block`` with positions after ``cut`` replaced by text that follows the same context.

    The replacement follows the same last characters elsewhere in ``rows`` (the longest context of
    3, 2, 1 characters that has a candidate, else any text) with a different character right after
    the cut. A donor position may lie anywhere its tail fits in its row: a short block (the feed's
    last) finds donors in the full ones. Returns the new block and [donor row, donor position], or
    the block unchanged and [] when no row of ``rows`` has another character anywhere the tail could
    start.
    """
    tail = len(block) - 1 - cut
    last = rows.shape[1] - 1 - tail  # the last donor position p whose tail rows[p + 1 : p + 1 + tail] fits
    for k in (3, 2, 1, 0):
        if cut + 1 < k or last < max(k - 1, 0):
            continue
        ok = np.ones((len(rows), last + 1), dtype=bool)  # candidate donor positions 0 .. last
        for j in range(k):  # rows[:, p - j] == block[cut - j]
            ok[:, k - 1 :] &= rows[:, k - 1 - j : last + 1 - j] == block[cut - j]
        ok[:, : max(k - 1, 0)] = False
        ok &= rows[:, 1 : last + 2] != block[cut + 1]
        found = np.argwhere(ok)
        if len(found):
            r, p = (int(v) for v in found[rng.integers(len(found))])
            return np.concatenate([block[: cut + 1], rows[r, p + 1 : p + 1 + tail]]), [r, p]
    return block, []


CUTS_PER_BATCH = 8  # cuts tried on one batch before the next (a real text splices at the first; a feed of one
# repeated character at none: the search stays bounded)


def _causality(feed: Feed, causal: str, stretches, rng) -> tuple[dict[int, tuple[int, int, dict]], list[dict], str]:
    """Causality probes.

    {feed batch: (stretch, cut, inputs)} to send in its stretch's place, their record, and why there
    are none ("" when there are).

    Every secret gets a probe wherever the feed allows one: the stretches are tried in a secret
    order, and in each its batches and cuts, until :data:`CAUSAL_CUTS` stretches hold one. Once, the
    probe was given up when the first secret batch and cut could not be spliced (the short last
    block of a small feed, whose donors had to start at the cut itself): 7 % of secrets on a test's
    three-block feed checked no causality at all.
    """
    alike = [b for b, x in enumerate(feed) if x[causal].shape[1:] == feed[0][causal].shape[1:]]
    rows = np.concatenate([feed[b][causal] for b in alike]) if alike else None
    placed, record = {}, []
    if rows is None or len(rows) < 2:
        return placed, record, "the feed has fewer than two samples of one shape to take other text from"
    for st in rng.permutation(len(stretches)):
        if len(placed) == CAUSAL_CUTS:
            break
        s, e = stretches[int(st)]
        for b in (s + rng.permutation(e - s)).tolist():
            x = feed[b][causal]
            if x.shape[1] < 3:
                continue
            first = int(rng.integers(1, x.shape[1] - 1))
            others = [c for c in (1 + rng.permutation(x.shape[1] - 2)).tolist() if c != first]
            for cut in [first, *others][:CUTS_PER_BATCH]:
                changed, donors = x.copy(), []
                for i in range(len(x)):
                    changed[i], donor = _splice(rows, x[i], cut, rng)
                    donors.append(donor)
                if not np.array_equal(changed, x):
                    break
            else:
                continue
            placed[b] = (int(st), cut, {**feed[b], causal: changed})
            record.append({"batch": b, "cut": cut, "donors": donors})
            break
    why = "" if placed else "no replayed batch has a position whose following text could be changed (blocks shorter "
    why += "" if placed else "than 3 positions, or text of one repeated character)"
    return placed, sorted(record, key=lambda r: r["batch"]), why


def _batch_probe(feed: Feed, rng: np.random.Generator) -> tuple[dict[str, np.ndarray], list, dict] | None:
    """Samples of the feed in other company.

    (inputs, rows, record), or None when no batch can hold two.
    """
    sizes = [len(next(iter(x.values()))) for x in feed]
    full = max(sizes)
    groups: dict[tuple, list[int]] = {}
    for b, x in enumerate(feed):
        if sizes[b] == full and full >= 2:
            groups.setdefault(_shape(x), []).append(b)
    pairs = [bs for bs in groups.values() if len(bs) >= 2]
    if pairs:  # two full batches mixed and reordered: the feed's own size and shapes
        bs = pairs[int(rng.integers(len(pairs)))]
        a, c = (int(v) for v in rng.choice(bs, 2, replace=False))
        keep = np.sort(rng.choice(full, full // 2, replace=False))
        take = np.sort(rng.choice(full, full - full // 2, replace=False))
        rows = [(a, int(r)) for r in keep] + [(c, int(r)) for r in take]
        rows = [rows[i] for i in rng.permutation(full)]
        kind = {"regrouped": [a, c]}
    else:  # one sample a batch (or one batch): consecutive samples reversed, one fewer, sent last
        alike = [b for b, x in enumerate(feed) if _sample_shape(x) == _sample_shape(feed[0])]
        every = [(b, r) for b in alike for r in range(sizes[b])]
        if len(every) < 2:
            return None
        k = min(PROBE_SAMPLES, len(every))
        start = int(rng.integers(0, len(every) - k + 1))
        rows = every[start : start + k][::-1][:-1]
        kind = {"reversed": [list(rows[-1]), list(rows[0])]}
    inputs = {name: np.concatenate([feed[b][name][r : r + 1] for b, r in rows]) for name in feed[0]}
    return inputs, rows, {**kind, "size": len(rows)}


def plan(feed: Feed, causal: str | None, secret: str) -> Plan:
    """The probes for one scored feed (``feed``: the inputs the scorer sends, in order).

    A pure function of the feed and the secret, so the positions recorded after scoring can be
    checked by anyone holding both.
    """
    rng = np.random.default_rng(int(secret, 16))
    n = len(feed)
    stretches = _stretches(n, rng)
    placed, causal_record, unchecked = _causality(feed, causal, stretches, rng) if causal else ({}, [], "")
    promise = HISTORY if n > 1 else DETERMINISM
    # a short feed's stretches may hold no more batches than the causality probes: those batches are
    # then replayed as well (the probe follows its batch), so that every plan keeps a plain replay
    # whatever the secret
    both = len(placed) >= sum(e - s for s, e in stretches)
    probes: list[Probe] = []
    for i, (s, e) in enumerate(stretches):
        for b in range(s, e):
            rows = tuple((b, r) for r in range(len(next(iter(feed[b].values())))))
            if b not in placed or both:
                probes.append(Probe(promise, feed[b], rows, i, None, f"batch {b}"))
            if b in placed:
                _, cut, inputs = placed[b]
                probes.append(Probe(CAUSALITY, inputs, rows, i, cut, f"batch {b}, cut after position {cut}"))
    record: dict = {"causality": causal_record} if causal else {}
    if unchecked:  # causality promised, but this feed allows no probe: said in the result, not left out silently
        record["unchecked"] = {CAUSALITY: unchecked}
    batch = _batch_probe(feed, rng) if feed else None
    if batch is not None:
        inputs, rows, record["batch_independence"] = batch
        probes.append(Probe(BATCH, inputs, tuple(rows), None, None, f"{len(rows)} samples in one batch"))
    return Plan(secret, n, tuple(stretches), tuple(probes), record)


REASONS = {
    DETERMINISM: "the same inputs gave different outputs in a fresh predictor (the model is not deterministic)",
    HISTORY: "outputs changed with what the predictor had been sent before: a fresh predictor replaying stretches "
    "of the feed in order answered differently (a model must not learn from the evaluation inputs, and must be "
    "deterministic)",
    BATCH: "a sample's outputs changed with the other samples in its batch (outputs must not depend on them)",
    CAUSALITY: "outputs up to a position changed when only later positions did (the model is not causal)",
}


def judge(
    found: Plan, answers: list[np.ndarray], outputs: list[np.ndarray], device: str, tol: Tolerance | None = None
) -> list[str]:
    """Each broken promise in words (empty: all kept).

    ``answers`` are the fresh predictor's, probe by probe; ``tol``: :func:`tolerance` (the device's
    default when None).
    """
    tol = tol or tolerance(device)
    bad: dict[str, list[str]] = {}
    for probe, got in zip(found.probes, answers, strict=True):
        limit = tol.batch if probe.promise == BATCH else tol.replay
        why = disagreement(probe.view(got), probe.view(probe.expected(outputs)), device, limit, tol.mismatch)
        if why:
            bad.setdefault(probe.promise, []).append(f"{probe.where}: {why}")
    if DETERMINISM in bad or HISTORY in bad:
        bad.pop(CAUSALITY, None)  # the replay already differed there: a causality verdict would not be about causality
    out = []
    for promise in (DETERMINISM, HISTORY, BATCH, CAUSALITY):
        if promise in bad:
            asked = sum(p.promise == promise for p in found.probes)
            out.append(f"{REASONS[promise]} ({len(bad[promise])} of {asked} probes differ; first {bad[promise][0]})")
    return out


def disagreement(
    got: np.ndarray, expected: np.ndarray, device: str, limit: float | None = None, mismatch: float | None = None
) -> str | None:
    """Why ``got`` does not match ``expected``, or None.

    Within ``limit`` (relative to its scale; the device's replay tolerance when None) and
    ``mismatch`` (integer outputs).
    """
    limit = tolerance(device).replay if limit is None else limit
    mismatch = MISMATCH[device] if mismatch is None else mismatch
    if got.shape != expected.shape:
        return f"shape {got.shape} instead of {expected.shape}"
    if expected.dtype.kind == "f" or got.dtype.kind == "f":
        a, b = got.astype(np.float64), expected.astype(np.float64)
        scale = max(float(np.abs(b).max(initial=0.0)), 1e-6)
        err = float(np.abs(a - b).max(initial=0.0)) / scale
        return None if err <= limit else f"max relative difference {err:.3g} (tolerance {limit:.3g})"
    frac = float(np.mean(got != expected)) if got.size else 0.0
    return None if frac <= mismatch else f"{frac:.1%} of the outputs differ"
