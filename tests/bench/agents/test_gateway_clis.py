"""End to end: the real CLIs in the sandbox, their LLM requests through the metering gateway to a TLS mock.

The CLI's base URL names ``https://api.mockllm.test:PORT``: a name only the gateway resolves (to 127.0.0.1, by
``BENCH_GATEWAY_RESOLVE``), with a certificate only the gateway trusts (``BENCH_GATEWAY_CA``). Inside the sandbox the
CLI sees the gateway's plain-HTTP port alone. What the run records (MLflow's tokens and cost) must equal what the mock
served, request by request, also when the budget kills the CLI mid-stream; a run that hits ``max_cost`` says so.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from bench.gateway import metering
from bench.runner import RunSpec, run
from bench.tracking import schema
from tests.bench.agents import test_clis
from tests.bench.agents.tlsmock import HOST, TlsMock, make_certs
from tests.lazy import lazy
from tests.mockllm import default_trajectory, run1_from_train
from tests.mockllm import server as mock_server

mlflow = lazy("mlflow")  # imported at its first use (tests/lazy.py)

GATEWAY_CLIS = ["claude-code", "codex", "gemini", "opencode", "aider"]
# killed mid-stream (45 s each): the three streams whose usage arrives differently (Anthropic's at its start,
# Responses' at its end, Gemini's on every chunk); OpenCode's and Aider's Chat Completions, like Responses, report
# nothing before the end (the metering of a cut stream is the same code path, tested in tests/bench/gateway/)
KILLED_CLIS = ["claude-code", "codex", "gemini"]
CAPPED_CLIS = ["claude-code", "codex"]
# models with a row in the price table (test_clis's mock-model has none, so no cost)
CASES = {**test_clis.CASES}
CASES["opencode"] = replace(CASES["opencode"], model="bench/kimi-k2.6")
CASES["aider"] = replace(CASES["aider"], model="openai/gpt-5.5")
campaign = test_clis.campaign
agent, cli_dir = test_clis.agent, test_clis.cli_dir  # the CLI installed and registered (fixtures)
# USD per 1M in/out, the price table's rows, copied by hand (Gemini's side requests may name its flash models)
RATES = {
    "claude-sonnet-4-6": (3.0, 15.0),
    "gpt-5.5": (5.0, 30.0),
    "kimi-k2.6": (0.95, 4.0),
    "gemini-2.5-pro": (1.25, 10.0),
    "gemini-2.5-flash": (0.30, 2.50),
    "gemini-2.5-flash-lite": (0.10, 0.40),
}


class StallingMock(TlsMock):
    """Stalls the SSE answer of the model turn ``stall_at`` after its first two events (the model "thinking"), so
    that the run's time budget kills the CLI mid-stream."""

    stall_at: int | None = None
    stalled: int | None = None  # the index in ``usages`` of the stalled reply
    stalled_sent = 0  # events of the stalled answer sent before the silence

    def turn(self, req, tools, done):
        reply = super().turn(req, tools, done)
        if self.stall_at is not None and req.step is not None and req.step >= self.stall_at and self.stalled is None:
            self.stalled = len(self.usages) - 1
            self._stall_thread = threading.get_ident()
        return reply


@pytest.fixture
def tls_env(tmp_path, monkeypatch):
    ca, cert, key = make_certs(tmp_path)
    monkeypatch.setenv("BENCH_GATEWAY_RESOLVE", f"{HOST}=127.0.0.1")
    monkeypatch.setenv("BENCH_GATEWAY_CA", str(ca))
    original = mock_server._Handler._send_sse

    def send_sse(self, events):  # the stalled turn: two events (Gemini: all but its last), then silence
        if getattr(self.mock, "_stall_thread", None) == threading.get_ident():
            events = list(events)
            head = events[:-1][:2] if ":streamGenerateContent" in self.path else events[:2]
            self.mock.stalled_sent = len(head)
            events = _head_then_wait(head, self.mock)
        original(self, events)

    monkeypatch.setattr(mock_server._Handler, "_send_sse", send_sse)
    return cert, key


def _head_then_wait(events, mock):
    yield from events
    mock.release.wait(120)


def start_mock(case, tls_env, trajectory, monkeypatch) -> StallingMock:
    mock = StallingMock(trajectory, cert=tls_env[0], key=tls_env[1], model=case.model)
    mock.release = threading.Event()
    mock.start()
    monkeypatch.setenv(case.base_url, mock.url_for() + case.suffix)
    monkeypatch.setenv(case.key, "dummy-key-for-the-mock")
    return mock


def recorded(result) -> tuple[dict, dict, list[dict]]:
    run_data = mlflow.tracking.MlflowClient().get_run(result.mlflow_run_id).data
    return run_data.metrics, run_data.tags, metering.read(metering.log_path(Path(result.run_dir)))


def expected_cost(model: str, tin: int, tout: int) -> float:
    rin, rout = RATES[model]
    return (tin * rin + tout * rout) / 1e6


def served(mock: TlsMock, skip: int | None = None) -> list[tuple[str, int, int]]:
    """(model, input, output) of every reply the mock served (but ``skip``), sorted."""
    return sorted((m, i, o) for n, (m, (i, o)) in enumerate(zip(mock.models, mock.usages, strict=True)) if n != skip)


@pytest.mark.slow
@pytest.mark.parametrize("agent", GATEWAY_CLIS, indirect=True)
def test_cli_through_the_gateway_is_metered_exactly(agent, generated_t6, tls_env, monkeypatch):
    case = CASES[agent]
    run1 = run1_from_train((generated_t6.folder / "train.py").read_text())
    mock = start_mock(case, tls_env, default_trajectory(run1), monkeypatch)
    try:
        spec = RunSpec(task=generated_t6, agent=agent, model=case.model, budget_s=150, grace_s=5, console=False,
                       campaign=campaign())  # fmt: skip
        result = run(spec)
    finally:
        mock.release.set()
        mock.stop()
    assert result.status == "success", (result.reason, mock.summary())
    metrics, tags, lines = recorded(result)
    assert len(lines) == len(mock.calls()) and all(r["status"] == 200 for r in lines)
    tin, tout = sum(i for i, _ in mock.usages), sum(o for _, o in mock.usages)
    assert (metrics[schema.TOKENS_INPUT], metrics[schema.TOKENS_OUTPUT]) == (tin, tout)
    # request by request: the model asked for and the tokens served
    assert sorted((r["model"], r["input"], r["output"]) for r in lines if r["api"]) == served(mock)
    assert case.model.split("/")[-1] in mock.models, mock.models
    cost = sum(expected_cost(m, i, o) for m, i, o in served(mock))
    assert metrics[schema.COST_USD] == pytest.approx(cost, abs=1e-6 * len(lines))  # each line rounded to 1e-6
    assert tags[schema.COST_SOURCE] == "gateway" and metrics[schema.LLM_REQUESTS] == len([r for r in lines if r["api"]])
    # its conversation in MLflow: one trace on the run, an LLM span per request served, in order (bench.pipeline.traces)
    client = mlflow.tracking.MlflowClient()
    exp = client.get_run(result.mlflow_run_id).info.experiment_id
    (trace,) = client.search_traces(locations=[exp], run_id=result.mlflow_run_id)
    spans = sorted((s for s in trace.data.spans if s.span_type == "LLM"), key=lambda s: s.start_time_ns)
    assert [s.start_time_ns for s in spans] == sorted(round(r["t"] * 1e9) for r in lines) and tags[schema.TRACE]
    chat = [r for r in mock.calls("chat") if r.body.get("stream")]
    assert all(r.body["stream_options"]["include_usage"] for r in chat)  # asked for by the gateway where not asked
    # the CLI's own count of the same run (its events), against the gateway's
    cli = result.agent_events["cli_metrics"]
    slack = 50 if agent == "aider" else 0  # Aider prints rounded counts ("5.9k sent"), of its main requests only
    assert cli[schema.TOKENS_INPUT] <= tin + slack and cli[schema.TOKENS_OUTPUT] <= tout + slack, (cli, tin, tout)
    assert cli[schema.TOKENS_INPUT] > 0 and cli[schema.TOKENS_OUTPUT] > 0, cli
    if agent == "codex":  # Codex sums every model turn of its one task: all of them went through the gateway
        assert (cli[schema.TOKENS_INPUT], cli[schema.TOKENS_OUTPUT]) == (tin, tout)
    # no route to the API but the gateway: the sandbox's proxy saw no request for it
    network = Path(result.run_dir) / "evidence" / "network.jsonl"
    seen = [json.loads(x) for x in network.read_text().splitlines()] if network.exists() else []
    assert not [r for r in seen if r["host"] == HOST]


@pytest.mark.slow
@pytest.mark.parametrize("agent", KILLED_CLIS, indirect=True)
def test_cli_killed_mid_stream_keeps_its_tokens(agent, generated_t6, tls_env, monkeypatch):
    case = CASES[agent]
    run1 = run1_from_train((generated_t6.folder / "train.py").read_text())
    mock = start_mock(case, tls_env, default_trajectory(run1), monkeypatch)
    mock.stall_at = 1  # the second model turn never ends: the budget ends the run (the stall comes in seconds)
    t0 = time.time()
    try:
        spec = RunSpec(task=generated_t6, agent=agent, model=case.model, budget_s=30, grace_s=5, console=False,
                       campaign=campaign())  # fmt: skip
        result = run(spec)
    finally:
        mock.release.set()
        mock.stop()
    assert result.timed_out and time.time() - t0 < 150, (result.status, result.reason)
    assert mock.stalled is not None, mock.summary()
    metrics, tags, lines = recorded(result)
    cut = [r for r in lines if r.get("cut")]
    assert len(cut) == 1 and cut[0]["complete"] is False, lines
    whole = served(mock, skip=mock.stalled)
    stalled_in, stalled_out = mock.usages[mock.stalled]
    # what the stalled stream had delivered: Anthropic's message_start (input, output 1); Responses: nothing yet;
    # Gemini: the usage on each chunk sent (the mock's carry the reply's), none when its only chunk was held back
    streamed = {"claude-code": (stalled_in, 1), "codex": (0, 0)}.get(agent)
    streamed = streamed or ((stalled_in, stalled_out) if mock.stalled_sent else (0, 0))
    assert (cut[0]["input"], cut[0]["output"]) == streamed
    tin = sum(i for _, i, _ in whole) + streamed[0]
    tout = sum(o for _, _, o in whole) + streamed[1]
    assert (metrics[schema.TOKENS_INPUT], metrics[schema.TOKENS_OUTPUT]) == (tin, tout)
    # the stalled answer's usage never came: it is charged the output limit its request named (read here from the
    # body the mock received; 128,000 where it named none) at the output rate, and says so
    (asked,) = [r for r in mock.turns() if r.step is not None and r.step >= 1][:1]
    body = asked.body or {}
    limit = {
        "claude-code": body.get("max_tokens"),
        "codex": body.get("max_output_tokens"),
        "gemini": (body.get("generationConfig") or {}).get("maxOutputTokens"),
    }[agent] or 128_000
    assert (cut[0]["cost_basis"], cut[0]["charged_output"]) == ("max_tokens", limit), cut[0]
    charged_in = streamed[0] or cut[0]["charged_input"]  # no input said yet: every body byte an input token
    assert charged_in >= stalled_in
    model = mock.models[mock.stalled]
    charge = expected_cost(model, charged_in, limit)  # (the rows of these models have no dearer cache-write rate)
    assert cut[0]["cost_usd"] >= expected_cost(model, stalled_in, stalled_out)  # at least what the API would bill
    cost = sum(expected_cost(m, i, o) for m, i, o in whole) + charge
    assert metrics[schema.COST_USD] == pytest.approx(cost, abs=1e-6 * len(lines))
    assert tags[schema.COST_SOURCE] == "gateway+max_tokens"


@pytest.mark.slow
@pytest.mark.parametrize("agent", CAPPED_CLIS, indirect=True)
def test_run_that_hits_max_cost_ends_with_the_cap_recorded(agent, generated_t6, tls_env, monkeypatch):
    case = CASES[agent]
    run1 = run1_from_train((generated_t6.folder / "train.py").read_text())
    mock = start_mock(case, tls_env, default_trajectory(run1), monkeypatch)
    try:
        spec = RunSpec(task=generated_t6, agent=agent, model=case.model, budget_s=90, grace_s=5, console=False,
                       campaign=campaign(), max_cost=0.000001)  # fmt: skip
        result = run(spec)
    finally:
        mock.release.set()
        mock.stop()
    metrics, tags, lines = recorded(result)
    refused = [r for r in lines if r.get("refused") == "budget"]
    assert refused and all(r["status"] in (402, 429) for r in refused), lines
    assert len(mock.turns()) < len(default_trajectory(run1))  # the trajectory never finished
    hit = [h for h in result.limits["hit"] if h["limit"] == "api-cost"]
    assert hit and "--max-cost 1e-06" in hit[0]["detail"], result.limits
    assert "api-cost" in tags[schema.LIMITS_HIT] and tags[schema.API_BUDGET].startswith("$1e-06: spent")
    assert result.status != "success" and not result.timed_out, (result.status, result.reason)
    assert result.status != "interrupted", result.reason  # not an infrastructure failure a campaign would retry
    assert metrics[schema.LLM_ERRORS] >= len(refused)
