"""Nothing an agent starts outlives its sandbox, and the watchdog's grace period still holds inside one.

The attack: a double-forked ``setsid env -i sleep`` leaves the agent's session and drops the run token, so
none of the nets of :mod:`bench.processes` (process group, subreaper tree, token) finds it; outside a
sandbox it outlives the run (the first test shows it). Inside, it lives in the sandbox's PID namespace,
which the kernel empties when the namespace's first process dies, and bwrap dies with its parent.
Every process is identified by a unique marker in its command line (the sleep's duration).
"""

from __future__ import annotations

import contextlib
import os
import random
import shlex
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import psutil
import pytest

from bench.pipeline.watch import Watchdog
from bench.processes import TOKEN_VAR, end_tree
from bench.sandbox import Sandbox

pytestmark = pytest.mark.usefixtures("bwrap_ok")
GONE_WITHIN_S = 5.0
# as bench.pipeline.launch gives an agent: this Python first on PATH (a pyenv's shims are not in the view)
AGENT_ENV = {**os.environ, "PATH": os.pathsep.join((os.path.dirname(sys.executable), os.environ.get("PATH", "")))}


def marker() -> str:
    """A sleep duration no other process on the machine has in its command line."""
    return f"1000.{random.randrange(10**8, 10**9)}"


def alive(mark: str) -> list[psutil.Process]:
    """Running processes with ``mark`` as an argument of its own (the sleeps, not the shells that start them)."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if mark in (p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(p)
    return found


def gone(pid: int) -> bool:
    """No process ``pid`` runs. A zombie counts as gone: it runs nothing and holds nothing. (When an earlier
    in-process launch made pytest a subreaper, an orphaned bwrap becomes pytest's zombie: reap it.)"""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_until(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


def escape(mark: str) -> str:
    """bash for inside: a process that leaves the session, scrubs its environment and is re-parented."""
    return f"(setsid env -i sleep {mark} &)"


def test_without_a_sandbox_the_escaped_process_survives_end_tree():
    """The attack is real: outside a sandbox the harness's end of a run does not find it."""
    mark, token = marker(), uuid.uuid4().hex
    proc = subprocess.Popen(
        ["bash", "-c", f"{escape(mark)}; sleep 1000"],
        env={**os.environ, TOKEN_VAR: token},
        start_new_session=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert wait_until(lambda: alive(mark), 10)
        end_tree(proc.pid, token, term_timeout=1.0)
        proc.wait(5)
        time.sleep(0.5)
        assert alive(mark), "the escape no longer escapes: this test no longer shows the attack"
    finally:
        for p in alive(mark):
            p.kill()


def test_killing_bwrap_ends_every_process_of_the_sandbox(harness, policy_of):
    mark = marker()
    with Sandbox(policy_of(harness)) as box:
        proc = subprocess.Popen(
            box.wrap(["bash", "-c", f"{escape(mark)}; sleep 1000"]), start_new_session=True, stdin=subprocess.DEVNULL
        )
        try:
            assert wait_until(lambda: alive(mark), 10)
            (escaped,) = alive(mark)
            assert os.getsid(escaped.pid) != proc.pid and TOKEN_VAR not in escaped.environ()  # out of every net
            proc.kill()  # what end_tree's SIGKILL does to the root of the run
            proc.wait(5)
            assert wait_until(lambda: not alive(mark), GONE_WITHIN_S), alive(mark)
        finally:
            proc.kill()


STAND_IN = """
import sys, time
from pathlib import Path
from bench.agents.command import CommandAgent
from bench.pipeline.launch import launch
from bench.pipeline.workspace import Workspace
from bench.runspec import RunSpec

ws = Workspace(Path(sys.argv[1]), task=None)
for d in (ws.path, ws.checkpoints, ws.spool_dir):
    d.mkdir(parents=True, exist_ok=True)
spec = RunSpec("stand-in", "command", budget_s=600, device="cpu", options={"command": sys.argv[2]}, console=False)
agent = launch(CommandAgent(), ws, spec)
print(agent.proc.pid, agent.sandboxed, flush=True)
time.sleep(1000)
"""


def test_sigkill_of_the_harness_leaves_nothing_alive(harness):
    """A harness stand-in launches the command agent through bench.pipeline.launch (sandboxed, as a run
    does); the agent starts an escaping process and a training-like child; the harness is SIGKILLed. Within
    5 s no process of the run is left: bwrap dies with its parent, the namespace with bwrap."""
    mark, mark2 = marker(), marker()
    command = f"{escape(mark)}; sleep {mark2} & sleep 1000"
    harness_proc = subprocess.Popen(
        [sys.executable, "-c", STAND_IN, str(harness.run_dir), command],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        bwrap_pid, sandboxed = harness_proc.stdout.readline().split()
        assert sandboxed == "True"
        assert wait_until(lambda: alive(mark) and alive(mark2), 20)
        assert psutil.Process(int(bwrap_pid)).ppid() == harness_proc.pid
        harness_proc.kill()
        harness_proc.wait(5)
        assert wait_until(lambda: not alive(mark) and not alive(mark2), GONE_WITHIN_S), alive(mark) + alive(mark2)
        assert wait_until(lambda: gone(int(bwrap_pid)), GONE_WITHIN_S)
    finally:
        harness_proc.kill()
        for p in alive(mark) + alive(mark2):
            p.kill()


def test_when_the_agent_exits_its_leftovers_end_with_the_sandbox(harness, policy_of):
    mark = marker()
    with Sandbox(policy_of(harness)) as box:
        proc = subprocess.Popen(box.wrap(["bash", "-c", f"{escape(mark)}; sleep 0.5; exit 3"]), start_new_session=True)
        assert proc.wait(20) == 3  # the agent's exit status comes through
        assert wait_until(lambda: not alive(mark), GONE_WITHIN_S)


CHECKPOINT_ON_TERM = textwrap.dedent("""
    import pathlib, signal, time
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    pathlib.Path("ready").write_text("1")
    while not stop:
        time.sleep(0.05)
    time.sleep(1.5)  # writing the last checkpoint, within the grace period
    pathlib.Path("last.ckpt").write_text("saved")
""")


def test_the_grace_period_holds_inside_the_sandbox(harness, policy_of):
    """The real watchdog: SIGTERM to the group at the budget; the agent dies of it at once, but the script it
    started gets its grace period to write a last checkpoint (with a bare --unshare-pid sandbox, or bwrap
    dying of the SIGTERM, it would be SIGKILLed at once), then the sandbox ends by itself."""
    agent = f"python -c {shlex.quote(CHECKPOINT_ON_TERM)} & sleep 1000"
    with Sandbox(policy_of(harness)) as box:
        proc = subprocess.Popen(
            box.wrap(["bash", "-c", agent]), start_new_session=True, stdin=subprocess.DEVNULL, env=AGENT_ENV
        )
        assert wait_until(lambda: (harness.ws / "ready").exists(), 20)
        dog = Watchdog(proc, budget_s=0.5, grace_s=10, token=None).start()
        proc.wait(30)
        dog.stop()
    assert dog.timed_out and dog.killed_at is None  # everything exited within the grace period, no SIGKILL
    assert (harness.ws / "last.ckpt").read_text() == "saved"
    assert proc.returncode == 128 + signal.SIGTERM  # the agent (bash) died of the SIGTERM


def test_the_grace_period_ends_with_sigkill_of_everything(harness, policy_of):
    """A script that ignores SIGTERM keeps the sandbox up through the grace period; then the watchdog's SIGKILL
    of the tree ends it and its detached helpers."""
    mark = marker()
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(1000)"
    agent = f"{escape(mark)}; python -c {shlex.quote(stubborn)} & sleep 1000"
    with Sandbox(policy_of(harness)) as box:
        proc = subprocess.Popen(
            box.wrap(["bash", "-c", agent]), start_new_session=True, stdin=subprocess.DEVNULL, env=AGENT_ENV
        )
        assert wait_until(lambda: alive(mark), 20)
        t0 = time.monotonic()
        dog = Watchdog(proc, budget_s=0.5, grace_s=2, token=None).start()
        proc.wait(30)
        dog.stop()
        assert dog.killed_at is not None and 2.0 <= time.monotonic() - t0 < 15
        assert wait_until(lambda: not alive(mark), GONE_WITHIN_S)
