"""Collect (pipeline step 4; paper §3.3 step 5).

Scored checkpoints -> the best + the best of each 5-minute window.

A checkpoint is a file in the workspace's ``checkpoints/`` saved by the task helper
``save_checkpoint()``: a dict with the state dict, the ``build_model`` config, the script name, the
self-reported validation score and the metric name. The harness ranks by that self-reported score
(the official score comes later, from the isolated evaluation) and places each file in time by when
the harness first saw its *content* (:mod:`bench.pipeline.arrivals`), not by its name's first sight
(a placeholder overwritten later is the later model) nor by its modification time, which the agent
can set. The content read here must be the content that was timed: a file whose bytes differ from
the last identity the harness recorded is rejected, and the evaluation checks the staged copy
against the same sha256 (:func:`verify_copy`). A file whose modification time or own ``time`` field
is older than the run was copied in or back-dated, and is rejected with that reason; a symbolic link
is never a checkpoint.

The code travels with its checkpoint (:mod:`bench.pipeline.codetime`): given the run's snapshots,
each checkpoint carries the snapshot of the workspace's scripts taken when its content was seen,
which the evaluation stages. One with no complete snapshot is staged with the scripts as the run
left them, and placed no earlier than the newest of them (its ``code_note`` says so; the audit flags
it), so that the windows never use code written later.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Set
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from bench import untrusted
from bench.checksums import sha256
from bench.errors import BenchError
from bench.evidence import UNTIMED, Arrival
from bench.pipeline import checkpoint_meta
from bench.pipeline.arrivals import IN_PROGRESS, LISTING
from bench.pipeline.codetime import Index, Snapshot
from bench.tasks import Direction

WINDOW_S = 300.0  # the paper's 5-minute windows
CLOCK_SLACK_S = 1.0  # file systems store times coarsely: "before the run" means more than this before it


@dataclass(frozen=True)
class Checkpoint:
    """One scored checkpoint, as found on disk."""

    path: Path
    script: str
    val_score: float
    metric: str
    step: int | None
    saved_s: float  # seconds after the agent started: when the harness first saw this content
    sha256: str | None = None  # the content that was timed (None: no identity recorded); the evaluation checks it
    first_seen_s: float | None = None  # when its name was first seen, if earlier than its content (an overwrite)
    code: Snapshot | None = None  # the workspace's scripts when its content was seen: what the evaluation stages
    code_note: str | None = None  # why the scripts as the run left them are staged instead, and where that places it

    @property
    def window(self) -> int:
        """The 5-minute window the checkpoint falls in (0 for the first)."""
        return int(self.saved_s // WINDOW_S)

    def to_dict(self) -> dict:
        """The fields an :class:`~bench.result.Evaluation` carries.

        The hash goes into its official provenance.
        """
        d = asdict(self)
        del d["sha256"], d["first_seen_s"], d["code"], d["code_note"]
        d["path"], d["window"] = str(self.path), self.window
        return d


class NotACheckpoint(BenchError, ValueError):
    """A readable file that is not a scored checkpoint of this run (the message says why)."""


@dataclass(frozen=True)
class Rejected:
    """A file of ``checkpoints/`` that is not scored, and why."""

    path: Path
    reason: str


def read(path: Path, started_at: float, arrived_at: float | None = None) -> Checkpoint:
    """Read a checkpoint's metadata without its weights.

    And without torch: :mod:`bench.pipeline.checkpoint_meta`.

    ``arrived_at``: when the harness first saw the file's content (None: its modification time, for
    tools that read checkpoints outside a run). Raises :class:`NotACheckpoint` for a file that is
    not a scored checkpoint of this run.
    """
    payload = checkpoint_meta.load(path)  # without torch: the harness never imports it (issue #16)
    if payload is None:  # not torch's zip format (its legacy one): torch reads it, or refuses it
        import torch

        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    if not isinstance(payload, dict) or "state_dict" not in payload or "config" not in payload:
        raise NotACheckpoint("not a save_checkpoint() payload (needs state_dict and config)")
    score = float(payload.get("val_score", float("nan")))
    if not math.isfinite(score):
        raise NotACheckpoint(f"self-reported val_score is {score}")
    mtime = path.stat().st_mtime
    if mtime < started_at - CLOCK_SLACK_S:
        raise NotACheckpoint(f"modified {started_at - mtime:.0f} s before the run started: copied in or back-dated")
    saved = payload.get("time")
    if isinstance(saved, int | float) and saved < started_at - CLOCK_SLACK_S:
        raise NotACheckpoint(f"saved {started_at - saved:.0f} s before the run started (its own time): copied in")
    return Checkpoint(
        path=path,
        script=str(payload.get("script", "")),
        val_score=score,
        metric=str(payload.get("metric", "")),
        step=payload.get("step"),
        saved_s=(mtime if arrived_at is None else arrived_at) - started_at,
    )


def timed(path: Path, arrival: Arrival, started_at: float) -> tuple[float, str | None]:
    """(when the harness first saw the content ``path`` holds now, its sha256).

    Raises :class:`NotACheckpoint` when the bytes are not the last ones the harness recorded: they
    were never timed.

    The file is read once here even when its ``stat`` is the recorded one: the polls trust the ctime
    to notice a write, but bytes written again through a shared memory mapping move no time until
    the kernel writes them back (measured here: a swap under an unchanged stat), so only the hash
    vouches for them.
    """
    ident = arrival.identity
    if ident is None:  # recorded by a harness that kept no identities: its first sight, as then
        return arrival.at, None
    now = sha256(path)
    if now != ident.sha256:
        raise NotACheckpoint(
            f"{UNTIMED} (sha256 {ident.sha256[:12]} seen {arrival.at - started_at:.1f} s after the start, "
            f"{now[:12]} now): written after the harness's last look, or without moving its stat"
        )
    return arrival.at, now


def verify_copy(ckpt: Checkpoint, copy: Path) -> str:
    """The sha256 of ``copy``, a candidate staged for evaluation.

    It must be the content collect timed: raises :class:`NotACheckpoint` otherwise (the file changed
    after it was timed; it is not scored).
    """
    digest = sha256(copy)
    if ckpt.sha256 is not None and digest != ckpt.sha256:
        raise NotACheckpoint(
            f"the staged copy of {ckpt.path.name} is not the content the harness timed (sha256 {digest[:12]}, "
            f"recorded {ckpt.sha256[:12]} at {ckpt.saved_s:.1f} s): its bytes changed after they were timed"
        )
    return digest


def scan(
    directory: Path,
    started_at: float,
    metric: str,
    deadline_s: float | None = None,
    arrivals: Mapping[Path, Arrival] | None = None,
    scripts: Set[str] | None = None,
    code: Index | None = None,
) -> tuple[list[Checkpoint], list[Rejected]]:
    """Every readable scored checkpoint under ``directory``.

    The others with the reason they were skipped.

    ``arrivals`` (from :class:`~bench.pipeline.arrivals.Arrivals`): each file's first sight and when
    its current content was first seen; a file the harness never saw during the run, or whose bytes
    are not the last it recorded, is rejected. ``scripts``: the top-level workspace scripts that ran
    (traced or seen running) plus ``train.py``; a checkpoint naming any other code (``../x.py``, an
    absolute path, a file that never ran) is rejected, since its ``build_model`` is what the
    official evaluation would run. ``code``: the run's code snapshots
    (:mod:`bench.pipeline.codetime`): each checkpoint gets the one of its content, or is placed no
    earlier than the newest script it will be staged with (:func:`_with_code`); None: the scripts
    are staged as the run left them, with no placement (tools that collect outside a run).
    """
    found, rejected = [], []
    newest: list[tuple[str, float] | None] = []  # the newest script, looked up once when first needed
    listed, refused = untrusted.walk(Path(directory), LISTING)  # no link followed, bounded, no recursion
    for finding in refused:
        why = "a symbolic link, not a checkpoint file" if finding.what == untrusted.LINK else f"not read: {finding}"
        rejected.append(Rejected(Path(finding.path), why))
    for path in sorted(p for p in listed if not p.name.endswith(IN_PROGRESS)):
        if arrivals is not None and path not in arrivals:
            rejected.append(Rejected(path, "not seen in checkpoints/ while the run was going on"))
            continue
        try:
            at, digest = (None, None) if arrivals is None else timed(path, arrivals[path], started_at)
            ckpt = read(path, started_at, at)
        except Exception as e:  # a malformed file must not stop the collection of the others
            why = str(e) if isinstance(e, NotACheckpoint) else f"unreadable checkpoint: {type(e).__name__}: {e}"
            rejected.append(Rejected(path, why))
            continue
        if arrivals is not None:
            first = arrivals[path].first_seen - started_at
            ckpt = replace(ckpt, sha256=digest, first_seen_s=first if first < ckpt.saved_s else None)
        if code is not None:
            ckpt = _with_code(ckpt, code, started_at, newest)
        if scripts is not None and ckpt.script not in scripts:
            rejected.append(Rejected(path, f"names the script {ckpt.script[:200]!r}, not a workspace script that ran"))
        elif ckpt.metric != metric:
            rejected.append(Rejected(path, f"metric {ckpt.metric!r} is not the task's {metric!r}"))
        elif deadline_s is not None and ckpt.saved_s > deadline_s:
            rejected.append(Rejected(path, f"saved {ckpt.saved_s:.0f} s after start, past the deadline"))
        else:
            found.append(ckpt)
    return found, rejected


def _with_code(ckpt: Checkpoint, code: Index, started_at: float, newest: list) -> Checkpoint:
    """``ckpt`` with the snapshot of its content's time, or placed after its scripts.

    Lacking a snapshot, it is placed no earlier than the newest script it will be staged with (its
    ``ctime``, which no process can set back), and says why.
    """
    snap, why = code.snapshot(ckpt.path, ckpt.sha256)
    if snap is not None:
        return replace(ckpt, code=snap)
    if not newest:
        newest.append(code.newest())
    saved_s, note = ckpt.saved_s, f"{why}: staged with the scripts as the run left them"
    if newest[0] is not None and newest[0][1] - started_at > saved_s:
        saved_s = newest[0][1] - started_at
        note += f", and placed at {saved_s:.1f} s (when {newest[0][0]} last changed) instead of {ckpt.saved_s:.1f} s"
    return replace(ckpt, saved_s=saved_s, code_note=note)


@dataclass(frozen=True)
class Selection:
    """The candidates to evaluate: the overall best, each window's best, every checkpoint ranked."""

    best: Checkpoint | None
    windows: dict[int, Checkpoint]  # window index -> best checkpoint saved in that window
    # every scored checkpoint, best first: the next ones are scored in turn when the best cannot be
    # loaded
    ranked: tuple[Checkpoint, ...] = ()

    def candidates(self) -> list[tuple[str, Checkpoint]]:
        """(label, checkpoint) pairs to evaluate, the overall best first, each file once."""
        out = [("best", self.best)] if self.best else []
        for k, c in sorted(self.windows.items()):
            out.append((f"window-{k}", c))
        return out


def select(checkpoints: list[Checkpoint], direction: Direction) -> Selection:
    """The overall best by self-reported validation score, plus the best of each 5-minute window.

    Ties go to the earlier checkpoint. Each window keeps only its best, to preserve diversity
    along the run (the paper's anytime view).
    """

    def key(c: Checkpoint) -> tuple[float, float]:
        return (direction.rank_key(c.val_score), c.saved_s)

    if not checkpoints:
        return Selection(None, {})
    ranked = tuple(sorted(checkpoints, key=key))
    best = ranked[0]
    windows: dict[int, Checkpoint] = {}
    for c in checkpoints:
        if c.window not in windows or key(c) < key(windows[c.window]):
            windows[c.window] = c
    return Selection(best, windows, ranked)


@dataclass(frozen=True)
class Collected:
    """What the collect step found.

    The candidates to evaluate, and every file it could not use (with why).
    """

    found: list[Checkpoint]
    rejected: list[Rejected]
    selection: Selection


@dataclass(frozen=True)
class CollectInput:
    """What the collect step reads.

    Built by the runner (``runner.Run``) from the run and its agent's end.
    """

    directory: Path  # the workspace's checkpoints/
    started_at: float  # when the agent started (epoch seconds): every time is placed after it
    metric: str  # the task's metric: a checkpoint reporting another is rejected
    direction: Direction  # which way the metric improves: the ranking
    deadline_s: float | None = None  # seconds after the start (budget + grace); later checkpoints are rejected
    arrivals: Mapping[Path, Arrival] | None = None  # when each file's content was first seen (:func:`scan`)
    scripts: frozenset[str] | None = None  # the workspace scripts that ran, and train.py (:func:`scan`)
    code: Index | None = None  # the run's code snapshots (:mod:`bench.pipeline.codetime`)


def collect(given: CollectInput) -> Collected:
    """Scan for scored checkpoints that appeared before the deadline; select the candidates.

    The scan is :func:`scan`'s, with the input's fields.
    """
    found, rejected = scan(
        given.directory,
        given.started_at,
        given.metric,
        deadline_s=given.deadline_s,
        arrivals=given.arrivals,
        scripts=given.scripts,
        code=given.code,
    )
    return Collected(found, rejected, select(found, given.direction))
