"""Process control of one agent run: find its whole process tree, end it, reap it.

Why more than ``proc.kill()``: agents start training scripts and may detach them (nohup, setsid,
double fork, ``&`` in a shell that exits). Three nets catch them: the agent runs in its own session
(``start_new_session``), :func:`become_subreaper` keeps orphans as children of the harness, and
``BENCH_RUN_TOKEN=<uuid>`` (in the agent's env only, never in the harness's ``os.environ``) is
inherited by descendants and found by :func:`find_tree`. A process that scrubs its environment *and*
leaves the session still escapes these nets (no audit detects it yet).

Used by the watchdog (the budget), the runner (the end of every run) and the optuna agent (ending a
pruned trial).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import time
from collections.abc import Iterable
from contextlib import suppress

import psutil

from bench.protocol import RUN_TOKEN_VAR

log = logging.getLogger(__name__)

TOKEN_VAR = RUN_TOKEN_VAR
KILL_WAIT_S = 5.0  # after SIGKILL: a process holding a GPU context can take seconds to be torn down


def become_subreaper() -> bool:
    """Re-parent orphans to this process instead of init so detached scripts stay reachable.

    False if impossible.

    Process-wide; orphans that exit stay zombies of the harness until reaped (:func:`end_tree` reaps
    the run's).
    """
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
    """The root, its descendants, and same-user processes whose env carries ``token``.

    Those that left the tree.

    Never the harness itself, so a token leaking into its environment cannot make it kill itself.
    """
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


def running(proc: psutil.Process) -> bool:
    """Alive and not a zombie.

    A zombie has ended, it only waits for its parent to collect the status.
    """
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def describe(procs: Iterable[psutil.Process]) -> list[dict]:
    """pid, start time and command line of each process (for the evidence).

    Vanished ones are skipped.
    """
    out = []
    for proc in procs:
        with suppress(psutil.Error):
            out.append({"pid": proc.pid, "started": proc.create_time(), "argv": proc.cmdline()[:50]})
    return out


def signal_tree(root_pid: int, procs: Iterable[psutil.Process], sig: int) -> None:
    """Send ``sig`` to the root's process group (never our own) and to each process.

    Vanished ones are skipped.
    """
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
    """Survivors after up to ``timeout`` s.

    ``wait_procs`` reaps our children: fine for re-parented orphans, but a root that is our child is
    polled with ``waitid(WNOWAIT)``, else its ``Popen`` would report exit status 0.
    """
    me, roots, others = os.getpid(), [], []
    for p in procs:
        with suppress(psutil.Error):
            (roots if p.pid == root_pid and p.ppid() == me else others).append(p)
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        with suppress(psutil.Error):
            _, others = psutil.wait_procs(others, timeout=max(0.0, min(left, 0.25)))
        others = [p for p in others if running(p)]
        roots = [p for p in roots if not _exited_unreaped(p.pid)]
        if not (others or roots) or left <= 0:
            return others + roots
        if not others:
            time.sleep(min(left, 0.05))


def _reap(root_pid: int, pids: set[int]) -> None:
    """Collect the run's zombies that are our children (orphans re-parented to us), not the root.

    The ``Popen`` root is left to its ``Popen``.
    """
    with suppress(psutil.Error):
        for child in [c for c in psutil.Process().children() if c.pid != root_pid]:
            with suppress(OSError, psutil.Error):
                ours = child.pid in pids or os.getsid(child.pid) == root_pid or os.getpgid(child.pid) == root_pid
                if ours and child.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(child.pid, os.WNOHANG)


def end_tree(root_pid: int, token: str | None, *, term_timeout: float = 5.0) -> list[int]:
    """SIGTERM the run, give it ``term_timeout`` s, SIGKILL survivors; the pids ended.

    Survivors are looked for again (dying shells spawn).

    Used at the end of every run, timed out or not. Any process may vanish at any point; that is
    never an error.
    """
    seen = {p.pid: p for p in find_tree(root_pid, token) if running(p)}
    signal_tree(root_pid, seen.values(), signal.SIGTERM)
    survivors = _wait(list(seen.values()), term_timeout, root_pid)
    for rescan in (True, False):  # before SIGKILL: spawned during the wait; after: spawned during the kill
        fresh = [p for p in find_tree(root_pid, token) if p.pid not in {s.pid for s in survivors} and running(p)]
        survivors += fresh
        seen.update({p.pid: p for p in fresh})
        signal_tree(root_pid, survivors if rescan else fresh, signal.SIGKILL)
    left = _wait(survivors, KILL_WAIT_S, root_pid)
    if left:
        log.warning("processes survived SIGKILL for %.0f s: %s", KILL_WAIT_S, sorted(p.pid for p in left))
    _reap(root_pid, set(seen))
    return sorted(set(seen) - {p.pid for p in left})
