"""Hard wall-clock budget per agent run (paper 3.3 step 4): a daemon watchdog thread with a grace period.

Why more than ``proc.kill()``: agents start training scripts and may detach them (nohup, setsid, double fork,
``&`` in a shell that exits). Three nets catch them: the agent runs in its own session (``start_new_session``),
:func:`become_subreaper` keeps orphans as children of the harness, and ``BENCH_RUN_TOKEN=<uuid>`` (in the agent's
env only, never in the harness's ``os.environ``) is inherited by descendants and found by :func:`find_tree`.
A process that scrubs its environment *and* leaves the session still escapes; the rule-6 audit covers that.

At the budget the whole tree gets SIGTERM so that scripts can finish writing a checkpoint; at budget + grace the
survivors get SIGKILL. Decision: the agent's session *is* the run, so when the agent exits before the budget the
runner calls :func:`end_tree` too and scripts it left behind are ended (they would hold the GPU of the next run
and write checkpoints after scoring). Runner sketch::

    proc = subprocess.Popen(cmd, start_new_session=True, env={**env, "BENCH_RUN_TOKEN": token})
    wd = Watchdog(proc, budget_s, token=token, on_tick=show_status).start()
    proc.wait()
    wd.stop()  # after a timeout this lets the grace play out (it ends early once the tree is empty)
    end_tree(proc.pid, token)
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from subprocess import Popen

import psutil

log = logging.getLogger(__name__)

TOKEN_VAR = "BENCH_RUN_TOKEN"
KILL_WAIT_S = 5.0  # after SIGKILL: a process holding a GPU context can take seconds to be torn down
Tick = Callable[[float, float], None]  # on_tick(elapsed_s, left_s)


def become_subreaper() -> bool:
    """Re-parent orphans to this process instead of init so detached scripts stay reachable; False if impossible.

    Process-wide; orphans that exit stay zombies of the harness until reaped (:func:`end_tree` reaps the run's)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # 36 == PR_SET_CHILD_SUBREAPER
        if libc.prctl(36, *(ctypes.c_ulong(v) for v in (1, 0, 0, 0))) == 0:
            return True
        log.warning("prctl(PR_SET_CHILD_SUBREAPER) failed: %s", os.strerror(ctypes.get_errno()))
    except (OSError, AttributeError) as exc:  # no libc / no prctl symbol
        log.warning("prctl unavailable: %s", exc)
    return False


def find_tree(root_pid: int, token: str | None) -> list[psutil.Process]:
    """The root, its descendants, and same-user processes whose env carries ``token`` (those that left the tree).

    Never the harness itself, so a token leaking into its environment cannot make it kill itself."""
    found: dict[int, psutil.Process] = {}
    with suppress(psutil.Error):
        root = psutil.Process(root_pid)
        if token is None or root.environ().get(TOKEN_VAR) == token:  # else the pid was reused: not our agent
            found = {p.pid: p for p in [root, *root.children(recursive=True)]}
    if token:
        uid = os.getuid()
        for proc in psutil.process_iter(["uids"]):
            with suppress(psutil.Error, OSError):
                uids = proc.info["uids"]
                if proc.pid not in found and uids and uids.real == uid and proc.environ().get(TOKEN_VAR) == token:
                    found[proc.pid] = proc
    found.pop(os.getpid(), None)
    return list(found.values())


def _running(proc: psutil.Process) -> bool:
    """Alive and not a zombie: a zombie has ended, it only waits for its parent to collect the status."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal_tree(root_pid: int, procs: Iterable[psutil.Process], sig: int) -> None:
    """Send ``sig`` to the root's process group (never our own) and to each process; vanished ones are skipped."""
    if root_pid > 1 and root_pid != os.getpgrp():
        with suppress(OSError):  # the group may be gone (or never was one): the per-process signals still apply
            os.killpg(root_pid, sig)
    for proc in procs:
        with suppress(psutil.Error):
            proc.send_signal(sig)  # psutil refuses to signal a reused pid


def _exited_unreaped(pid: int) -> bool:
    try:  # WNOWAIT: leave the status for the Popen that owns this child
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True  # already reaped by its Popen


def _wait(procs: list[psutil.Process], timeout: float, root_pid: int) -> list[psutil.Process]:
    """Survivors after up to ``timeout`` s. ``wait_procs`` reaps our children: fine for re-parented orphans, but a
    root that is our child is polled with ``waitid(WNOWAIT)``, else its ``Popen`` would report exit status 0."""
    me, roots, others = os.getpid(), [], []
    for p in procs:
        with suppress(psutil.Error):
            (roots if p.pid == root_pid and p.ppid() == me else others).append(p)
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        with suppress(psutil.Error):
            _, others = psutil.wait_procs(others, timeout=max(0.0, min(left, 0.25)))
        others = [p for p in others if _running(p)]
        roots = [p for p in roots if not _exited_unreaped(p.pid)]
        if not (others or roots) or left <= 0:
            return others + roots
        if not others:
            time.sleep(min(left, 0.05))


def _reap(root_pid: int, pids: set[int]) -> None:
    """Collect zombies of the run that are our children (orphans re-parented to us), except the ``Popen`` root."""
    with suppress(psutil.Error):
        for child in [c for c in psutil.Process().children() if c.pid != root_pid]:
            with suppress(OSError, psutil.Error):
                ours = child.pid in pids or os.getsid(child.pid) == root_pid or os.getpgid(child.pid) == root_pid
                if ours and child.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(child.pid, os.WNOHANG)


def end_tree(root_pid: int, token: str | None, *, term_timeout: float = 5.0) -> list[int]:
    """SIGTERM the run, give it ``term_timeout`` s, SIGKILL survivors (rescanning: dying shells spawn); pids ended.

    Used at the end of every run, timed out or not. Any process may vanish at any point; that is never an error."""
    seen = {p.pid: p for p in find_tree(root_pid, token) if _running(p)}
    _signal_tree(root_pid, seen.values(), signal.SIGTERM)
    survivors = _wait(list(seen.values()), term_timeout, root_pid)
    for rescan in (True, False):  # before SIGKILL: spawned during the wait; after: spawned during the kill
        fresh = [p for p in find_tree(root_pid, token) if p.pid not in {s.pid for s in survivors} and _running(p)]
        survivors += fresh
        seen.update({p.pid: p for p in fresh})
        _signal_tree(root_pid, survivors if rescan else fresh, signal.SIGKILL)
    left = _wait(survivors, KILL_WAIT_S, root_pid)
    if left:
        log.warning("processes survived SIGKILL for %.0f s: %s", KILL_WAIT_S, sorted(p.pid for p in left))
    _reap(root_pid, set(seen))
    return sorted(set(seen) - {p.pid for p in left})


class Watchdog:
    """Daemon thread enforcing ``budget_s`` on one agent run: SIGTERM at the budget, SIGKILL after ``grace_s``.

    A thread (not SIGALRM) so that it works while the main thread blocks in ``proc.wait()``, a daemon so that it
    never keeps the interpreter alive. Nothing raises out of it: failures are logged and it keeps enforcing."""

    tick_s: float = 1.0  # period of on_tick and of the checks; tests may lower it on the instance before start()

    def __init__(
        self, proc: Popen, budget_s: float, *, token: str | None, grace_s: float = 30.0, on_tick: Tick | None = None
    ) -> None:
        self.proc, self.budget_s, self.grace_s, self.token = proc, float(budget_s), float(grace_s), token
        self.on_tick = on_tick
        self.budget_expired_at: float | None = None  # time.time() stamps, for logs; deadlines use time.monotonic
        self.killed_at: float | None = None
        self.killed_pids: list[int] = []
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
    def elapsed_s(self) -> float:
        """Seconds since start(), frozen once the watchdog has finished."""
        with self._lock:
            if self._t0 is None:
                return 0.0
            return (self._t_end if self._t_end is not None else time.monotonic()) - self._t0

    def stop(self, *, let_grace_finish: bool = True, timeout: float | None = None) -> None:
        """End the thread; before the budget this returns at once.

        After the budget, by default the grace period plays out (ending early once the tree is empty): scripts were
        promised ``grace_s`` to write a checkpoint, and the agent exiting on SIGTERM must not cut that short.
        ``let_grace_finish=False`` cancels at once (e.g. on Ctrl-C); the caller then owns the cleanup."""
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
            # before the budget stop() ends the thread; after it only a cancel does (the grace is owed to scripts)
            expired = self.timed_out
            pause = min(self.tick_s, max(0.01, self.budget_s + (self.grace_s if expired else 0.0) - self.elapsed_s))
            if (self._cancel if expired else self._stop).wait(pause):
                break
        with self._lock:
            self._t_end = time.monotonic()

    def _step(self) -> bool:
        """One tick: act on the deadline that passed and report progress; True when the watchdog is done."""
        elapsed, pid = self.elapsed_s, self.proc.pid
        if not self.timed_out:
            if self.proc.poll() is not None:
                return True  # the agent exited by itself; the runner ends leftovers with end_tree
            if elapsed >= self.budget_s:
                with self._lock:
                    self.budget_expired_at = time.time()
                log.warning("budget of %.0f s expired for pid %s: SIGTERM to the tree", self.budget_s, pid)
                _signal_tree(pid, find_tree(pid, self.token), signal.SIGTERM)
        elif elapsed >= self.budget_s + self.grace_s:
            pids = end_tree(pid, self.token, term_timeout=0.0)  # SIGTERM went out at the budget already
            with self._lock:
                self.killed_at, self.killed_pids = time.time(), pids
            log.warning("grace of %.0f s over for pid %s: ended %s", self.grace_s, pid, pids)
            return True
        elif not any(_running(p) for p in find_tree(pid, self.token)):
            return True  # everything exited within the grace period
        if self.on_tick is not None:
            try:
                self.on_tick(elapsed, max(0.0, self.budget_s - elapsed))
            except Exception:  # a broken status line must not stop the watchdog: report once, then drop it
                log.warning("on_tick callback failed; no more ticks", exc_info=True)
                self.on_tick = None
        return False
