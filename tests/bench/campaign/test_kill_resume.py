"""The campaign a lab runs, killed halfway as a lost node kills it (SIGKILL to the campaign's process group, its runs'
bench processes included), then resumed: exactly one agent run per cell of the matrix in MLflow, the run caught in
flight finished by its resume, and a report made from them.

2 agents (baseline; command: a cut train.py) x 2 tasks (T6, T5 on GENERATED data), one repeat (a second repeat
doubled the time and added no case: the resume's rules are per cell), 30 s budgets, run one at a time (no GPU here).
About 2-3 minutes of a busy 2-core machine; the time is printed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.campaign import spec
from bench.cli import main
from bench.result import RunResult
from bench.tracking import schema, store
from tests.bench.campaign.conftest import CUT, campaign_file
from tests.lazy import lazy

mlflow = lazy("mlflow")  # imported at its first use (tests/lazy.py)

ROOT = Path(__file__).resolve().parents[3]
BODY = f"""
tasks = ["t6", "t5"]
repeats = 1
budget = "30s"
grace = 5
[[agents]]
name = "baseline"
[[agents]]
name = "command"
agent_command = '''{CUT}'''
"""


def agent_runs(name: str):
    store.client()
    exp = mlflow.get_experiment_by_name(name)
    return mlflow.search_runs([exp.experiment_id], filter_string=f"tags.`{schema.KIND}` = '{schema.KIND_AGENT}'")


def kind_runs(name: str, kind: str, column: str = "run_id") -> list[str]:
    """The ``column`` of the campaign's runs of ``kind`` (campaign, summary)."""
    exp = mlflow.get_experiment_by_name(name)
    found = mlflow.search_runs([exp.experiment_id], filter_string=f"tags.`{schema.KIND}` = '{kind}'")
    return [] if found.empty else list(found[column.replace("`", "")])


@pytest.mark.slow
def test_a_campaign_killed_halfway_resumes_to_exactly_one_run_per_cell_and_a_report(tasks, tmp_path, capsys):
    t0 = time.perf_counter()
    path, name = campaign_file(tmp_path, BODY)
    c = spec.load(path)
    dirs = [c.run_dir(k) for k in c.runs()]
    log = tmp_path / "campaign.log"
    with open(log, "wb") as out:  # a process group of its own: the campaign and its runs' bench processes
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.cli", "campaign", "run", str(path)],
            stdout=out,
            stderr=out,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            start_new_session=True,
        )
    in_flight = None
    try:
        deadline = time.monotonic() + 1500
        while time.monotonic() < deadline and proc.poll() is None:
            done = [d for d in dirs if (d / "result.json").is_file()]
            running = [d for d in dirs if (d / "run.json").is_file() and not (d / "result.json").is_file()]
            if len(done) >= 2 and running:
                in_flight = running[0]
                break
            time.sleep(0.2)
        assert in_flight is not None, f"not halfway (exit {proc.poll()}):\n{log.read_text()[-4000:]}"
        os.killpg(proc.pid, signal.SIGKILL)  # the campaign and the bench process of the run in flight
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    killed_at = time.perf_counter() - t0
    finished_before = {d: (d / "result.json").read_bytes() for d in dirs if (d / "result.json").is_file()}
    assert 2 <= len(finished_before) < 4 and not (in_flight / "result.json").exists()

    capsys.readouterr()
    assert main(["campaign", "resume", str(path)]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    # the killed harness is dead by now, or dying (then the resume waits for it, then finishes the run)
    assert "4/4 final" in out, out
    n = len(finished_before)
    assert f"{n} final, 1 to finish (harness died)" in out or f"{n} final, 0 to finish (harness died), 1 held" in out
    for d, before in finished_before.items():
        assert (d / "result.json").read_bytes() == before  # final runs are never redone
    caught = RunResult.load(in_flight)
    assert "finished by bench run --resume" in caught.reason, caught.reason

    runs = agent_runs(name)
    assert len(runs) == 4, runs[["tags.mlflow.runName", "status"]]
    tags = [runs[f"tags.{k}"] for k in (schema.AGENT, schema.TASK, schema.REPEAT)]
    cells = set(zip(*tags, strict=True))
    assert cells == {(a, t, str(r)) for a in ("baseline", "command") for t in ("t6", "t5") for r in (1,)}
    assert not (runs["status"] == "RUNNING").any()
    results = [RunResult.load(d) for d in dirs]
    assert sorted(runs["run_id"]) == sorted(r.mlflow_run_id for r in results)  # each run dir's own MLflow run
    assert all(runs[f"tags.{schema.STATUS}"].isin(schema.STATUSES))
    resumed_at = time.perf_counter() - t0
    # the campaign's summary in MLflow (issue #15), written once at the end: one summary run per agent, the report
    (camp,) = kind_runs(name, schema.KIND_CAMPAIGN)
    assert f"[campaign] campaign summary of {name}: MLflow run {camp} (2 entries, " in out, out
    assert sorted(kind_runs(name, schema.KIND_SUMMARY, f"tags.`{schema.AGENT}`")) == ["baseline", "command"]
    report = {f.path for f in store.client().list_artifacts(camp, schema.REPORT_ARTIFACTS)}
    assert f"{schema.REPORT_ARTIFACTS}/leaderboard.csv" in report, report

    assert main(["campaign", "run", str(path)]) == 0  # a third time: nothing to do, nothing added
    assert len(agent_runs(name)) == 4 and kind_runs(name, schema.KIND_CAMPAIGN) == [camp]
    assert main(["report", "--experiment", name, "--out", str(tmp_path / "report")]) == 0
    assert any((tmp_path / "report").iterdir())
    statuses = sorted(r.status for r in results)
    print(f"killed at {killed_at:.0f} s; resumed to 4/4 at {resumed_at:.0f} s; total {time.perf_counter() - t0:.0f} s;")
    print(f"statuses {statuses}")
