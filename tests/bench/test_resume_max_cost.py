"""A resumed run keeps its API budget (run.json's ``max_cost``): what the metering gateway logged before the harness
died is recorded under the run's own ``--max-cost``, as the run would have recorded it; run.json's value is checked
when read."""

from __future__ import annotations

import json
import time
from pathlib import Path

import mlflow
import pytest

from bench.cli import main
from bench.gateway import metering
from bench.pipeline import state
from bench.result import RunResult
from bench.tracking import schema
from tests.bench.test_resume_limits import run_json, unfinished_run


def _state(**changes) -> dict:
    return run_json(**{"max_cost": 2.5, **changes})


def test_run_json_keeps_max_cost_and_reads_it_back(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps(_state()))
    assert state.read(tmp_path).spec.max_cost == 2.5
    (tmp_path / "run.json").write_text(json.dumps(_state(max_cost=None)))  # no API budget
    assert state.read(tmp_path).spec.max_cost is None


@pytest.mark.parametrize("bad", [0, -1.0, "20", True, float("inf")])
def test_a_malformed_max_cost_in_run_json_is_one_clear_line(tmp_path, bad):
    (tmp_path / "run.json").write_text(json.dumps(_state(max_cost=bad)))
    with pytest.raises(state.RunStateError) as e:
        state.read(tmp_path)
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"{tmp_path / 'run.json'}: max_cost must be a "), message
    assert "remove the key" in message  # an optional key: the resume then records no API budget


def _unfinished(task, max_cost: float | None) -> tuple[Path, float]:
    """A run whose harness 'died' while the agent ran, after the gateway had logged a request that spent $0.60 and
    one the budget refused (returned: minutes from the launch to it). The agent does nothing, unsandboxed (fast);
    its run.json then says sandboxed, with ``max_cost``. (Its MLflow run was recorded once already, with the params
    as run.json gives them back: floats.)"""
    run_dir = unfinished_run(task, budget_s=30.0, grace_s=1.0)  # unsandboxed, fast: so no API budget of its own
    if max_cost is not None:  # the budget needs the sandbox (the model's rule, on the resume too): as a run with both
        raw = json.loads((run_dir / "run.json").read_text())
        raw["spec"].update(max_cost=max_cost, sandbox=True)
        (run_dir / "run.json").write_text(json.dumps(raw))
    st = state.read(run_dir)
    t = time.time()
    spent = {"t": t, "api": "anthropic", "model": "claude-sonnet-4-6", "status": 200, "latency_s": 1.0}
    spent |= {"input": 100_000, "output": 20_000, "cached": 0, "cost_usd": 0.6, "complete": True}
    refused = {"t": t + 5, "api": "anthropic", "model": "claude-sonnet-4-6", "status": 402, "refused": "budget"}
    log = metering.log_path(run_dir)
    log.write_text(json.dumps(spent) + "\n" + json.dumps(refused) + "\n")
    return run_dir, (t + 5 - st.started_at) / 60


@pytest.mark.slow  # a whole benchmark run, killed and resumed
def test_a_resumed_run_records_its_own_api_budget(generated_t6):
    run_dir, minutes = _unfinished(generated_t6, 0.5)
    assert json.loads((run_dir / "run.json").read_text())["spec"]["max_cost"] == 0.5  # written at the launch
    assert main(["run", "--resume", str(run_dir), "--quiet"]) == 1  # no checkpoint: not a success
    resumed = RunResult.load(run_dir)
    assert resumed.tracking_error is None, resumed.tracking_error
    hit = [h for h in resumed.limits["hit"] if h["limit"] == "api-cost"]
    assert len(hit) == 1 and "--max-cost 0.5)" in hit[0]["detail"] and "$0.6 used" in hit[0]["detail"], hit
    tags = mlflow.tracking.MlflowClient().get_run(resumed.mlflow_run_id).data.tags
    assert tags[schema.API_BUDGET] == f"$0.5: spent at {minutes:.1f} min: later requests refused ($0.6000 used)"


@pytest.mark.slow  # a whole benchmark run, killed and resumed
def test_a_resumed_run_without_a_budget_records_none(generated_t6):
    run_dir, _ = _unfinished(generated_t6, None)
    assert json.loads((run_dir / "run.json").read_text())["spec"]["max_cost"] is None
    main(["run", "--resume", str(run_dir), "--quiet"])
    tags = mlflow.tracking.MlflowClient().get_run(RunResult.load(run_dir).mlflow_run_id).data.tags
    assert not tags.get(schema.API_BUDGET)
