"""Attacks on the conversation trace (bench.pipeline.traces): an agent that reads its own API key and shows it to its
model must not put that key into the MLflow store: not through the trace, not through the run's artifacts (agent.log,
events.jsonl, the evidence), which keep it only in the run directory on the researcher's own disk.

Claude Code in the sandbox, through the metering gateway, against the TLS mock (tests/bench/agents/
test_gateway_clis.py's set-up); the mock's scripted model asks for a shell command that prints the CLI's key, whose
output then travels in the next request's body (a tool result) and in the CLI's tool-call events. The key is not
key-shaped, so only its value, known from the harness's environment, can find it. The CLI holds the run's token in
its place (the gateway holds the key): the key never reaches the model; the gateway refuses the request whose body
carries the token (an agent probing), and the token must not reach the store either.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from bench.paths import mlruns_dir
from bench.runner import RunSpec, run
from bench.sandbox.bwrap import probe
from bench.tracking import schema
from tests.bench.agents.test_gateway_clis import CASES, agent, campaign, cli_dir, start_mock, tls_env  # noqa: F401
from tests.lazy import lazy
from tests.mockllm import default_trajectory, run1_from_train
from tests.mockllm.trajectory import shell

mlflow = lazy("mlflow")  # imported at its first use (tests/lazy.py)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(probe() is not None, reason=f"no usable sandbox here: {probe()}"),
]


@pytest.mark.parametrize("agent", ["claude-code"], indirect=True)
def test_a_key_the_agent_prints_never_reaches_the_store_through_the_trace(agent, generated_t6, tls_env, monkeypatch):  # noqa: F811
    case = CASES[agent]
    key = f"plain-credential-{uuid.uuid4().hex}"  # no sk- prefix: only the environment's value can find it
    run1 = run1_from_train((generated_t6.folder / "train.py").read_text())
    steps = default_trajectory(run1)
    steps.insert(-1, shell(f'echo "the key is ${case.key}"'))
    mock = start_mock(case, tls_env, steps, monkeypatch)
    monkeypatch.setenv(case.key, key)  # the CLI's credential, as the harness gives it
    try:
        spec = RunSpec(task=generated_t6, agent=agent, model=case.model, budget_s=150, grace_s=5, console=False,
                       campaign=campaign())  # fmt: skip
        result = run(spec)
    finally:
        mock.release.set()
        mock.stop()
    bodies = [json.dumps(r.body) for r in mock.calls()]
    # the CLI holds the run's token, not the key (the gateway holds the key): what it echoes is the token
    assert not any(key in b for b in bodies), "the key entered the sandbox"
    echo = re.search(
        r"the key is (bench-run-[0-9a-f]{32})", (Path(result.run_dir) / "agent.log").read_text("utf-8", "replace")
    )
    assert echo, "the attack did not happen: the CLI never printed its token"
    token = echo.group(1)
    # the next request carried the token in its body (a tool result): the gateway refused it as a probe, so the
    # token never reached the model either
    assert not any(token in b for b in bodies), "the gateway forwarded a body that carried the run's token"
    assert result.agent_events["gateway"]["refused"].get("misplaced", 0) >= 1, result.agent_events["gateway"]

    client = mlflow.tracking.MlflowClient()
    exp = client.get_run(result.mlflow_run_id).info.experiment_id
    (trace,) = client.search_traces(locations=[exp], run_id=result.mlflow_run_id)
    text = json.dumps([s.to_dict() for s in trace.data.spans])
    assert "the key is [REDACTED]" in text and key not in text and token not in text
    db = (mlruns_dir() / "mlflow.db").read_bytes()
    assert key.encode() not in db and token.encode() not in db  # not in any table of the store
    assert token not in (Path(result.run_dir) / "evidence" / "llm-bodies.jsonl").read_text()
    assert schema.TRACE in client.get_run(result.mlflow_run_id).data.tags
    # the artifacts the run logged: the agent's output carried the key, the store's copies do not
    assert token in (Path(result.run_dir) / "agent.log").read_text(errors="replace"), "the CLI's output lost the echo"
    local = Path(
        mlflow.artifacts.download_artifacts(
            run_id=result.mlflow_run_id, dst_path=str(Path(result.run_dir).parent / "dl")
        )
    )
    logged = {f.relative_to(local).as_posix(): f.read_bytes() for f in local.rglob("*") if f.is_file()}
    assert {"agent.log", "events.jsonl"} <= set(logged)
    assert [name for name, data in logged.items() if key.encode() in data or token.encode() in data] == []
    assert b"[REDACTED]" in logged["agent.log"] + logged["events.jsonl"]
