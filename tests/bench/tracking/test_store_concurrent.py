"""Several harness processes starting at once on a fresh store (a campaign launched as parallel jobs) must all
get a working store: MLflow's schema creation is not safe to run concurrently (duplicate tables on SQLite)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from bench.paths import ROOT

START = """
import sys, time
t0 = float(sys.argv[1])
while time.time() < t0:
    time.sleep(0.001)
from bench.tracking import store
eid = store.experiment_id("parallel")
run = store.client().create_run(eid)
store.client().set_terminated(run.info.run_id)
print("ok", eid)
"""


@pytest.mark.slow  # many processes at once on a fresh store: 30-100 s on 2 cores
def test_processes_starting_together_on_a_fresh_store_all_succeed(tmp_path: Path):
    import time

    env = {**os.environ, "BENCH_MLRUNS_DIR": str(tmp_path / "mlruns"), "PYTHONPATH": str(ROOT)}
    env.pop("MLFLOW_TRACKING_URI", None)
    t0 = time.time() + 6  # every process imported MLflow by then, so that they meet at the schema creation
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", START, str(t0)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=180) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-1500:] for _, err in outs]
    ids = {out.split()[-1] for out, _ in outs}
    assert len(ids) == 1  # one experiment for the campaign, whoever created it


def test_mlflows_module_api_follows_the_store_in_force(tmp_path):
    """A process that used another store for a while (tests/campaign.py builds a campaign in a folder of its own,
    in-process) and then the default one again: ``mlflow.get_experiment_by_name`` must read the store in force
    (it kept reading the other one: MLflow's module API remembers the last URI it was given)."""
    import mlflow
    import pytest

    from bench.tracking import store

    store.client()  # the session's store, first
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        mp.setenv("BENCH_MLRUNS_DIR", str(tmp_path / "other"))
        store.client()
    name = f"follow-{uuid.uuid4().hex[:8]}"  # the environment is the session's again
    eid = store.experiment_id(name)
    assert mlflow.get_experiment_by_name(name).experiment_id == eid
