"""Which host process a traced script is, when its spool gives the pid it sees inside the sandbox.

The tracer writes ``os.getpid()``. Inside ``bwrap --unshare-pid`` that is the number in the
sandbox's PID namespace (often 4: bwrap's init is 1, the launcher 2, the agent's shell 3), which on
the host names an unrelated process, often a kernel thread: sampled as it was, every script's CPU
and memory read 0. The harness sees the run's processes on the host (the sandbox's root and its
descendants, or the processes carrying the run token), and the ``NSpid:`` line of ``/proc/<host
pid>/status`` lists a process's pid in each namespace from the host's to its own, so its last field
is the pid the process itself sees.

The spool is the agent's: a script may claim any pid and any start time. A host process is bound to
a script only when it (1) is one of the run's processes (the harness's own view, never the spool's),
(2) has the claimed pid in its innermost namespace, (3) was created no later than the script says it
started (a number used again after a process exited belongs to a later process) and (4) runs a file
of the script's name (its command line, which a script cannot change for another process). So a
spool can point the harness at no process outside its run, and inside the run only at a process
running a script of the same name. A binding holds while that process (pid and creation time) lives
and is never moved to a later process with the same number
(:class:`~bench.tracking.sysmetrics.SystemMetrics`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import psutil

# psutil's creation times count from /proc/stat's boot time, a whole second: a script's own clock
# may read up to a second before the host's figure for its creation (and the tracer runs ~0.05 s
# after it)
START_SLACK_S = 2.0


def inner_pid(pid: int) -> int | None:
    """The pid that host process ``pid`` sees for itself (the last ``NSpid:`` field).

    None when it cannot be read (the process ended, or a kernel older than 4.1 without the line:
    then no script is bound).
    """
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    fields = line.split()[1:]
                    return int(fields[-1]) if fields else None
    except (OSError, ValueError):
        return None
    return None


def runs_script(cmdline: list[str], script: str) -> bool:
    """Whether a command line runs a file named ``script``.

    ``python -u ./run_1.py --lr 3`` runs ``run_1.py``.
    """
    return bool(script) and any(os.path.basename(arg) == script for arg in cmdline[1:])


def bind(procs: Iterable[psutil.Process], pid: int, started: float, script: str) -> psutil.Process | None:
    """The one process of ``procs`` that is the script the spool describes, or None.

    ``procs`` are the run's processes as the harness sees them. The script's is ``pid`` in its
    innermost namespace, created by ``started`` (+ the clocks' slack), running ``script``; None when
    no process is, or when more than one could be (nothing is sampled rather than the wrong
    process).
    """
    found = []
    for proc in procs:
        try:
            if inner_pid(proc.pid) != pid or proc.create_time() > started + START_SLACK_S:
                continue
            if proc.status() == psutil.STATUS_ZOMBIE or not runs_script(proc.cmdline(), script):
                continue
        except psutil.Error:
            continue
        found.append(proc)
    return found[0] if len(found) == 1 else None
