"""One trial script as a process: its environment, its start, and its end through the harness's process control.

A trial (``python run_<k>.py``) runs in a session of its own with its output in ``run_<k>.log``, and carries a
``BENCH_RUN_TOKEN`` (:func:`trial_token`). Ending it is :func:`bench.processes.end_tree`, as the harness ends an
agent's tree: SIGTERM to its process group and to every process of its tree or carrying its token (so what it
detached with ``setsid`` or a double fork is found too, unless it scrubbed its environment), SIGKILL for survivors.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from contextlib import suppress
from pathlib import Path

import psutil

from bench.processes import KILL_WAIT_S, TOKEN_VAR, end_tree
from bench.protocol import from_harness

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the folder holding baselines/ (kept off the trials' path)
TERM_WAIT_S = 5.0  # after SIGTERM, before SIGKILL


def default_threads() -> int:
    """Half the cores this process may use (at least one): the trials run one at a time, and on a CPU a
    second intra-op thread fighting the harness, the evaluation or a neighbour for a core costs far more
    than it brings (DLinear on a busy 2-core machine: 16 s with one thread, 59 s with two)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // 2)


def trial_token() -> str:
    """The ``BENCH_RUN_TOKEN`` the trials carry and are ended by.

    Under the harness this process is the agent it launched, with the run's token, and its parent (the
    harness) never carries that token: the trials keep it, so the harness's nets (its launch monitor, the end
    of the run) find them as they find any script of the run. Otherwise (a shell or a test, with no token or
    one that our parent carries too) a fresh token, so that ending a trial can never reach beyond the trials.
    """
    token = from_harness(TOKEN_VAR)
    if token:
        try:
            parent = psutil.Process().parent()
            if parent is None or parent.environ().get(TOKEN_VAR) != token:
                return token
        except psutil.Error:
            pass  # cannot tell: a token of our own
    return f"optuna-{uuid.uuid4().hex}"


def trial_env(threads: int | None = None, token: str | None = None) -> dict[str, str]:
    """The harness's environment for the scripts, without the path entry that made this package importable.

    ``threads``: the intra-op threads of torch/OpenMP/MKL in the scripts (None or 0: as the environment says).
    ``token``: the scripts' ``BENCH_RUN_TOKEN`` (None: as the environment says).
    """
    env = dict(os.environ)
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    if token:
        env[TOKEN_VAR] = token
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != PACKAGE_ROOT]
    if parts:
        env["PYTHONPATH"] = os.pathsep.join(parts)
    else:
        env.pop("PYTHONPATH", None)
    return env


class TrialProcess:
    """``python <script>`` in the script's folder, in a new session, stdout and stderr appended to ``<script>.log``."""

    def __init__(self, script: Path, *, threads: int | None, token: str):
        self.script, self.token = script, token
        self.log = script.with_suffix(".log")
        self.started = time.time()
        with open(self.log, "ab") as out:  # the child has its own copy of the descriptor
            self.proc = subprocess.Popen(
                [sys.executable, script.name],
                cwd=script.parent,
                env=trial_env(threads, token),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def exit_code(self) -> int | None:
        return self.proc.returncode

    def exited(self, wait_s: float = 0.0) -> bool:
        """True once the script has exited (waiting up to ``wait_s`` for it)."""
        try:
            self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def end(self) -> list[int]:
        """End the script and whatever it started (``end_tree``), then collect its exit status; the pids ended.

        Safe after the script has exited, too: ``end_tree`` takes the pid for the script's only while that
        process carries the trial's token, and still finds the processes it left that carry the token.
        """
        pids = end_tree(self.proc.pid, self.token, term_timeout=TERM_WAIT_S)
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=KILL_WAIT_S)
        return pids
