"""Watch (pipeline step 3; paper §3.3 step 4).

The hard wall-clock budget of one agent run, with a grace period.

At the budget the whole tree (:mod:`bench.processes`) gets SIGTERM so that scripts can finish
writing a checkpoint; at budget + grace the survivors get SIGKILL. Decision: the agent's session
*is* the run, so when the agent exits before the budget the runner calls
:func:`~bench.processes.end_tree` too and scripts it left behind are ended (they would hold the GPU
of the next run and write checkpoints after scoring). :func:`watch` does all of it for a launched
agent: start the :class:`Watchdog`, wait, let the grace play out after a timeout, end the tree, then
stop the launch monitor and the checkpoint arrivals and drain the agent's output.

The run's other limits are watched here too (:mod:`bench.sandbox.resource_limits`): the workspace's
size is measured every few seconds by a thread of its own (:class:`WorkspaceGuard`); passing the
limit is noted, passing it by :data:`~bench.sandbox.resource_limits.WORKSPACE_MARGIN` more ends the
run as the budget would (SIGTERM, the grace, SIGKILL), so a disk filling up costs the agent its
remaining time, not the machine its disk. At the end the run's cgroup is read for what the kernel
refused (memory, processes) and removed; every limit hit goes into :attr:`Watched.limits`, which
``result.json`` carries.

A model API that fails ends the run early the same way (:meth:`Watchdog.end`,
:attr:`Watched.ended_why`): at once when the metering gateway sees an answer that cannot heal, a
refused key (:mod:`bench.gateway.refusals`), after the health window when the CLI reports failures
that might (:mod:`bench.agents.health`).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen

from bench.errors import BenchError
from bench.gateway.refusals import STOP_GRACE_S
from bench.pipeline.launch import LaunchedAgent
from bench.processes import describe, end_tree, find_tree, running, signal_tree
from bench.runspec import GRACE_S
from bench.sandbox.resource_limits import WORKSPACE_CHECK_S, WORKSPACE_MARGIN, tree_bytes

log = logging.getLogger(__name__)

Tick = Callable[[float, float], None]  # on_tick(elapsed_s, left_s)


class Watchdog:
    """Daemon thread enforcing ``budget_s`` on one agent run.

    SIGTERM at the budget, SIGKILL after ``grace_s``.

    A thread (not SIGALRM) so that it works while the main thread blocks in ``proc.wait()``, a
    daemon so that it never keeps the interpreter alive. Nothing raises out of it: failures are
    logged and it keeps enforcing.
    """

    tick_s: float = 1.0  # period of on_tick and of the checks; tests may lower it on the instance before start()

    def __init__(
        self, proc: Popen, budget_s: float, *, token: str | None, grace_s: float = GRACE_S, on_tick: Tick | None = None
    ) -> None:
        self.proc, self.budget_s, self.grace_s, self.token = proc, float(budget_s), float(grace_s), token
        self.on_tick = on_tick
        self.budget_expired_at: float | None = None  # time.time() stamps, for logs; deadlines use time.monotonic
        self.killed_at: float | None = None
        self.killed_pids: list[int] = []
        self.ended_why: str | None = None  # a limit ended the run before its budget (end())
        self._ended_at_s: float | None = None  # elapsed seconds at that end's SIGTERM
        self._lock = threading.Lock()
        self._stop = threading.Event()  # ends the thread before the budget
        self._cancel = threading.Event()  # ends it at any point, grace included
        self._t0: float | None = None
        self._t_end: float | None = None
        self._thread = threading.Thread(target=self._run, name=f"watchdog-{proc.pid}", daemon=True)

    def start(self) -> Watchdog:
        """Start the clock and the thread; returns self for chaining."""
        with self._lock:
            self._t0 = time.monotonic()
        self._thread.start()
        return self

    @property
    def timed_out(self) -> bool:
        """Whether the budget expired (the tree got SIGTERM)."""
        with self._lock:
            return self.budget_expired_at is not None

    @property
    def _term_at_s(self) -> float | None:
        """Elapsed seconds at which the tree got SIGTERM (the budget, or a limit's :meth:`end`).

        None before.
        """
        with self._lock:
            if self.budget_expired_at is not None:
                return self.budget_s if self._ended_at_s is None else min(self.budget_s, self._ended_at_s)
            return self._ended_at_s

    def end(self, why: str, grace_s: float | None = None) -> None:
        """End the run now as the budget would (SIGTERM to the tree, then the grace).

        A limit was passed. ``grace_s``: a shorter grace for an end where nothing of the agent's can
        be writing a checkpoint (a key refused before the model ever answered:
        :data:`bench.gateway.refusals.STOP_GRACE_S`).
        """
        with self._lock:
            if self._ended_at_s is not None or self.budget_expired_at is not None:
                return
            self.ended_why = why
            if grace_s is not None:
                self.grace_s = min(self.grace_s, float(grace_s))
            self._ended_at_s = (time.monotonic() - self._t0) if self._t0 is not None else 0.0
        log.warning("ending pid %s: %s", self.proc.pid, why)
        try:
            signal_tree(self.proc.pid, find_tree(self.proc.pid, self.token), signal.SIGTERM)
        except Exception:
            log.warning("could not signal the tree of pid %s", self.proc.pid, exc_info=True)

    @property
    def elapsed_s(self) -> float:
        """Seconds since start(), frozen once the watchdog has finished."""
        with self._lock:
            if self._t0 is None:
                return 0.0
            return (self._t_end if self._t_end is not None else time.monotonic()) - self._t0

    def stop(self, *, let_grace_finish: bool = True, timeout: float | None = None) -> None:
        """End the thread; before the budget this returns at once.

        After the budget, by default the grace period plays out (ending early once the tree is
        empty): scripts were promised ``grace_s`` to write a checkpoint, and the agent exiting on
        SIGTERM must not cut that short. ``let_grace_finish=False`` cancels at once (e.g. on
        Ctrl-C); the caller then owns the cleanup.
        """
        self._stop.set()
        if not let_grace_finish:
            self._cancel.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._cancel.is_set():
            try:
                if self._step():
                    break
            except Exception:  # the watchdog must survive anything and keep enforcing the budget
                log.warning("watchdog of pid %s: unexpected error", self.proc.pid, exc_info=True)
            # before the budget stop() ends the thread; after it only a cancel does (the grace is
            # owed to scripts)
            term = self._term_at_s
            expired = term is not None
            pause = min(self.tick_s, max(0.01, (term + self.grace_s if expired else self.budget_s) - self.elapsed_s))
            if (self._cancel if expired else self._stop).wait(pause):
                break
        with self._lock:
            self._t_end = time.monotonic()

    def _step(self) -> bool:
        """One tick.

        Act on the deadline that passed and report progress; True when the watchdog is done.
        """
        elapsed, pid, term = self.elapsed_s, self.proc.pid, self._term_at_s
        if term is None:
            if self.proc.poll() is not None:
                return True  # the agent exited by itself; the runner ends leftovers with end_tree
            if elapsed >= self.budget_s:
                with self._lock:
                    self.budget_expired_at = time.time()
                log.warning("budget of %.0f s expired for pid %s: SIGTERM to the tree", self.budget_s, pid)
                signal_tree(pid, find_tree(pid, self.token), signal.SIGTERM)
        elif elapsed >= term + self.grace_s:
            pids = end_tree(pid, self.token, term_timeout=0.0)  # SIGTERM went out at the budget already
            with self._lock:
                self.killed_at, self.killed_pids = time.time(), pids
            log.warning("grace of %.0f s over for pid %s: ended %s", self.grace_s, pid, pids)
            return True
        elif not any(running(p) for p in find_tree(pid, self.token)):
            return True  # everything exited within the grace period
        if self.on_tick is not None:
            try:
                self.on_tick(elapsed, max(0.0, self.budget_s - elapsed))
            except Exception:  # a broken status line must not stop the watchdog: report once, then drop it
                log.warning("on_tick callback failed; no more ticks", exc_info=True)
                self.on_tick = None
        return False


class _Interrupted(BenchError):
    """The watchdog's signal to the waiting thread that a stop was asked.

    Control flow, never shown.
    """


class WorkspaceGuard:
    """A thread that measures the workspace and ends the run when it grows too large.

    It measures every :data:`WORKSPACE_CHECK_S` (or ten times the last measure's time, when that is
    longer) and notes when it passed ``limit``; past ``limit * (1 + WORKSPACE_MARGIN)`` it ends the
    run through the watchdog.
    """

    def __init__(self, workspace: Path, limit: int, watchdog: Watchdog, check_s: float = WORKSPACE_CHECK_S) -> None:
        self.workspace, self.limit, self.watchdog, self.check_s = Path(workspace), int(limit), watchdog, check_s
        self.end_at = int(self.limit * (1 + WORKSPACE_MARGIN))
        self.hit: dict | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-workspace-guard", daemon=True)

    def start(self) -> WorkspaceGuard:
        """Start measuring in a daemon thread; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the measuring."""
        self._stop.set()
        self._thread.join(timeout=30)
        if self.hit is None:  # one last measure: a file written just before the end counts too
            self.measure()

    def measure(self) -> int:
        """The workspace's size in bytes (noted past the limit; the run ends past its margin)."""
        t0 = time.monotonic()
        size = tree_bytes(self.workspace, stop_at=self.end_at)
        self._walk_s = time.monotonic() - t0
        if size > self.limit:
            if self.hit is None:
                self.hit = {
                    "limit": "workspace",
                    "value": self.limit,
                    "bytes": size,
                    "at_s": self._at(),
                    "ended": False,
                }
            self.hit["bytes"] = max(self.hit["bytes"], size)
            if size > self.end_at and not self.hit["ended"] and not self._stop.is_set():
                self.hit["ended"] = True
                mib = f"{size / 2**20:.0f} MiB, over its {self.limit / 2**20:.0f} MiB limit"
                self.watchdog.end(f"the workspace holds {mib}")
        return size

    def _at(self) -> float:
        return round(self.watchdog.elapsed_s, 1)

    def _run(self) -> None:
        self._walk_s = 0.0
        while not self._stop.wait(max(self.check_s, 10 * self._walk_s)):
            try:
                self.measure()
            except Exception:  # the guard must not take the run down; the next measure tries again
                log.warning("workspace guard: measure failed", exc_info=True)


@dataclass(frozen=True)
class Watched:
    """How the agent's time ended."""

    wall_time_s: float  # from the launch to the agent's exit (or its end by the watchdog)
    exit_code: int | None
    timed_out: bool  # the budget expired and the tree got SIGTERM
    interrupted: bool  # Ctrl-C or SIGTERM to the harness
    limits: dict = field(default_factory=dict)  # the run's limits: settings, how they were held, which were hit
    ended_why: str | None = None  # a limit ended the agent's time before its budget (the reason says which)


def watch(
    agent: LaunchedAgent,
    budget_s: float,
    grace_s: float,
    on_tick: Tick | None = None,
    stopped: Callable[[], bool] | None = None,
) -> Watched:
    """Wait for the agent under the budget; then end what the run left behind, drain its output.

    A Ctrl-C or SIGTERM to the harness ends the agent early; the run goes on to collect and record
    what it produced (the caller re-raises KeyboardInterrupt at the very end). ``stopped()`` true: a
    signal already came while the agent was being launched (:mod:`bench.termination`), so there is
    no wait at all.
    """
    watchdog = Watchdog(agent.proc, budget_s, grace_s=grace_s, token=agent.token, on_tick=on_tick).start()
    limits = agent.stream.limits
    guard = None
    if limits.workspace_bytes is not None:
        guard = WorkspaceGuard(agent.monitor.workspace, limits.workspace_bytes, watchdog).start()
    if getattr(agent.stream, "health", None) is not None:  # a model API failing for minutes ends the run early
        agent.stream.health.end_with(watchdog.end)
    if getattr(agent, "gateway", None) is not None:  # an answer that cannot heal (a refused key) ends it at once
        agent.gateway.end_with(lambda why: watchdog.end(why, grace_s=STOP_GRACE_S))
    interrupted = _wait(agent.proc, stopped)
    seconds = time.time() - agent.started_at
    watchdog.stop(let_grace_finish=not interrupted)
    if guard is not None:
        guard.stop()
    agent.monitor.scan()  # a last look before the tree is ended
    if agent.evidence is not None:  # what outlived the agent's session (rule 6: work after the agent was done)
        if watchdog.killed_pids:
            agent.evidence.note_processes("grace-over", [{"pid": p} for p in watchdog.killed_pids])
        agent.evidence.note_processes("end", describe(p for p in find_tree(agent.proc.pid, agent.token) if running(p)))
    end_tree(agent.proc.pid, agent.token)  # the session is over: scripts it left running end with it
    if agent.sandbox is not None:
        agent.sandbox.close()  # its network bridges and runtime folder; nothing of the run is left to use them
    agent.monitor.stop()
    agent.arrivals.stop()  # the last look at checkpoints/, now that nothing of the run writes there
    agent.stream.join(timeout=10)
    agent.status.close()
    hits = [*(agent.limits.hits() if agent.limits else []), *agent.stream.limits_hit()]
    if guard is not None and guard.hit is not None:
        hits.append(guard.hit)
    summary = {"settings": limits.to_dict(), **(agent.limits.describe() if agent.limits else {}), "hit": hits}
    if agent.limits is not None:
        agent.limits.remove()
    return Watched(
        round(seconds, 3), agent.proc.returncode, watchdog.timed_out, interrupted, summary, watchdog.ended_why
    )


def _wait(proc: Popen, stopped: Callable[[], bool] | None = None) -> bool:
    """Wait for the agent; a Ctrl-C or SIGTERM to the harness ends the wait early.

    Returns True if interrupted.

    Both signals get a handler of their own for the wait only (the run's
    :class:`bench.termination.Termination` notes signals without raising once the agent is
    launched). A signal landing after the agent exited, while the handlers are put back, is handed
    on to the handler restored (the run stops after its record, but the agent, which had finished,
    was not interrupted).
    """
    hit: dict[str, object] = {"waiting": True, "late": None}

    def on_term(signum, frame):
        if hit["waiting"]:
            raise _Interrupted
        hit["late"] = signum

    old = {}
    interrupted = False
    try:
        if threading.current_thread() is threading.main_thread():
            old = {sig: signal.signal(sig, on_term) for sig in (signal.SIGTERM, signal.SIGINT)}
        if stopped is not None and stopped():
            raise _Interrupted
        proc.wait()
        hit["waiting"] = False
    except (KeyboardInterrupt, _Interrupted):
        hit["waiting"], interrupted = False, True
    finally:
        hit["waiting"] = False
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if hit["late"] is not None:
        signal.raise_signal(hit["late"])
    if interrupted:
        print("\n[bench] interrupted: ending the agent, then collecting and recording what it produced", flush=True)
    return interrupted
