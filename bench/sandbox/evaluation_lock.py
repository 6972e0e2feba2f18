"""No evaluation beside another run's live agent on one machine (issue 38): a machine-wide lock.

Why: a predictor reads files that every sandbox shares (the venv, ``/usr``), and an agent of another
run on the same machine can time its own first touches of them while the predictor runs: the pages
the predictor loaded are fast. No filter can deny a timed read (measured: 48 of 48 T6 test rows
received that way, docs/sandbox-and-rules.md), and the same holds for an agent's inotify watch on a
file the predictor opens. The scorer drops the pages its predictors loaded once they end
(:meth:`.resource_limits.RunGroup.drop_page_cache`), so what remains is an agent that is live WHILE
a predictor runs. This module makes that not happen.

How: ``flock`` on one file per machine (``BENCH_EVAL_LOCK``, by default in ``/dev/shm``: every
user's and every run's harness sees the same file, no other machine does, and no sandbox sees it:
each gets its own ``/dev`` and ``/tmp``). Each run's harness holds it SHARED while its agent lives
(:func:`agent_alive`, the launch to the end of the watch); an evaluation holds it EXCLUSIVE
(:func:`evaluating`) after its own run's shared hold is gone (its agent has ended), so a run never
waits for itself, and two runs that end together evaluate one after the other. A second file
(``<lock>.gate``) gives a waiting evaluation precedence: an evaluation holds the gate exclusive from
its request to its end, and a launch passes the gate (shared, at once released) before its shared
hold, so no new agent starts while an evaluation waits or runs (without it, a campaign that starts
runs while others end would keep the lock shared for ever). ``flock`` locks go with the open file: a
harness that dies releases them, nothing stale.

Every wait is bounded (an evaluation: the run's evaluation budget; a launch: three of them): after
it the evaluation runs anyway and records that it was not isolated, so a stuck holder (another
user's process) costs time, never a run. ``BENCH_EVAL_BESIDE_AGENTS=1`` is the user's choice to
evaluate without waiting; recorded the same way.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bench import settings

EXCLUSIVE = "exclusive"  # no other run's agent was live during the evaluation
BESIDE = "beside-agents"  # the user chose to evaluate beside live agents (BENCH_EVAL_BESIDE_AGENTS=1)
NOT_ISOLATED = "not-isolated"  # the lock could not be had (waited its bound, or no lock file): evaluated anyway
LAUNCH_BOUND_X = 3  # a launch waits at most this many evaluation budgets for evaluations that hold the gate
NOTE_EVERY_S = 60.0  # a waiting evaluation's console line, again after this long
MARKER = "lock-wait.txt"  # in a run's directory while it waits: what it waits for (the campaign's status line)


@dataclass(frozen=True)
class Isolation:
    """How one run's evaluation stood to other runs' live agents.

    Each evaluation's result carries it.
    """

    state: str  # EXCLUSIVE, BESIDE or NOT_ISOLATED
    waited_s: float = 0.0
    why: str = ""

    @property
    def isolated(self) -> bool:
        """Whether no other run's agent was live during the evaluation."""
        return self.state == EXCLUSIVE

    def to_dict(self) -> dict:
        """The isolation as the evaluation's result records it."""
        return {"state": self.state, "waited_s": round(self.waited_s, 1), **({"why": self.why} if self.why else {})}


def lock_path() -> Path:
    """The lock file in force (``BENCH_EVAL_LOCK``)."""
    return settings.EVAL_LOCK.get()


def _open(path: Path) -> int:
    """A read-only descriptor of the lock file, made if missing.

    Readable by every user: ``flock`` needs no write access, and a file made by one user must serve
    the others. No link followed, regular files only: another user cannot point it elsewhere or hang
    the open on a FIFO. Raises OSError.
    """
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    for _ in range(5):
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            try:
                fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:  # made by another harness between the two opens
                continue
            os.fchmod(fd, 0o644)  # whatever this process's umask
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(f"{path} is not a regular file")
        return fd
    raise OSError(f"{path} kept appearing and vanishing")


def _take(
    fd: int, op: int, bound_s: float, on_wait: Callable[[float], None], stopped: Callable[[], bool] | None = None
) -> float | None:
    """``flock(fd, op)`` within ``bound_s`` seconds.

    The seconds waited, or None if it was not had by then. ``on_wait(waited)`` is called while it
    waits (the first time at once); ``stopped()`` true (a signal came to the run while it waits)
    ends the wait with KeyboardInterrupt, so that a stopped run need not wait an hour.
    """
    t0 = time.monotonic()
    pause = 0.05
    while True:
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
            return time.monotonic() - t0
        except BlockingIOError:
            pass
        waited = time.monotonic() - t0
        if waited >= bound_s:
            return None
        if stopped is not None and stopped():
            raise KeyboardInterrupt
        on_wait(waited)
        time.sleep(min(pause, bound_s - waited))
        pause = min(pause * 2, 1.0)


def _gate(path: Path) -> Path:
    return path.with_name(path.name + ".gate")


@contextlib.contextmanager
def agent_alive(
    bound_s: float,
    console: bool = True,
    label: str = "",
    run_dir: Path | None = None,
    stopped: Callable[[], bool] | None = None,
) -> Iterator[float | None]:
    """Hold the machine's lock shared while this run's agent lives (wrap its launch and watch).

    Other runs' evaluations wait for it. Yields the seconds this launch waited for evaluations that
    held the gate, or None when the lock could not be used (the agent runs anyway: an error here
    must not cost the run; said on the console). ``bound_s``: the run's evaluation budget (a launch
    waits at most :data:`LAUNCH_BOUND_X` of them); ``run_dir``: where :data:`MARKER` says what the
    run waits for, while it waits; ``stopped``: see :func:`_take`.
    """
    path = lock_path()
    main: int | None = None
    waited: float | None = None
    said = _announcer(console, label, "waits for another run's evaluation on this machine before its launch", run_dir)
    try:
        gate = _open(_gate(path))
        try:  # the gate is passed, then released at once: an evaluation may close it behind this launch
            waited = _take(gate, fcntl.LOCK_SH, bound_s * LAUNCH_BOUND_X, said, stopped)
            if waited is not None:
                main = _open(path)
                more = _take(main, fcntl.LOCK_SH, bound_s * LAUNCH_BOUND_X, said, stopped)
                waited = None if more is None else waited + more
        except BaseException:
            if main is not None:
                os.close(main)
            raise
        finally:
            os.close(gate)
            _unmark(run_dir)
        if waited is None and console:
            print(f"[bench] {label}: the evaluation lock {path} was held too long; the agent starts without it",
                  flush=True)  # fmt: skip
    except OSError as e:
        waited = None
        if console:
            print(f"[bench] {label}: the evaluation lock cannot be used ({e}); the agent starts without it",
                  flush=True)  # fmt: skip
    try:
        yield waited
    finally:
        if main is not None:
            os.close(main)  # the agent has ended: its shared hold goes, so that evaluations (its own first) may run


@contextlib.contextmanager
def evaluating(
    bound_s: float,
    console: bool = True,
    label: str = "",
    run_dir: Path | None = None,
    stopped: Callable[[], bool] | None = None,
) -> Iterator[Isolation]:
    """Hold the machine's lock exclusive for an evaluation.

    Wait (at most ``bound_s``) until no other run's agent is live, and let no agent start until it
    ends. Call it after this run's own :func:`agent_alive` has ended. Yields the
    :class:`Isolation` the evaluation had; it evaluates in every case. ``run_dir``, ``stopped``:
    as for :func:`agent_alive`.
    """
    if settings.EVAL_BESIDE_AGENTS.get():
        yield Isolation(BESIDE, why="BENCH_EVAL_BESIDE_AGENTS=1: evaluated beside other runs' live agents, if any")
        return
    path = lock_path()
    t0 = time.monotonic()
    said = _announcer(console, label, f"waits for other runs' live agents on this machine to end (at most "
                      f"{bound_s:.0f} s; BENCH_EVAL_BESIDE_AGENTS=1 evaluates beside them)", run_dir)  # fmt: skip
    try:
        with _HELD.mutex:  # threads of one process (bench verify --jobs) share one exclusive hold: evaluations
            if _HELD.fds and _HELD.path == path:  # beside each other are no channel to an agent: none waits
                iso = Isolation(EXCLUSIVE, time.monotonic() - t0)
            else:
                _HELD.fds, iso = _exclusive(path, bound_s, said, t0, stopped)
                _HELD.path = path
            _HELD.users += 1
    finally:
        _unmark(run_dir)
    if console and (iso.waited_s >= 1 or not iso.isolated):
        print(f"[bench] {label}: evaluation {iso.state} after {iso.waited_s:.0f} s{'; ' + iso.why if iso.why else ''}",
              flush=True)  # fmt: skip
    try:
        yield iso
    finally:
        with _HELD.mutex:
            _HELD.users -= 1
            if not _HELD.users:
                for fd in reversed(_HELD.fds):
                    os.close(fd)
                _HELD.fds = []


class _Held:
    """This process's exclusive hold.

    Its descriptors (gate, lock), whose path, and how many evaluations use it.
    """

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.fds: list[int] = []
        self.path: Path | None = None
        self.users = 0


_HELD = _Held()


def _exclusive(
    path: Path, bound_s: float, said: Callable[[float], None], t0: float, stopped: Callable[[], bool] | None
) -> tuple[list[int], Isolation]:
    """The gate, then the lock, exclusive within ``bound_s``.

    The descriptors held (empty when not had) and the :class:`Isolation` that gave.
    """
    fds: list[int] = []
    try:
        fds.append(_open(_gate(path)))
        got = _take(fds[0], fcntl.LOCK_EX, bound_s, said, stopped)
        if got is not None:
            fds.append(_open(path))
            got = _take(fds[1], fcntl.LOCK_EX, max(0.0, bound_s - got), said, stopped)
    except OSError as e:
        for fd in fds:
            os.close(fd)
        return [], Isolation(NOT_ISOLATED, time.monotonic() - t0, f"the evaluation lock cannot be used: {e}")
    except BaseException:  # a signal: nothing held is left behind
        for fd in fds:
            os.close(fd)
        raise
    waited = time.monotonic() - t0
    if got is None:
        for fd in fds:
            os.close(fd)
        why = f"another run's agent or evaluation held {path} for {waited:.0f} s (the bound): evaluated beside it"
        return [], Isolation(NOT_ISOLATED, waited, why)
    return fds, Isolation(EXCLUSIVE, waited)


def _announcer(console: bool, label: str, what: str, run_dir: Path | None = None) -> Callable[[float], None]:
    """What a run says while it waits for a lock.

    A console line at the start and every :data:`NOTE_EVERY_S`, and its :data:`MARKER` file in
    ``run_dir`` (read by :func:`waits`).
    """
    next_at = [0.0]

    def say(waited: float) -> None:
        if waited >= next_at[0]:
            if console:
                print(f"[bench] {label}: {what}" + (f" ({waited:.0f} s so far)" if waited >= 1 else ""), flush=True)
            if run_dir is not None and not next_at[0]:
                with contextlib.suppress(OSError):
                    (run_dir / MARKER).write_text(what.split(" (")[0] + "\n")
            next_at[0] = waited + NOTE_EVERY_S

    return say


def _unmark(run_dir: Path | None) -> None:
    if run_dir is not None:
        with contextlib.suppress(OSError):
            (run_dir / MARKER).unlink(missing_ok=True)


def waits(run_dir: Path) -> str:
    """What the run in ``run_dir`` waits for now ("" when it does not).

    For a campaign's status line.
    """
    try:
        return (run_dir / MARKER).read_text()[:200].strip()
    except OSError:
        return ""
