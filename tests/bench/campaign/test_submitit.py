"""The Slurm executor on submitit: a job's time limit, its requeue hook, a small campaign on submitit's local
backend, and one on a real single-node Slurm (started by the ``slurm`` fixture; skipped, saying what failed, where
it cannot run), where a preemption signal in the middle of a run is also survived."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time

import pytest

from bench.campaign import spec
from bench.campaign.slurm import RunJob, time_limit_min
from bench.cli import main
from bench.result import RunResult
from bench.tracking import schema, store
from tests.bench.campaign.conftest import campaign_file
from tests.bench.campaign.slurm_cluster import slurm  # noqa: F401 (the fixture)
from tests.lazy import lazy

mlflow = lazy("mlflow")  # imported at its first use (tests/lazy.py)


def agent_runs(name: str):
    store.client()
    exp = mlflow.get_experiment_by_name(name)
    return mlflow.search_runs([exp.experiment_id], filter_string=f"tags.`{schema.KIND}` = '{schema.KIND_AGENT}'")


def test_a_jobs_time_limit_covers_budget_grace_and_the_evaluation(task_folders, tmp_path):
    body = 'tasks = ["t6"]\nbudget = "40m"\neval_budget = "15m"\nexecutor = "slurm"\n[slurm]\neval_margin = "20m"\n'
    path, _ = campaign_file(tmp_path, body + '[[agents]]\nname = "baseline"\n')
    c = spec.load(path)
    assert time_limit_min(c, c.spec.budget_s) == 62  # (2400 + 30 + 1200 + 60) / 60 = 61.5, rounded up


def test_the_requeue_hook_hands_sigterm_to_the_run_and_requeues_the_same_run():
    job = RunJob("/x/c.toml", {"BENCH_WORKSPACES_DIR": "/w"}, signal_delay_s=20)
    code = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(7)); time.sleep(60)"
    job._proc = subprocess.Popen([sys.executable, "-c", code])
    time.sleep(1)  # its handler is in place
    again = job.checkpoint("t6-baseline-r1-abcdef12")
    assert job._proc.returncode == 7  # it got SIGTERM and had the time to end
    assert again.args == ("t6-baseline-r1-abcdef12",) and again.function == job  # same file, env, delay
    assert pickle.loads(pickle.dumps(job))._proc is None  # what submitit stores: no process in it


@pytest.mark.slow
def test_a_small_campaign_on_submitits_local_backend(tasks, tmp_path, capsys):
    body = 'tasks = ["t6"]\nrepeats = 2\nbudget = "20s"\ngrace = 2\nexecutor = "slurm"\n'
    body += '[slurm]\ncluster = "local"\ngpus_per_task = 0\npoll_s = 1\n[[agents]]\nname = "command"\n'
    path, name = campaign_file(tmp_path, body + "agent_command = 'true'\n")
    c = spec.load(path)
    assert main(["campaign", "run", str(path)]) == 0
    assert "2/2 final (2 failed)" in capsys.readouterr().out
    assert [RunResult.load(c.run_dir(k)).status for k in c.runs()] == ["failed", "failed"]
    jobs = json.loads((c.folder / ".campaign" / "jobs.json").read_text())
    assert sorted(jobs) == sorted(k.run_id for k in c.runs())
    assert len(agent_runs(name)) == 2


@pytest.mark.slow
def test_a_one_run_campaign_on_a_real_slurm_survives_a_preemption_signal(slurm, tasks, tmp_path, monkeypatch, capsys):  # noqa: F811
    """The run's job gets submitit's preemption signal (USR2) while the agent works: the run finishes what it can
    (status interrupted, recorded), the job is requeued, and the requeued job finds the run final."""
    for key, value in slurm.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)  # sbatch's working folder: one the job can write
    body = 'tasks = ["t6"]\nbudget = "40s"\ngrace = 2\nexecutor = "slurm"\n'
    body += '[slurm]\ngpus_per_task = 0\ncpus_per_task = 1\npoll_s = 2\n[[agents]]\nname = "command"\n'
    path, name = campaign_file(tmp_path, body + "agent_command = 'sleep 300'\n")
    c = spec.load(path)
    (key,) = c.runs()
    log = tmp_path / "campaign.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.cli", "campaign", "run", str(path)], stdout=out, stderr=out
        )
    try:
        deadline = time.monotonic() + 300
        while not (c.run_dir(key) / "run.json").is_file():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        (job_id,) = json.loads((c.folder / ".campaign" / "jobs.json").read_text()).values()
        time.sleep(3)  # the agent is at work
        subprocess.run(["scancel", "--signal", "USR2", job_id], check=True)  # what submitit's own tests send
        assert proc.wait(timeout=400) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    result = RunResult.load(c.run_dir(key))
    assert result.status == "interrupted" and result.wall_time_s < 40, result.reason
    runs = agent_runs(name)
    assert (
        len(runs) == 1 and runs["status"].iloc[0] == "KILLED" and runs[f"tags.{schema.STATUS}"].iloc[0] == "interrupted"
    )
    out = next((c.folder / ".campaign" / "submitit").rglob("*_log.out")).parent
    logs = "".join(p.read_text(errors="replace") for p in out.glob("*_log.*"))
    assert "Calling checkpoint method" in logs and "Requeued job" in logs, logs[-3000:]  # the first job
    assert "final already (interrupted); never redone" in logs, logs[-3000:]  # the requeued one
    assert os.environ["SLURM_CONF"] == slurm["SLURM_CONF"]
