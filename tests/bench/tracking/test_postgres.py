"""Tracking at scale on PostgreSQL: a private cluster and an MLflow server on it (tests/pg.py), started here.

- harness processes starting together on a fresh PostgreSQL database all get the store (the schema made once, under
  PostgreSQL's advisory lock, the database itself made when missing);
- eight harness-side relays at once, each relaying four real traced scripts (the tracer, its output tee, the locked
  helper's ``log_metrics`` and a printed line per step) through the server: every value once;
- an Optuna study with two worker processes started together on a fresh database of the same cluster.

Skipped with the reason when PostgreSQL's programs or the psycopg driver are missing (fixtures: tests/pg.py, made
available here by this folder's conftest.py).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from bench.paths import ROOT
from tests.bench.tracking.test_store_concurrent import START as STORE  # the same harness start, on PostgreSQL

pytestmark = pytest.mark.slow  # a PostgreSQL cluster and MLflow server, then many processes at once: minutes on 2 cores


def together(code: str, argv_of, n: int, env: dict, delay: float = 8.0) -> list[str]:
    """Start ``n`` Python processes that wait for one instant, then run ``code``; their stdout (all exit 0)."""
    t0 = time.time() + delay  # every process has imported what it needs by then, so that they meet at the start
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(t0), *argv_of(i)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    return [out for out, _ in outs]


def test_processes_starting_together_on_a_fresh_postgres_database_all_get_the_store(pg_cluster):
    uri = pg_cluster.uri(f"fresh_{uuid.uuid4().hex[:10]}")  # not created yet: the first process makes it
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(ROOT)}
    outs = together(STORE, lambda i: [], 4, env)
    assert len({out.split()[-1] for out in outs}) == 1  # one experiment, whoever created it


# --- eight relays x four traced scripts through the server -------------------------------------------------------
STEPS = 300
SCRIPTS = 4
AGENTS = 8

LOOP = """
import sys
from helper import log_metrics

steps, salt = int(sys.argv[1]), int(sys.argv[2])
for step in range(1, steps + 1):
    loss = 1.0 / step + salt * 1e-6
    log_metrics(step, loss=loss, lr=1e-3 * salt)  # traces, then prints "step N | loss 0.xxxx | lr 0.00xx"
    print(f"step {step} | loss {loss:.6f}", flush=True)  # the script's own line, as many scripts have
"""

AGENT = """
import json, os, subprocess, sys, time
from pathlib import Path
t0, ws, campaign = float(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
steps, scripts = int(sys.argv[4]), int(sys.argv[5])
from bench.tracking import HOOK_DIR, schema
from bench.tracking.relay import Relay
from bench.tracking.writer import MlflowWriter
while time.time() < t0:
    time.sleep(0.001)
writer = MlflowWriter(campaign)
parent = writer.create_run(ws.name, {schema.KIND: schema.KIND_AGENT})
spool = ws / ".bench" / "spool"
relay = Relay(writer, parent, spool, {}, interval=0.5, state_file=ws / "relay.json")
relay.start()
env = {**os.environ, "BENCH_WORKSPACE": str(ws), "BENCH_SPOOL_DIR": str(spool), "PYTHONPATH": str(HOOK_DIR)}
env.pop("MLFLOW_TRACKING_URI")
procs = [
    subprocess.Popen([sys.executable, f"run_{k}.py", str(steps), str(k)], cwd=ws, env=env, stdout=subprocess.DEVNULL)
    for k in range(1, scripts + 1)
]
assert [p.wait() for p in procs] == [0] * scripts
summary = relay.finalize()
writer.end_run(parent)
print(json.dumps({"parent": parent, "scripts": {s["script"]: s["run_id"] for s in summary["scripts"]}}))
"""


def helper_module() -> str:
    """The tasks' locked helper ``log_metrics`` (and ``_trace``), as it is, without the torch import."""
    source = (ROOT / "tasks" / "task_helpers.py").read_text()
    tree = ast.parse(source)
    wanted = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in ("_trace", "log_metrics")]
    assert len(wanted) == 2
    return "import json, os, time\n\n_spool = None\n\n" + "\n\n".join(ast.get_source_segment(source, n) for n in wanted)


def test_eight_relays_of_four_traced_scripts_through_the_server_log_every_value_once(mlflow_server, tmp_path):
    from mlflow.tracking import MlflowClient

    campaign = f"scale-{uuid.uuid4().hex[:8]}"
    helper = helper_module()
    workspaces = []
    for a in range(AGENTS):
        ws = tmp_path / f"agent-{a}"
        (ws / ".bench" / "spool").mkdir(parents=True)
        (ws / "helper.py").write_text(helper)
        for k in range(1, SCRIPTS + 1):
            (ws / f"run_{k}.py").write_text(LOOP)
        workspaces.append(ws)
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow_server.url, "PYTHONPATH": str(ROOT)}
    outs = together(AGENT, lambda i: [str(workspaces[i]), campaign, str(STEPS), str(SCRIPTS)], AGENTS, env)
    agents = [json.loads(out.strip().splitlines()[-1]) for out in outs]

    client = MlflowClient(mlflow_server.url)
    exp = client.get_experiment_by_name(campaign)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    assert len(runs) == AGENTS * (1 + SCRIPTS)
    counted = 0
    for agent in agents:
        assert sorted(agent["scripts"]) == [f"run_{k}.py" for k in range(1, SCRIPTS + 1)]
        for script, run_id in agent["scripts"].items():
            salt = int(script[4:-3])
            for key in ("loss", "lr"):
                history = client.get_metric_history(run_id, key)
                assert sorted(m.step for m in history) == list(range(1, STEPS + 1)), (script, key, len(history))
                counted += len(history)
            loss = {m.step: m.value for m in client.get_metric_history(run_id, "loss")}
            assert all(loss[s] == 1.0 / s + salt * 1e-6 for s in range(1, STEPS + 1))  # the traced, exact values
    assert counted == AGENTS * SCRIPTS * STEPS * 2  # every value the scripts logged, once


# --- Optuna on the same cluster -----------------------------------------------------------------------------------
WORKER = """
import sys, time
t0, url, n = float(sys.argv[1]), sys.argv[2], int(sys.argv[3])
import optuna
from baselines.agent import rdb_storage
optuna.logging.set_verbosity(optuna.logging.WARNING)
while time.time() < t0:
    time.sleep(0.001)
storage = rdb_storage(url)
study = optuna.create_study(storage=storage, study_name="two-workers", load_if_exists=True)
study.optimize(lambda t: (t.suggest_float("x", -10, 10) - 2) ** 2, n_trials=n)
print("ok", len(study.trials))
"""


def test_an_optuna_study_with_two_worker_processes_on_a_fresh_postgres_database(pg_cluster):
    import optuna

    url = pg_cluster.uri(f"optuna_{uuid.uuid4().hex[:10]}")  # made by the first worker, under the lock
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    together(WORKER, lambda i: [url, "12"], 2, env)
    trials = optuna.load_study(study_name="two-workers", storage=url).trials
    assert len(trials) == 24 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert len({t.number for t in trials}) == 24


# --- bench report through the server ------------------------------------------------------------------------------
def test_histories_through_the_server_in_bulk_equal_the_databases(mlflow_server, monkeypatch, capsys):
    """What ``bench report`` reads through a server (bulk requests, cut batches asked again in halves) and through the
    database behind it (``BENCH_TRACKING_DB``) are the same, and equal the public API's one request per run."""
    import mlflow

    from bench.tracking import store

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)
    monkeypatch.delenv(store.DATABASE_ENV, raising=False)
    store._client.cache_clear()
    try:
        _compare_histories(mlflow_server, monkeypatch, capsys)
    finally:  # the other tests' store again (store.client() made the server this process's tracking URI)
        store._client.cache_clear()
        mlflow.set_tracking_uri(store.default_uri())


def _compare_histories(mlflow_server, monkeypatch, capsys) -> None:
    import importlib.util

    from mlflow.tracking import MlflowClient

    from analysis import runs
    from bench.tracking import reader, schema, server_reader, store

    spec = importlib.util.spec_from_file_location("synthetic", ROOT / "tests" / "analysis" / "synthetic.py")
    synthetic = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(synthetic)
    campaign = f"report-{uuid.uuid4().hex[:8]}"
    counts = synthetic.generate(campaign, agents=2, tasks=2, repeats=2, scripts=4)
    assert reader.open_reader().name == "server"  # a server, its database not named: the bulk path
    scripts = runs.load(campaign).scripts["run_id"].tolist()
    assert len(scripts) == counts["script"]

    client = MlflowClient(mlflow_server.url)
    one_by_one = sorted(
        (rid, m.step, m.value) for rid in scripts for m in client.get_metric_history(rid, schema.CHECKPOINT_SCORE)
    )
    assert len(one_by_one) > len(scripts)  # several checkpoints a script: histories, not last values

    def table(df):
        return sorted(zip(df["run_id"], df["step"], df["value"], strict=True))

    assert table(runs.metric_history(scripts, schema.CHECKPOINT_SCORE)) == one_by_one
    assert "did not answer bulk histories" not in capsys.readouterr().err
    monkeypatch.setattr(server_reader, "VALUES_PER_REQUEST", 3)  # every batch comes back full: halves, then one run
    assert table(server_reader.ServerReader(strict=True).metric_history(scripts, schema.CHECKPOINT_SCORE)) == one_by_one
    monkeypatch.setenv(store.DATABASE_ENV, mlflow_server.backend)
    assert reader.open_reader().name == "sql"
    assert table(runs.metric_history(scripts, schema.CHECKPOINT_SCORE)) == one_by_one
