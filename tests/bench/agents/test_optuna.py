"""The ``optuna`` agent: its adapter, and one end-to-end run under the benchmark protocol.

The end-to-end run is ``bench baselines tune`` on T6 with generated data (conftest.generated_t6): the agent
runs inside the normal workspace, watchdog, tracer, collection, evaluation and audit; its trials are traced
child runs (pruned ones marked), the study summary is on the agent run, the results file has the keys
``bench report`` reads, the validation scores were read from the trials' traces, and the study is in the
SQLite storage.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path

import optuna
import pytest

from bench.agents import AGENTS, AgentError, LaunchContext
from bench.agents.optuna import OptunaAgent
from bench.paths import ROOT
from bench.tracking import schema
from tests.lazy import lazy

mlflow = lazy("mlflow")  # imported at its first use (tests/lazy.py)


def ctx(task, options=None) -> LaunchContext:
    return LaunchContext(
        task=task, workspace=Path("/ws"), prompt="", budget_s=60, home=Path("/h"), options=options or {}
    )


def test_command_passes_the_options_and_refuses_unknown_ones(generated_t6):
    agent = OptunaAgent()
    argv = agent.command(ctx(generated_t6, {"trials": "5", "seed": "1", "storage": "sqlite:///x.db", "max_epochs": ""}))
    assert argv == [sys.executable, "-m", "baselines.agent", "--task", "t6", "--trials", "5", "--seed", "1",
                    "--storage", "sqlite:///x.db"]  # fmt: skip
    assert agent.command(ctx(generated_t6, {"prune_after": "1"}))[-2:] == ["--prune-after", "1"]
    with pytest.raises(AgentError, match="does not know"):
        agent.command(ctx(generated_t6, {"trails": "5"}))


def test_env_makes_the_driver_importable(generated_t6, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    assert OptunaAgent().env(ctx(generated_t6))["PYTHONPATH"].split(os.pathsep) == [str(ROOT), "/somewhere"]


def test_the_sandbox_may_write_the_study_storage_and_nothing_else(generated_t6, tmp_path):
    """The study outlives the run (tune, the dashboard read it), so the sandboxed agent must write its
    storage: the folder of a SQLite database (its journal goes beside it) or of a journal file, created if
    missing; a storage inside the workspace, the default journal or an in-memory one needs nothing more."""
    agent = OptunaAgent()
    db = tmp_path / "studies" / "optuna.db"
    assert agent.writable(ctx(generated_t6, {"storage": f"sqlite:///{db}"})) == (db.parent,)
    assert db.parent.is_dir()
    assert agent.writable(ctx(generated_t6, {"storage": str(tmp_path / "j" / "study.log")})) == (tmp_path / "j",)
    for storage in ("", "sqlite:///x.db", "study.log", "sqlite:///:memory:", "postgresql://u:p@127.0.0.1/db"):
        assert agent.writable(ctx(generated_t6, {"storage": storage})) == (), storage
    assert agent.endpoints(ctx(generated_t6, {"storage": f"sqlite:///{db}"})) == ()


def test_a_storage_folder_that_holds_a_harness_place_is_refused(generated_t6, tmp_path):
    """Binding the storage's folder read-write must not open the tracking store, the data cache or /tmp to the
    sandbox: a storage beside them (mlruns/optuna.db, a file in the folder that holds the cache, /tmp/x.db) is
    refused before launch, with what to do; the default tune storage, in a folder of its own, is not."""
    from baselines.tune import default_storage
    from bench.paths import cache_dir, mlruns_dir
    from bench.pipeline.launch import _declared

    agent = OptunaAgent()
    for storage in (f"sqlite:///{mlruns_dir() / 'optuna.db'}", f"sqlite:///{cache_dir().parent / 'o.db'}",
                    "/tmp/study.log"):  # fmt: skip
        with pytest.raises(AgentError, match="folder of its own"):
            _declared(agent.writable(ctx(generated_t6, {"storage": storage})))
    default = agent.writable(ctx(generated_t6, {"storage": default_storage()}))
    assert _declared(default) == (mlruns_dir() / "optuna",)


def test_a_database_server_is_reachable_only_on_this_machine(generated_t6):
    """A local PostgreSQL is bridged port for port (no credentials in the endpoint); a remote one cannot be
    reached from the sandbox's network namespace, and the error says what to do."""
    agent = OptunaAgent()
    local = agent.endpoints(ctx(generated_t6, {"storage": "postgresql+psycopg2://u:secret@127.0.0.1/optuna"}))
    assert local == ("tcp://127.0.0.1:5432",)
    assert agent.endpoints(ctx(generated_t6, {"storage": "mysql://u@localhost:3307/o"})) == ("tcp://localhost:3307",)
    with pytest.raises(AgentError, match="--unsandboxed"):
        agent.endpoints(ctx(generated_t6, {"storage": "postgresql://u@db.example.org:5432/optuna"}))


@pytest.mark.slow
def test_optuna_agent_end_to_end_through_tune(generated_t6, tmp_path):
    from baselines.tune import RESULT_KEYS, tune

    campaign = f"test-optuna-{uuid.uuid4().hex[:8]}"
    storage = f"sqlite:///{tmp_path / 'studies' / 'optuna.db'}"  # a folder of its own: tmp_path holds the cache
    out = tmp_path / "t6.json"
    tuned = tune(
        "t6",
        budget_s=90,
        trials=4,
        storage=storage,
        campaign=campaign,
        out=out,
        console=False,
        grace_s=5,
        options={"max_epochs": "4", "prune_after": "1"},
    )
    assert tuned["status"] == "success" and out.is_file()
    assert "optuna" in AGENTS  # tune() registers the agent when the dispatch table does not have it yet
    written = json.loads(out.read_text())
    assert set(RESULT_KEYS) <= set(written) and written["task"] == "t6" and written["direction"] == "min"
    assert written["trials"] >= 3 and written["pruned"] >= 1, written["states"]
    assert 0 < written["official_score"] < 5 and written["val_score"] > 0
    assert written["config"]["seq_len"] == 336 and written["storage"] == storage
    assert "CPU" in written["hardware"] or "CUDA" in written["hardware"]

    exp = mlflow.get_experiment_by_name(campaign)
    runs = mlflow.search_runs([exp.experiment_id])
    agent_run = runs[runs[f"tags.{schema.KIND}"] == schema.KIND_AGENT].iloc[0]
    assert agent_run["run_id"] == written["mlflow_run_id"] and agent_run[f"tags.{schema.AGENT}"] == "optuna"
    assert agent_run[f"metrics.{schema.SCORE}"] == pytest.approx(written["official_score"])

    scripts = runs[runs[f"tags.{schema.KIND}"] == schema.KIND_SCRIPT]
    assert len(scripts) == written["trials"]
    assert (scripts[f"tags.{schema.PARENT}"] == agent_run["run_id"]).all()
    assert sorted(scripts[f"tags.{schema.SCRIPT}"]) == [f"run_{k}.py" for k in range(1, written["trials"] + 1)]
    pruned = scripts[scripts["metrics.optuna_pruned"] == 1.0]
    assert len(pruned) == written["pruned"]
    assert (pruned[f"tags.{schema.EXIT}"] == "KILLED").all() and (pruned["status"] == "KILLED").all()
    assert pruned[f"tags.{schema.REASON}"].str.contains("pruned by optuna").all()

    client = mlflow.tracking.MlflowClient()
    artifacts = {a.path for a in client.list_artifacts(agent_run["run_id"], "agent")}
    for name in ("study.json", "trials.csv", "best_params.json", "best_config.json", "optimization_history.png"):
        assert f"agent/{name}" in artifacts, artifacts
    # the validation scores were read from the trials' traces, each once (the output tee's echoes of the printed
    # lines are in the same spool files and are not counted again)
    study_json = json.loads(Path(client.download_artifacts(agent_run["run_id"], "agent/study.json")).read_text())
    complete = [r for r in study_json["trial_records"] if r["state"] == "COMPLETE"]
    assert complete and all(r["reports"] == r["epochs"] == r["progress_epochs"] for r in complete), complete
    assert all(r["seconds_per_epoch"] and r["startup_s"] is not None for r in complete)
    diff = client.download_artifacts(scripts.iloc[0]["run_id"], "source")
    assert any(p.endswith(".diff") for p in os.listdir(diff))  # run_<k>.py against train.py: the config change

    study = optuna.load_study(study_name=written["study_name"], storage=storage)
    assert len(study.trials) == written["trials"]
    assert sum(t.state.name == "PRUNED" for t in study.trials) == written["pruned"]
