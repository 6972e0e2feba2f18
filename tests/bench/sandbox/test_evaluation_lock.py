"""No evaluation beside another run's live agent on one machine (issue 38): the machine-wide lock's rules.

A run's harness holds the lock shared while its agent lives; an evaluation holds it exclusive. What a user relies
on: an evaluation does not start while another run's agent lives (in this process or another), it starts once
that agent has ended (or its harness died), a run never waits for its own agent, no agent starts while an
evaluation waits or runs, every wait is bounded and its result says so, and ``BENCH_EVAL_BESIDE_AGENTS=1`` skips
the wait and says that. Waits here are bounded by a second or two: the assertions are on what the evaluation
was told (its :class:`Isolation`), never on how long anything took.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from bench import settings
from bench.pipeline import collect, evaluate, workspace
from bench.sandbox import evaluation_lock as lock
from bench.tasks import data

ROOT = Path(__file__).resolve().parents[3]

HOLDER = """
import sys, time
from bench.sandbox import evaluation_lock
with evaluation_lock.agent_alive(60.0, console=False) as waited:
    print("live" if waited is not None else "no-lock", flush=True)
    sys.stdin.readline()  # the agent lives until the test says
"""


@pytest.fixture
def lock_file(tmp_path, monkeypatch):
    path = tmp_path / "machine" / "evaluation.lock"
    path.parent.mkdir()
    monkeypatch.setenv("BENCH_EVAL_LOCK", str(path))
    return path


def test_an_evaluation_waits_for_another_runs_live_agent_and_runs_once_it_has_ended(lock_file):
    events: list[str] = []
    holding, release = threading.Event(), threading.Event()

    def other_run() -> None:
        with lock.agent_alive(60.0, console=False):
            holding.set()
            release.wait(30)
            events.append("agent ended")

    agent = threading.Thread(target=other_run)
    agent.start()
    assert holding.wait(30)
    with lock.evaluating(0.5, console=False) as iso:  # bounded: it gives up and says so
        assert iso.state == lock.NOT_ISOLATED and "held" in iso.why
    result: list[lock.Isolation] = []

    def evaluation() -> None:
        with lock.evaluating(60.0, console=False) as iso:
            events.append("evaluating")
            result.append(iso)

    waiting = threading.Thread(target=evaluation)
    waiting.start()
    time.sleep(0.5)  # room for a broken lock to let the evaluation in while the agent lives (never a pass condition)
    release.set()
    agent.join(30)
    waiting.join(30)
    assert events == ["agent ended", "evaluating"]
    assert result[0].state == lock.EXCLUSIVE and result[0].isolated


def test_a_run_does_not_wait_for_its_own_agent_once_it_has_ended(lock_file):
    with lock.agent_alive(60.0, console=False) as waited:
        assert waited is not None
        with lock.evaluating(0.3, console=False) as inside:  # what the harness must not do: hold while evaluating
            assert inside.state == lock.NOT_ISOLATED
    with lock.evaluating(0.3, console=False) as iso:  # the order the harness keeps: the hold ends, then evaluate
        assert iso.state == lock.EXCLUSIVE


def test_no_agent_starts_while_an_evaluation_runs(lock_file):
    evaluating, done = threading.Event(), threading.Event()

    def evaluation() -> None:
        with lock.evaluating(60.0, console=False):
            evaluating.set()
            done.wait(30)

    t = threading.Thread(target=evaluation)
    t.start()
    assert evaluating.wait(30)
    with lock.agent_alive(0.1, console=False) as waited:  # bounded (3 x 0.1 s): it starts without the lock
        assert waited is None
    done.set()
    t.join(30)
    with lock.agent_alive(0.1, console=False) as waited:
        assert waited is not None


def test_evaluations_of_one_process_share_the_hold(lock_file):
    """bench verify --jobs: runs re-scored side by side in threads; no channel to an agent, so none waits."""
    with lock.evaluating(0.5, console=False) as first, lock.evaluating(0.5, console=False) as second:
        assert first.state == second.state == lock.EXCLUSIVE
        with lock.agent_alive(0.1, console=False) as waited:
            assert waited is None  # still held by the second
    with lock.agent_alive(0.1, console=False) as waited:
        assert waited is not None  # both ended: released


def test_another_process_agent_blocks_and_its_death_releases(lock_file):
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "BENCH_EVAL_LOCK": str(lock_file)},
    )  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "live"
        with lock.evaluating(0.5, console=False) as iso:
            assert iso.state == lock.NOT_ISOLATED
        proc.send_signal(signal.SIGKILL)  # the harness dies: the kernel drops its hold, nothing stale is left
        proc.wait(30)
        with lock.evaluating(5.0, console=False) as iso:
            assert iso.state == lock.EXCLUSIVE
    finally:
        proc.kill()
        proc.wait()
    assert stat.S_IMODE(lock_file.stat().st_mode) == 0o644  # every user of the machine can open it


def test_the_user_may_evaluate_beside_live_agents_and_it_is_said(lock_file, monkeypatch):
    monkeypatch.setenv("BENCH_EVAL_BESIDE_AGENTS", "1")
    with lock.agent_alive(60.0, console=False), lock.evaluating(60.0, console=False) as iso:
        assert iso.state == lock.BESIDE and "BENCH_EVAL_BESIDE_AGENTS=1" in iso.why


def test_a_lock_path_that_is_not_a_file_is_said_and_costs_no_run(lock_file, capsys):
    os.mkfifo(lock_file)  # another user's FIFO must not hang the open
    with lock.evaluating(5.0, console=True, label="t6") as iso:
        assert iso.state == lock.NOT_ISOLATED and "not a regular file" in iso.why
    with lock.agent_alive(5.0, console=True, label="t6") as waited:
        assert waited is None
    out = capsys.readouterr().out
    assert "t6: evaluation not-isolated" in out and "the agent starts without it" in out


def test_the_default_lock_is_one_per_machine(monkeypatch):
    monkeypatch.delenv("BENCH_EVAL_LOCK")
    expected = Path("/dev/shm" if Path("/dev/shm").is_dir() else "/tmp") / "1gc-7rc-evaluation.lock"
    assert settings.EVAL_LOCK.get() == expected


def test_each_evaluation_of_a_run_records_its_isolation(generated_t6, lock_file, monkeypatch):
    task = generated_t6
    data_dir = data.prepare(task, progress=False)
    ws = workspace.create(task, data_dir, campaign="lock", agent="command", repeat=1)
    gone = collect.Checkpoint(ws.checkpoints / "gone.pt", "train.py", 0.5, task.metric, None, 10.0)
    selection = collect.Selection(gone, {0: gone}, (gone,))

    given = evaluate.EvaluationInput(ws, selection, data_dir, console=False, budget_s=30)
    with lock.agent_alive(60.0, console=False):  # another run's agent, live for the whole evaluation
        evals = evaluate.evaluate_candidates(replace(given, budget_s=0.5))
    assert [e.official.raw["isolation"]["state"] for e in evals] == [lock.NOT_ISOLATED] * 2
    evals = evaluate.evaluate_candidates(given)
    assert {e.official.raw["isolation"]["state"] for e in evals} == {lock.EXCLUSIVE}
    assert "cannot stage" in evals[0].official.why_not  # the candidates themselves as before
    monkeypatch.setenv("BENCH_EVAL_BESIDE_AGENTS", "1")
    evals = evaluate.evaluate_candidates(given)
    assert {e.official.raw["isolation"]["state"] for e in evals} == {lock.BESIDE}


def test_a_waiting_run_says_so_in_its_directory_for_the_campaigns_status_line(lock_file, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    got: list[lock.Isolation] = []
    with lock.agent_alive(60.0, console=False):  # another run's agent
        t = threading.Thread(target=lambda: got.append(_evaluate(run_dir)))
        t.start()
        for _ in range(600):  # until the evaluation has asked (at most a minute)
            if lock.waits(run_dir):
                break
            time.sleep(0.1)
        assert lock.waits(run_dir).startswith("waits for other runs' live agents on this machine to end")
    t.join(30)
    assert got[0].state == lock.EXCLUSIVE and lock.waits(run_dir) == ""  # gone once it has the lock


def _evaluate(run_dir: Path) -> lock.Isolation:
    with lock.evaluating(60.0, console=False, run_dir=run_dir) as iso:
        return iso


def test_a_signal_while_the_evaluation_waits_stops_the_wait_and_leaves_nothing_held(lock_file, tmp_path):
    """A stopped run need not wait out its bound (up to the evaluation budget): bench run --resume finishes it."""
    signals: list[str] = []
    with lock.agent_alive(60.0, console=False):  # another run's agent
        t = threading.Timer(0.3, lambda: signals.append("SIGTERM"))
        t.start()
        with pytest.raises(KeyboardInterrupt), lock.evaluating(600.0, console=False, stopped=lambda: bool(signals)):
            pass
        t.join()
    with lock.evaluating(5.0, console=False) as iso:  # the gate was not left held by the stopped evaluation
        assert iso.state == lock.EXCLUSIVE
