"""SIGTERM to ``bench run`` (what a Slurm time limit, scancel or ``kill`` sends) at any point of a run.

The user's case first: the harness gets SIGTERM while it evaluates the agent's checkpoint. The run must end with
result.json written and its MLflow run closed with a status and a reason; if the signal also stopped the scorer
(a signal to the whole process group, as Slurm sends it), the run is left with run.json for ``bench run --resume``.
The semantics of :class:`bench.termination.Termination` are checked on this test process itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bench import termination
from bench.cli import main
from bench.result import RunResult
from bench.tracking import schema, store
from tests.bench.adversary import HONEST
from tests.lazy import lazy

mlflow = lazy("mlflow")  # imported at its first use (tests/lazy.py)

ROOT = Path(__file__).resolve().parents[2]


def _agent_runs(name: str):
    store.client()
    exp = mlflow.get_experiment_by_name(name)
    runs = mlflow.search_runs([exp.experiment_id], filter_string=f"tags.`{schema.KIND}` = '{schema.KIND_AGENT}'")
    return runs


def _start(tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path, Path]:
    """`bench run` of the honest T6 agent in a session of its own (so that a test can signal its group), its
    output (not --quiet: the "evaluating" line tells when the evaluation starts) in a file."""
    workspaces = tmp_path / "workspaces"
    env = {**os.environ, "BENCH_WORKSPACES_DIR": str(workspaces), "PYTHONPATH": str(ROOT)}
    argv = ["run", "--agent", "command", "--task", "t6", "--agent-command", HONEST, "--budget", "120s"]
    argv += ["--grace", "2", "--campaign", name, "--unsandboxed"]
    log = tmp_path / "harness.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.cli", *argv], env=env, stdout=out, stderr=out, start_new_session=True
        )
    return proc, log, workspaces / name


def _when_evaluating(proc: subprocess.Popen, log: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "[bench] evaluating best" in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            pytest.fail(f"bench run exited ({proc.returncode}) before the evaluation:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"no evaluation after {timeout} s:\n{log.read_text()[-3000:]}")


@pytest.mark.slow
def test_sigterm_while_evaluating_ends_with_result_json_and_a_closed_mlflow_run(generated_t6, tmp_path):
    name = f"term-{uuid.uuid4().hex[:8]}"
    proc, log, folder = _start(tmp_path, name)
    try:
        _when_evaluating(proc, log)
        os.kill(proc.pid, signal.SIGTERM)  # the harness only: its scorer goes on
        code = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    out = log.read_text(errors="replace")
    assert code == 130, out[-3000:]  # stopped, as for Ctrl-C: a `bench run --repeats N` starts no further run
    (run_dir,) = folder.iterdir()
    result = RunResult.load(run_dir)
    assert result.status == "success", result.reason  # the agent's checkpoint was scored all the same
    assert "SIGTERM" in result.reason and not result.interrupted
    runs = _agent_runs(name)
    assert len(runs) == 1 and runs["status"].iloc[0] == "FINISHED"
    assert runs[f"tags.{schema.STATUS}"].iloc[0] == "success"
    assert "SIGTERM" in runs[f"tags.{schema.REASON}"].iloc[0]


@pytest.mark.slow
def test_sigterm_to_the_group_while_evaluating_leaves_the_run_for_resume(generated_t6, tmp_path, capsys):
    """Slurm signals every process of a job: the scorer dies with the harness's evaluation under way. No result is
    written from a scorer that was killed; run.json stays, and --resume scores the checkpoint."""
    name = f"term-{uuid.uuid4().hex[:8]}"
    proc, log, folder = _start(tmp_path, name)
    try:
        _when_evaluating(proc, log)
        time.sleep(0.5)  # the scorer has started
        os.killpg(proc.pid, signal.SIGTERM)
        code = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    out = log.read_text(errors="replace")
    (run_dir,) = folder.iterdir()
    assert code == 130, out[-3000:]
    assert (run_dir / "run.json").is_file() and not (run_dir / "result.json").exists(), out[-3000:]
    assert f"bench run --resume {run_dir}" in out

    capsys.readouterr()
    assert main(["run", "--resume", str(run_dir), "--quiet"]) == 0
    result = RunResult.load(run_dir)
    assert result.status == "success", result.reason
    assert not result.interrupted and "after the agent's time" in result.reason  # the agent had had its time
    runs = _agent_runs(name)
    assert len(runs) == 1 and runs["status"].iloc[0] == "FINISHED"


def test_termination_raises_before_the_launch_and_defers_after_it():
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    with termination.Termination() as term:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler runs at the next bytecode; the sleep is interrupted
        term.launched = True
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # SIGTERM never escalates: Slurm's own follow-up is SIGKILL
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)
        assert term.signals == ["SIGTERM", "SIGTERM", "SIGTERM", "SIGINT"] and term.pending
        with pytest.raises(KeyboardInterrupt):  # a second Ctrl-C: the person wants out now
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        assert termination.current() is term
    assert termination.current() is None
    assert signal.getsignal(signal.SIGTERM) == before[signal.SIGTERM]  # the handlers are put back
    assert signal.getsignal(signal.SIGINT) == before[signal.SIGINT]
