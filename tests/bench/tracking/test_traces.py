"""The agent's conversation as one MLflow trace (bench.pipeline.traces), read back through MlflowClient.

Each test has its own SQLite store, so that the store's files can be searched for secrets byte by byte. Expected
times, tokens and texts are the ones written into the run's files here (or sent through the gateway to the mock).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow import MlflowClient

from bench.gateway import transcript
from bench.pipeline import traces
from bench.tracking import schema, store
from bench.tracking.writer import MlflowWriter, TrackingError
from tests.bench.gateway.test_proxy import SECRET, certs, gateway, lines, mock, post, serve  # noqa: F401

T0 = 1_790_000_000  # the run's launch (unix s)
NS = 10**9


@pytest.fixture(scope="module")
def mlruns(tmp_path_factory) -> Path:
    """A store of this module's own (its database and artifacts under one folder, searched for secrets below);
    made once: creating MLflow's schema takes seconds."""
    folder = tmp_path_factory.mktemp("store") / "mlruns"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BENCH_MLRUNS_DIR", str(folder))
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{folder / 'mlflow.db'}")
        yield folder
    store.client()  # point MLflow back at the session's store for the next module


@pytest.fixture
def writer(mlruns) -> MlflowWriter:
    return MlflowWriter("traces-test")


def result(**kw) -> SimpleNamespace:
    """A RunResult's shape as traces.record reads it: the run's description under ``run``."""
    run = dict(label="claude-code t6 #1", agent="claude-code", model="claude-sonnet-4-5", task="t6")
    run.update({k: kw.pop(k) for k in list(kw) if k in run})
    base = dict(started_at=T0, wall_time_s=600.0, status="success", reason="scored 0.41", agent_events={})
    return SimpleNamespace(run=SimpleNamespace(**run), **{**base, **kw})


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def streamed_text(sse: bytes) -> str:
    """The text of an Anthropic stream as the client received it: its text deltas, joined."""
    out = ""
    for line in sse.decode().splitlines():
        if line.startswith("data:") and (o := json.loads(line[5:]))["type"] == "content_block_delta":
            out += o["delta"].get("text", "")
    return out


def the_trace(w: MlflowWriter, run_id: str):
    found = MlflowClient().search_traces(locations=[w.experiment_id], run_id=run_id)
    assert len(found) == 1, found
    return found[0]


def test_the_trace_shows_requests_and_tool_calls_in_order_with_their_times_and_tokens(writer, tmp_path):
    run = tmp_path / "run"
    llm = [
        {"t": T0 + 10, "api": "anthropic", "path": "/v1/messages", "model": "claude-sonnet-4-5", "status": 200,
         "latency_s": 4.5, "ttfb_s": 1.25, "input": 1200, "output": 80, "cached": 1000, "cache_write": 0,
         "complete": True, "cost_usd": 0.0123, "body": 0},
        {"t": T0 + 70, "api": "anthropic", "path": "/v1/messages", "model": "claude-sonnet-4-5", "status": 200,
         "latency_s": 2.0, "input": 1500, "output": 20, "cached": 1200, "cache_write": 100, "complete": False,
         "cost_usd": 0.002, "cut": "the client closed its connection mid-answer", "body": 1},
        {"t": T0 + 130, "api": "anthropic", "path": "/v1/messages", "model": "claude-sonnet-4-5", "status": 402,
         "refused": "budget", "latency_s": 0.5},
    ]  # fmt: skip
    write_jsonl(run / "evidence" / "llm.jsonl", llm)
    bodies = [
        {"id": 0, "request": {"bytes": 900, "messages": [{"role": "user", "content": "Improve train.py"}]},
         "response": {"bytes": 4000, "blocks": [{"type": "tool_use", "name": "Bash", "text": "python run_1.py"}]}},
        {"id": 1, "request": {"bytes": 1900, "messages": [{"role": "user", "content": "val 0.41"}]},
         "response": {"bytes": 300, "blocks": [{"type": "text", "text": "Good, now I read train.py"}]}},
    ]  # fmt: skip
    write_jsonl(run / "evidence" / transcript.BODIES_NAME, bodies)
    events = [
        {"kind": "tool_call", "tool": "shell", "target": "python run_1.py", "t": T0 + 15},
        {"kind": "message", "text": "waiting", "t": T0 + 20},
        {"kind": "tool_result", "tool": "shell", "target": "python run_1.py", "text": "val 0.41", "t": T0 + 60},
        {"kind": "tool_call", "tool": "read", "target": "train.py", "t": T0 + 75},
        {"kind": "tool_result", "tool": "read", "target": "train.py", "text": "import torch", "t": T0 + 76.5},
    ]
    write_jsonl(run / "events.jsonl", events)
    run_id = writer.create_run("claude-code t6 #1", {schema.KIND: schema.KIND_AGENT}, start_time=T0)

    trace_id = traces.record(writer, run_id, result(), run, run / "events.jsonl")

    trace = the_trace(writer, run_id)
    assert trace.info.trace_id == trace_id and trace.info.trace_metadata["mlflow.sourceRun"] == run_id
    assert trace.info.tags[schema.KIND] == schema.TRACE_KIND
    root, *spans = sorted(trace.data.spans, key=lambda s: (s.parent_id is not None, s.start_time_ns))
    assert (root.span_type, root.start_time_ns, root.end_time_ns) == ("AGENT", T0 * NS, (T0 + 600) * NS)
    assert root.outputs["status"] == "success" and root.outputs["llm_requests"] == 3
    assert {s.parent_id for s in spans} == {root.span_id}
    got = [(s.span_type, s.name, s.start_time_ns, s.end_time_ns) for s in spans]
    assert got == [
        ("LLM", "LLM 1: claude-sonnet-4-5", (T0 + 10) * NS, int((T0 + 14.5) * NS)),
        ("TOOL", "shell: python run_1.py", (T0 + 15) * NS, (T0 + 60) * NS),
        ("LLM", "LLM 2: claude-sonnet-4-5", (T0 + 70) * NS, (T0 + 72) * NS),
        ("TOOL", "read: train.py", (T0 + 75) * NS, int((T0 + 76.5) * NS)),
        ("LLM", "LLM 3: claude-sonnet-4-5", (T0 + 130) * NS, int((T0 + 130.5) * NS)),
    ]
    first, shell, second, read, refused = spans
    assert first.inputs["messages"][0]["content"] == "Improve train.py"
    assert first.outputs["blocks"][0] == {"type": "tool_use", "name": "Bash", "text": "python run_1.py"}
    usage = first.attributes["mlflow.chat.tokenUsage"]
    assert (usage["input_tokens"], usage["output_tokens"], usage["cache_read_input_tokens"]) == (1200, 80, 1000)
    assert first.attributes["mlflow.llm.cost"] == {"total_cost": 0.0123}
    assert first.attributes[schema.SPAN_LLM_ATTRS["ttfb_s"]] == 1.25 and first.status.status_code == "OK"
    assert second.status.status_code == "ERROR" and "mid-answer" in second.status.description
    assert refused.status.status_code == "ERROR" and refused.outputs == {"refused": "budget", "status": 402}
    assert "mlflow.chat.tokenUsage" not in refused.attributes  # a refused request used no tokens
    assert shell.outputs == {"text": "val 0.41", "is_error": False} and read.inputs["target"] == "train.py"
    # MLflow sums the spans' usage for the trace: the two served requests
    assert trace.info.token_usage["input_tokens"] == 2700 and trace.info.token_usage["output_tokens"] == 100

    assert traces.record(writer, run_id, result(), run, run / "events.jsonl") == trace_id  # bench record again
    the_trace(writer, run_id)  # still one

    # an attempt cut short (here: its last span never reached the store) is replaced by the whole one
    spec = traces.build(run, run / "events.jsonl", {"started_at": T0, "ended_at": T0 + 600})
    writer.delete_traces([trace_id])
    spec.spans.pop()
    writer.log_trace(run_id, spec)  # the root and 4 of the 5 spans
    assert list(writer.traces_of(run_id).values()) == [5]
    again = traces.record(writer, run_id, result(), run, run / "events.jsonl")
    assert again != trace_id and list(writer.traces_of(run_id).items()) == [(again, 6)]


def test_without_gateway_or_tool_calls_no_trace_and_a_failed_write_only_costs_a_tag(writer, tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    run_id = writer.create_run("baseline t6 #1", {schema.KIND: schema.KIND_AGENT}, start_time=T0)
    assert traces.record(writer, run_id, result(agent="baseline"), run, run / "events.jsonl").startswith("none: ")
    assert MlflowClient().search_traces(locations=[writer.experiment_id], run_id=run_id) == []

    write_jsonl(run / "events.jsonl", [{"kind": "tool_call", "tool": "shell", "target": "ls", "t": T0 + 1}])

    def broken(self, run_id, spec):
        raise TrackingError("the store went away")

    monkeypatch.setattr(MlflowWriter, "log_trace", broken)
    tag = traces.record(writer, run_id, result(), run, run / "events.jsonl")
    assert tag.startswith("failed: ") and "the store went away" in tag
    monkeypatch.undo()


def test_a_run_through_the_gateway_leaves_no_secret_in_the_store(writer, mlruns, mock, certs, tmp_path, monkeypatch):  # noqa: F811
    env_key = "sk-ant-oat01-" + "K" * 48  # a login token in the harness's environment
    monkeypatch.setenv("CLAUDE_CODE_OAUTH_TOKEN", env_key)
    shaped = "sk-proj-" + "P" * 32
    run = tmp_path / "run"
    (run / "evidence").mkdir(parents=True)
    gw = gateway(mock, certs, run / "evidence")
    server, sock = serve(gw, tmp_path)
    try:
        body = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 100,
            "stream": True,
            "messages": [{"role": "user", "content": f"my env: TOKEN={env_key} KEY={SECRET} other={shaped}"}],
        }
        said = []
        for _ in range(2):
            status, _, data = post(sock, "/v1/messages", body, {"x-api-key": SECRET, "anthropic-version": "2023-06-01"})
            assert status == 200
            said.append(streamed_text(data))
    finally:
        server.close()
    got = lines(run / "evidence", 2)
    assert [r["body"] for r in got] == [0, 1]
    write_jsonl(run / "events.jsonl", [{"kind": "tool_call", "tool": "shell", "target": f"echo {SECRET}", "t": T0}])
    run_id = writer.create_run("r", {schema.KIND: schema.KIND_AGENT}, start_time=T0)
    trace_id = traces.record(writer, run_id, result(started_at=got[0]["t"] - 1), run, run / "events.jsonl")
    assert trace_id.startswith("tr-"), trace_id

    trace = the_trace(writer, run_id)
    llm = [s for s in trace.data.spans if s.span_type == "LLM"]
    assert len(llm) == 2 and "my env: TOKEN=[REDACTED] KEY=[REDACTED]" in json.dumps(llm[0].inputs)
    assert said[0] and llm[0].outputs["blocks"][0]["text"] == said[0]  # the mock's answer, assembled
    files = [p for p in mlruns.rglob("*") if p.is_file()] + [run / "evidence" / "llm-bodies.jsonl"]
    assert any(p.name == "mlflow.db" for p in files)
    for path in files:
        data = path.read_bytes()
        for secret in (env_key, SECRET, shaped):
            assert secret.encode() not in data, (path, secret)


def test_a_run_recorded_before_bodies_were_kept_and_a_span_flood(tmp_path, monkeypatch):
    """Lines without a stored body say so; past MAX_SPANS the first spans are kept and the rest counted."""
    run = tmp_path / "run"
    llm = [{"t": T0 + i, "api": "chat", "path": "/v1/chat/completions", "status": 200, "latency_s": 0.5,
            "model": "gpt-5", "input": 10, "output": 1} for i in range(6)]  # fmt: skip
    write_jsonl(run / "evidence" / "llm.jsonl", llm)
    monkeypatch.setattr(traces, "MAX_SPANS", 4)
    info = {"started_at": T0, "ended_at": T0 + 60, "name": "r", "agent": "codex", "status": "timeout"}
    spec = traces.build(run, run / "events.jsonl", info)
    assert [s.start_ns for s in spec.spans] == [(T0 + i) * NS for i in range(4)]
    assert spec.spans[0].inputs == {"path": "/v1/chat/completions", "body": "not kept"}
    assert spec.outputs["spans_left_out"] == 2 and spec.outputs["llm_requests"] == 6


@pytest.mark.slow  # starts a PostgreSQL cluster and an MLflow server (~40 s)
def test_a_trace_through_the_server_on_postgresql(mlflow_server, tmp_path, monkeypatch):
    """``bench server`` (MLflow's server on PostgreSQL, for many nodes) takes the trace through its REST API."""
    import uuid

    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)
    store._client.cache_clear()
    try:
        run = tmp_path / "run"
        llm = [{"t": T0 + 5 * i, "api": "responses", "path": "/v1/responses", "status": 200, "latency_s": 1.5,
                "model": "gpt-5.5", "input": 100 + i, "output": 7, "cost_usd": 0.001} for i in range(3)]  # fmt: skip
        write_jsonl(run / "evidence" / "llm.jsonl", llm)
        write_jsonl(run / "events.jsonl", [{"kind": "tool_call", "tool": "shell", "target": "ls", "t": T0 + 6}])
        w = MlflowWriter(f"traces-{uuid.uuid4().hex[:8]}")
        run_id = w.create_run("codex t6 #1", {schema.KIND: schema.KIND_AGENT}, start_time=T0)
        trace_id = traces.record(w, run_id, result(agent="codex"), run, run / "events.jsonl")
        trace = MlflowClient(mlflow_server.url).get_trace(trace_id)
        spans = sorted((s for s in trace.data.spans if s.parent_id), key=lambda s: s.start_time_ns)
        want = [("LLM", T0 * NS), ("LLM", (T0 + 5) * NS), ("TOOL", (T0 + 6) * NS), ("LLM", (T0 + 10) * NS)]
        assert [(s.span_type, s.start_time_ns) for s in spans] == want
        assert spans[-1].attributes["mlflow.chat.tokenUsage"]["input_tokens"] == 102
        assert trace.info.trace_metadata["mlflow.sourceRun"] == run_id
    finally:  # the other tests' store again
        store._client.cache_clear()
        mlflow.set_tracking_uri(store.default_uri())
