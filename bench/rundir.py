"""A run directory's life cycle.

Which state a run is in, read from its directory alone, in one table.

Everything that must know whether a run is done, alive, dead mid-way or never launched
(``bench run --resume``, ``bench record``, a campaign's jobs, executors and status line) asks
:class:`RunDir`, never a memory of what was launched, so that a process killed at any point finds
the truth again. The states, in the order they are told apart (:data:`STATES`):

==========  ========================================  ========================================
state       the directory holds                       what is done with it
==========  ========================================  ========================================
final       result.json (whatever its status), or a   never redone; one that cannot be read (of
            result.json or run.json that cannot be    an older toolkit's format, say) is never
            read (``Seen.note``)                      overwritten either
running     run.json whose harness is alive (pid +    left alone
            start time)
unfinished  run.json, no result.json, its harness     finished by ``bench run --resume``
            dead                                      (:func:`bench.resume.resume_run`)
stale       a directory without run.json: the         removed and started over (a campaign:
            harness died before it launched the       :func:`bench.campaign.job.discard`)
            agent
pending     no directory yet                          started
==========  ========================================  ========================================

A final run is **cut short** (:func:`cut_short`) when the harness, not the agent or its budget,
ended the agent's time (a Ctrl-C, ``scancel``, a preemption, a harness that died and was resumed
before the budget's end: the protocol's ``cut-short`` deviation);
``bench campaign run --redo-cut-short`` sets it aside and runs its cell again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.pipeline import state
from bench.result import ResultError, RunResult

FINAL, RUNNING, UNFINISHED, STALE, PENDING = "final", "running", "unfinished", "stale", "pending"
STATES = {  # state -> what is done with a run in it (the module's table, in the order they are told apart)
    FINAL: "never redone",
    RUNNING: "left alone: its harness is alive",
    UNFINISHED: "finished by bench run --resume",
    STALE: "removed and started over: nothing of the agent ran",
    PENDING: "started",
}
RESULT_FILE = "result.json"


@dataclass(frozen=True)
class Seen:
    """What a run's directory says about it."""

    state: str  # one of STATES
    result: RunResult | None = None
    note: str = ""  # for a final run whose result.json or run.json cannot be read: why

    @property
    def status(self) -> str:
        """The run's status; ``unreadable`` for a final run whose files cannot be read."""
        if self.result is not None:
            return self.result.status
        return "unreadable" if self.state == FINAL else self.state


class RunDir:
    """One run directory (``<workspaces>/<campaign>/<run id>``).

    Its state, its result, its run.json.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def seen(self) -> Seen:
        """The run's state (the module's table), read from its files."""
        if (self.path / RESULT_FILE).is_file():
            try:
                return Seen(FINAL, RunResult.load(self.path))
            except ResultError as e:  # written atomically: a newer schema or a hand edit; never redone either
                return Seen(FINAL, note=str(e))
        if state.path(self.path).is_file():
            try:
                alive = state.read(self.path).harness_alive()
            except state.RunStateError as e:
                return Seen(FINAL, note=str(e))  # not ours to touch: shown by status, never overwritten
            return Seen(RUNNING if alive else UNFINISHED)
        return Seen(STALE if self.path.exists() else PENDING)

    def result(self) -> RunResult | None:
        """The run's result if ``result.json`` is there (ResultError if it cannot be read).

        None if there is none.
        """
        if not (self.path / RESULT_FILE).is_file():
            return None
        return RunResult.load(self.path)

    def launched(self) -> bool:
        """run.json is there: the agent was launched (whatever became of it since)."""
        return state.path(self.path).is_file()

    def is_run_dir(self) -> bool:
        """A directory ``bench run`` made (run.json, result.json or the workspace in it)."""
        names = (state.STATE_FILE, RESULT_FILE, "workspace")
        return self.path.is_dir() and any((self.path / name).exists() for name in names)


def inspect(run_dir: Path) -> Seen:
    """The run's state from its directory (:meth:`RunDir.seen`)."""
    return RunDir(run_dir).seen()


def next_repeat(campaign_folder: Path, task_id: str, agent: str) -> int:
    """The repeat a new ``bench run`` of ``agent`` on ``task_id`` takes in a campaign.

    One above the highest that a run directory there already has (whatever its state: a run being
    made, died or finished keeps its number), 1 in an empty campaign. Two ``bench run``s into one
    campaign are then r1 and r2, never two r1s told apart only by the time in their folder's name.
    """
    from bench.pipeline.workspace import repeat_of

    names = (p.name for p in campaign_folder.iterdir() if p.is_dir()) if campaign_folder.is_dir() else ()
    taken = [r for name in names if (r := repeat_of(name, task_id, agent)) is not None]
    return max(taken, default=0) + 1


def cut_short(result: RunResult) -> bool:
    """The harness, not the agent or its budget, ended the agent's time.

    The run's ``cut-short`` deviation (a Ctrl-C, ``scancel``, a preemption, or a harness that died
    and was resumed before the budget's end).
    """
    from bench import protocol
    from bench.pipeline.record import deviations
    from bench.tasks import get_task

    return any(d.kind == protocol.CUT_SHORT for d in deviations(result, get_task(result.run.task).budget_s))
