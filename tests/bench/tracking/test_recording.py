"""`bench run` says when MLflow did not record a run, and runs started together on a fresh store all record.

Issue #16 saw 4 (even 2) `bench run`s started at once on a fresh SQLite store lose the schema-creation race and
still exit 0 with status success. Now the schema is made once under a lock (tests/bench/tracking/
test_store_concurrent.py, test_postgres.py), and a run whose result.json was written but whose MLflow record
failed makes `bench run` exit 1 (result.json says why: ``tracking_error``) until `bench record` records it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bench.cli import main
from bench.paths import ROOT
from bench.result import RunResult
from bench.tracking import schema
from bench.tracking.writer import MlflowWriter, TrackingError
from tests.lazy import lazy

mlflow = lazy("mlflow")  # imported at its first use (tests/lazy.py)

ONE_EPOCH = 'sed \'s/"epochs": 5/"epochs": 1/\' train.py > run_1.py && python run_1.py'


@pytest.mark.slow  # a whole benchmark run (bench run)
def test_bench_run_exits_non_zero_when_the_run_is_not_recorded_and_bench_record_clears_it(
    generated_t6, monkeypatch, capsys
):
    """The store refuses the run's final tags (an outage at the end of the run): status success, exit 1."""
    name = f"test-{uuid.uuid4().hex[:8]}"
    real = MlflowWriter.set_tags

    def refuse_the_outcome(self, run_id, tags):
        if schema.STATUS in tags:
            raise TrackingError("the store went away")
        return real(self, run_id, tags)

    monkeypatch.setattr(MlflowWriter, "set_tags", refuse_the_outcome)
    argv = ["run", "--agent", "command", "--agent-command", ONE_EPOCH, "--task", "t6", "--budget", "3m"]
    code = main([*argv, "--grace", "5", "--campaign", name, "--quiet"])
    out = capsys.readouterr().out
    (run_dir,) = [line.split()[-1] for line in out.splitlines() if line.startswith("t6 ")]
    result = RunResult.load(Path(run_dir))
    assert (code, result.status) == (1, "success"), out
    assert "the store went away" in result.tracking_error and "bench record" in out

    monkeypatch.setattr(MlflowWriter, "set_tags", real)
    assert main(["record", run_dir]) == 0
    assert RunResult.load(Path(run_dir)).tracking_error is None
    exp = mlflow.get_experiment_by_name(name)
    (agent,) = mlflow.search_runs([exp.experiment_id], filter_string=f"tags.`{schema.KIND}` = 'agent'").itertuples()
    assert agent.status == "FINISHED"


RUN = """
import sys, time
t0 = float(sys.argv[1])
from bench.cli import main
while time.time() < t0:
    time.sleep(0.001)
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.slow
def test_four_bench_runs_started_together_on_a_fresh_sqlite_store_all_record(generated_t6, tmp_path):
    from bench.tasks import data

    data.prepare(generated_t6, progress=False)  # the cache is shared and prepared once, as a campaign does
    store_dir = tmp_path / "fresh-mlruns"
    env = {**os.environ, "BENCH_MLRUNS_DIR": str(store_dir), "PYTHONPATH": str(ROOT)}
    env.pop("MLFLOW_TRACKING_URI", None)
    t0 = time.time() + 15  # all four have imported the harness by then and reach MLflow at the same instant
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RUN, str(t0), "run", "--agent", "command", "--agent-command", ONE_EPOCH]
            + ["--task", "t6", "--budget", "3m", "--grace", "5", "--campaign", "together", "--quiet", "--no-summary"]
            + ["--first-repeat", str(repeat)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for repeat in range(1, 5)
    ]
    outs = [p.communicate(timeout=900) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [(out[-1500:], err[-1500:]) for out, err in outs]
    assert (store_dir / "mlflow.db").is_file()
    client = mlflow.tracking.MlflowClient(f"sqlite:///{store_dir / 'mlflow.db'}")
    exp = client.get_experiment_by_name("together")
    agents = client.search_runs([exp.experiment_id], f"tags.`{schema.KIND}` = 'agent'")
    assert sorted(r.data.tags[schema.REPEAT] for r in agents) == ["1", "2", "3", "4"]
    assert {(r.info.status, r.data.tags[schema.STATUS]) for r in agents} == {("FINISHED", "success")}
