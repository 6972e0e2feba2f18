"""Tests of bench.pipeline.watch and bench.processes with real processes.

Written for a loaded 2-core CI machine: budgets of 1-2 s, generous deadlines, polling instead of fixed sleeps,
and no assertion on how long anything took except "stop() returns within seconds".
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from bench import processes
from bench.pipeline.watch import Watchdog
from bench.processes import TOKEN_VAR, end_tree, find_tree

ROOT = Path(__file__).resolve().parents[3]
DEADLINE_S = 60.0

# Writes its pid atomically to argv[1], then sleeps forever; with argv[2] == "ignore" it ignores SIGTERM.
SLEEPER = """
import os, signal, sys, time
if len(sys.argv) > 2 and sys.argv[2] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
tmp = sys.argv[1] + ".tmp"
with open(tmp, "w") as f:
    f.write(str(os.getpid()))
os.replace(tmp, sys.argv[1])
while True:
    time.sleep(3600)
"""


def wait_for(pred: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> None:
    """Poll ``pred`` until it holds; fail with ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


def gone(pid: int) -> bool:
    """Ended: no such process, or a zombie waiting for a parent (outside our control) to reap it."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def read_pid(path: Path) -> int:
    wait_for(path.exists, f"pid file {path.name}")
    return int(path.read_text())


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


@pytest.fixture
def token() -> str:
    return uuid.uuid4().hex


@pytest.fixture
def spawn(token: str) -> Iterator[Callable[..., subprocess.Popen]]:
    """Start an "agent" the way the runner does (own session, token in env); end everything left at teardown."""
    started: list[tuple[subprocess.Popen, str]] = []

    def _spawn(args: list[str], run_token: str = token) -> subprocess.Popen:
        env = {**os.environ, TOKEN_VAR: run_token}
        proc = subprocess.Popen(args, start_new_session=True, env=env, stdin=subprocess.DEVNULL)
        started.append((proc, run_token))
        return proc

    yield _spawn
    for proc, run_token in started:
        end_tree(proc.pid, run_token, term_timeout=1.0)
        proc.wait(timeout=DEADLINE_S)


def test_watchdog_ends_tree_with_grandchild_ignoring_sigterm(tmp_path: Path, token: str, spawn) -> None:
    sleeper = script(tmp_path, "sleeper.py", SLEEPER)
    child = script(
        tmp_path,
        "child.py",
        f"""
        import subprocess, sys
        subprocess.Popen([sys.executable, {str(sleeper)!r}, {str(tmp_path / "grandchild.pid")!r}, "ignore"])
        exec(open({str(sleeper)!r}).read())  # then behave as a plain sleeper (default SIGTERM handling)
        """,
    )
    agent = script(
        tmp_path,
        "agent.py",
        f"""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, {str(child)!r}, {str(tmp_path / "child.pid")!r}])
        while True:
            time.sleep(3600)
        """,
    )
    proc = spawn([sys.executable, str(agent)])
    pids = [proc.pid, read_pid(tmp_path / "child.pid"), read_pid(tmp_path / "grandchild.pid")]
    assert {p.pid for p in find_tree(proc.pid, token)} >= set(pids)

    wd = Watchdog(proc, 1.0, token=token, grace_s=1.0).start()
    assert proc.wait(timeout=DEADLINE_S) == -signal.SIGTERM  # the agent got SIGTERM first; exit status intact
    wd.stop(timeout=DEADLINE_S)  # lets the grace period play out, then the survivors are killed

    assert wd.timed_out and wd.budget_expired_at is not None
    assert wd.killed_at is not None and wd.killed_at >= wd.budget_expired_at
    assert pids[2] in wd.killed_pids  # the grandchild ignoring SIGTERM needed the SIGKILL
    for pid in pids:
        wait_for(lambda pid=pid: gone(pid), f"pid {pid} to end")


@pytest.mark.parametrize("how", ["setsid_popen", "bash_setsid_nohup"])
def test_end_tree_finds_detached_grandchild_by_token(tmp_path: Path, token: str, spawn, how: str) -> None:
    sleeper = script(tmp_path, "sleeper.py", SLEEPER)
    pid_file = tmp_path / "detached.pid"
    if how == "setsid_popen":
        agent = script(
            tmp_path,
            "agent.py",
            f"""
            import subprocess, sys
            subprocess.Popen([sys.executable, {str(sleeper)!r}, {str(pid_file)!r}], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            """,
        )
        proc = spawn([sys.executable, str(agent)])
    else:
        cmd = f'setsid nohup "{sys.executable}" "{sleeper}" "{pid_file}" >/dev/null 2>&1 & exit 0'
        proc = spawn(["bash", "-c", cmd])
    # another run's own token: a fixed one was ended by the teardown of this test's other case on a parallel worker
    bystander = spawn([sys.executable, str(sleeper), str(tmp_path / "bystander.pid")], run_token=uuid.uuid4().hex)

    detached = read_pid(pid_file)
    other = read_pid(tmp_path / "bystander.pid")
    assert proc.wait(timeout=DEADLINE_S) == 0  # its parent is gone ...
    assert os.getpgid(detached) != proc.pid  # ... and it left the agent's process group

    ended = end_tree(proc.pid, token, term_timeout=2.0)
    assert detached in ended
    wait_for(lambda: gone(detached), "the detached grandchild to end")
    assert not gone(other) and bystander.poll() is None  # a process of another run is left alone


def test_agent_exiting_before_budget_does_not_fire(token: str, spawn) -> None:
    proc = spawn([sys.executable, "-c", "pass"])
    wd = Watchdog(proc, 60.0, token=token, grace_s=1.0).start()
    proc.wait(timeout=DEADLINE_S)
    name = f"watchdog-{proc.pid}"
    # the thread notices the exit by itself within a tick or so
    wait_for(lambda: all(t.name != name for t in threading.enumerate()), "the watchdog thread to end")
    t0 = time.monotonic()
    wd.stop()
    assert time.monotonic() - t0 < 5.0
    assert not wd.timed_out and wd.budget_expired_at is None and wd.killed_at is None
    assert 0.0 < wd.elapsed_s < 60.0


def test_stop_before_budget_returns_promptly(tmp_path: Path, token: str, spawn) -> None:
    proc = spawn([sys.executable, str(script(tmp_path, "sleeper.py", SLEEPER)), str(tmp_path / "agent.pid")])
    wd = Watchdog(proc, 60.0, token=token, grace_s=1.0).start()
    read_pid(tmp_path / "agent.pid")
    t0 = time.monotonic()
    wd.stop()
    assert time.monotonic() - t0 < 5.0
    assert all(t.name != f"watchdog-{proc.pid}" for t in threading.enumerate())
    assert not wd.timed_out and proc.poll() is None  # stop() alone never signals the agent
    assert proc.pid in end_tree(proc.pid, token, term_timeout=2.0)


def test_on_tick_reports_decreasing_time_left(tmp_path: Path, token: str, spawn) -> None:
    proc = spawn([sys.executable, str(script(tmp_path, "sleeper.py", SLEEPER)), str(tmp_path / "agent.pid")])
    ticks: list[tuple[float, float]] = []
    lock = threading.Lock()

    def on_tick(elapsed_s: float, left_s: float) -> None:
        with lock:
            ticks.append((elapsed_s, left_s))

    wd = Watchdog(proc, 60.0, token=token, on_tick=on_tick)
    wd.tick_s = 0.2
    wd.start()
    wait_for(lambda: len(ticks) >= 4, "four ticks")
    wd.stop()
    with lock:
        elapsed, left = zip(*ticks, strict=True)
    assert all(b < a for a, b in zip(left, left[1:], strict=False))
    assert all(b > a for a, b in zip(elapsed, elapsed[1:], strict=False))
    assert all(abs(e + x - 60.0) < 1e-6 for e, x in ticks)


def test_on_tick_failure_does_not_stop_the_watchdog(token: str, spawn) -> None:
    proc = spawn([sys.executable, "-c", "import time; time.sleep(3600)"])

    def broken(elapsed_s: float, left_s: float) -> None:
        raise RuntimeError("status line broke")

    wd = Watchdog(proc, 1.0, token=token, grace_s=1.0, on_tick=broken).start()
    proc.wait(timeout=DEADLINE_S)
    wd.stop(timeout=DEADLINE_S)
    assert wd.timed_out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER is Linux-only")
def test_subreaper_adopts_orphans_and_end_tree_reaps_them(tmp_path: Path, token: str) -> None:
    # Run in a separate harness process: becoming a subreaper is process-wide and would outlive this test.
    sleeper = script(tmp_path, "sleeper.py", SLEEPER)
    harness = script(
        tmp_path,
        "harness.py",
        f"""
        import os, subprocess, sys, time
        import psutil
        from bench.processes import become_subreaper, end_tree
        assert become_subreaper()
        cmd = 'setsid "{sys.executable}" "{sleeper}" "{tmp_path / "orphan.pid"}" & exit 0'
        env = {{**os.environ, "{TOKEN_VAR}": "{token}"}}
        proc = subprocess.Popen(["bash", "-c", cmd], start_new_session=True, env=env)
        proc.wait()
        while not os.path.exists("{tmp_path / "orphan.pid"}"):
            time.sleep(0.05)
        orphan = int(open("{tmp_path / "orphan.pid"}").read())
        assert psutil.Process(orphan).ppid() == os.getpid(), "orphan was not re-parented to the subreaper"
        assert orphan in end_tree(proc.pid, "{token}", term_timeout=2.0)
        assert not psutil.Process().children(), "zombie left behind"
        print("ok")
        """,
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, str(harness)], env=env, capture_output=True, text=True, timeout=DEADLINE_S, check=False
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_become_subreaper_off_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes.sys, "platform", "darwin")
    assert processes.become_subreaper() is False
