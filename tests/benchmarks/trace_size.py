"""Benchmark: what one agent run's conversation trace adds to the MLflow store (prints figures; not a test).

    python tests/benchmarks/trace_size.py [--requests 500] [--hours 2] [--tool-calls 450] [--smoke]

A synthetic run shaped like a long Claude Code run: ``--requests`` Anthropic Messages requests spread over
``--hours``, each resending the whole conversation (a 20 kB system prompt, 30 kB of tool definitions, every earlier
turn; compacted to its newest ~600 kB as the CLIs do near their context limit), each new turn a tool result of
0.5-40 kB (training logs), each answer streamed (SSE) with a text and a tool call; ``--tool-calls`` tool calls with
their outputs in ``events.jsonl``. The bodies go through the gateway's own capture (:class:`bench.gateway.transcript.
Transcript`: request view, SSE assembly, redaction, caps); the trace is built and written (bench.pipeline.traces,
``MlflowWriter.log_trace``) into a fresh SQLite store in a temporary folder.

Printed: the raw bytes the API saw, the bodies file, the store's database and artifact folder before and after the
trace, the time the capture took per request and the time to write the trace.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.figures import Span, add_smoke  # noqa: E402


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _log_text(rng: random.Random, n: int) -> str:
    lines, out = 0, []
    while sum(map(len, out)) < n:
        lines += 1
        out.append(
            f"epoch {lines // 50} step {lines:6d} loss {rng.uniform(0.3, 2.5):.4f} lr {3e-4:.1e} {rng.random()}\n"
        )
    return "".join(out)[:n]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--tool-calls", type=int, default=450)
    add_smoke(ap)
    args = ap.parse_args()
    if args.smoke:
        args.requests, args.hours, args.tool_calls = 20, 0.1, 10
    span = Span()

    tmp = Path(tempfile.mkdtemp(prefix="trace-size-"))
    os.environ["BENCH_MLRUNS_DIR"] = str(tmp / "mlruns")
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp / 'mlruns' / 'mlflow.db'}"
    from bench.gateway import transcript
    from bench.pipeline import traces
    from bench.tracking import schema
    from bench.tracking.writer import MlflowWriter
    from tests.mockllm import anthropic as mock_anthropic
    from tests.mockllm.reply import Reply
    from tests.mockllm.trajectory import Call

    rng = random.Random(0)
    run = tmp / "run"
    (run / "evidence").mkdir(parents=True)
    tx = transcript.Transcript(run / "evidence" / transcript.BODIES_NAME)
    t0 = 1_790_000_000.0
    step = args.hours * 3600 / args.requests
    system, tools = "You are a coding agent. " * 850, [{"name": f"tool{i}", "schema": "x" * 1000} for i in range(30)]
    messages: list[dict] = [{"role": "user", "content": "Improve the validation score of train.py. " * 40}]
    raw = capture_s = 0.0
    llm = []
    for i in range(args.requests):
        body = json.dumps({"model": "claude-sonnet-4-6", "system": system, "tools": tools, "messages": messages})
        while len(body) > 600_000 and len(messages) > 2:  # the CLI compacts near its context limit
            messages = messages[:1] + messages[3:]
            body = json.dumps({"model": "claude-sonnet-4-6", "system": system, "tools": tools, "messages": messages})
        command = f"python run_{i}.py --lr {rng.choice(['1e-3', '3e-4'])} --epochs {rng.randint(1, 9)}"
        reply = Reply(
            "claude-sonnet-4-6",
            text="Next I try a lower rate. " * rng.randint(2, 40),
            call=Call("Bash", {"command": command}),
        )
        sse = b"".join(mock_anthropic.stream(reply))
        raw += len(body) + len(sse)
        started = time.perf_counter()
        c = tx.start("anthropic", [("x-api-key", "sk-ant-benchmark-key-0000000000")], body.encode())
        for k in range(0, len(sse), 1500):
            c.feed(sse[k : k + 1500], True)
        rec = {"t": round(t0 + i * step, 3), "api": "anthropic", "path": "/v1/messages", "model": "claude-sonnet-4-6"}
        rec.update(status=200, latency_s=round(rng.uniform(2, 12), 3), input=len(body) // 4, output=len(sse) // 40)
        rec.update(cached=len(body) // 5, cache_write=0, complete=True, cost_usd=round(len(body) / 4 * 3e-6, 6))
        tx.finish(c, rec)
        capture_s += time.perf_counter() - started
        llm.append(rec)
        messages.append(
            {"role": "assistant", "content": [{"type": "tool_use", "name": "Bash", "input": {"command": command}}]}
        )
        out = _log_text(rng, rng.choice([500, 2000, 8000, 40_000]))
        messages.append({"role": "user", "content": [{"type": "tool_result", "content": out}]})
    (run / "evidence" / "llm.jsonl").write_text("".join(json.dumps(r) + "\n" for r in llm))
    events = []
    for k in range(args.tool_calls):
        t = t0 + k * args.hours * 3600 / args.tool_calls + 5
        target = f"python run_{k}.py --epochs 3"
        events.append({"kind": "tool_call", "tool": "shell", "target": target, "t": t})
        out = _log_text(rng, rng.choice([500, 2000, 8000]))
        events.append(
            {"kind": "tool_result", "tool": "shell", "target": target, "text": out, "t": t + rng.uniform(1, 60)}
        )
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))

    writer = MlflowWriter("trace-size")
    run_id = writer.create_run("claude-code t6 #1", {schema.KIND: schema.KIND_AGENT}, start_time=t0)
    db, art = tmp / "mlruns" / "mlflow.db", tmp / "mlruns"
    db_before, all_before = db.stat().st_size, _size(art)
    from types import SimpleNamespace

    # a RunResult as traces.record reads it: the run's description under ``run``
    described = SimpleNamespace(label="claude-code t6 #1", agent="claude-code", model="claude-sonnet-4-6", task="t6")
    info = dict(run=described, started_at=t0, wall_time_s=args.hours * 3600, status="success", reason="")
    started = time.perf_counter()
    tag = traces.record(writer, run_id, SimpleNamespace(**info, agent_events={}), run, run / "events.jsonl")
    write_s = time.perf_counter() - started
    assert tag.startswith("tr-"), tag
    db_after, all_after = db.stat().st_size, _size(art)
    bodies = (run / "evidence" / transcript.BODIES_NAME).stat().st_size
    mb = 1 << 20
    print(f"{args.requests} requests over {args.hours:g} h, {args.tool_calls} tool calls (on this machine)")
    print(f"  bodies the API saw (requests + streamed answers): {raw / mb:8.1f} MiB")
    print(f"  llm-bodies.jsonl (capped, redacted):              {bodies / mb:8.2f} MiB")
    print(f"  SQLite store growth for the trace:                {(db_after - db_before) / mb:8.2f} MiB")
    print(f"  whole store folder growth (db + artifacts):       {(all_after - all_before) / mb:8.2f} MiB")
    print(f"  capture per request (view, SSE assembly, redact): {capture_s / args.requests * 1000:8.2f} ms")
    print(f"  writing the trace ({args.requests + args.tool_calls + 1} spans):              {write_s:8.1f} s")
    what = f"{args.requests} requests over {args.hours:g} h, {args.tool_calls} tool calls"
    span.figure("trace_size.api_bodies", f"{raw / mb:.0f} MiB", f"the bodies the API saw, {what}")
    span.figure("trace_size.bodies_file", f"{bodies / mb:.1f} MiB", f"llm-bodies.jsonl, {what}")
    span.figure("trace_size.store_growth", f"{(db_after - db_before) / mb:.1f} MiB", f"SQLite store, {what}")
    span.figure("trace_size.artifacts_growth", f"{(all_after - all_before - (db_after - db_before)) / mb:.1f} MiB",
                f"the artifact folder, {what}")  # fmt: skip
    span.figure("trace_size.capture_ms", f"{capture_s / args.requests * 1000:.1f} ms", f"capture per request, {what}")
    span.figure("trace_size.spans", f"{args.requests + args.tool_calls + 1}", f"spans, {what}")
    span.figure("trace_size.write_s", f"{write_s:.0f} s", f"writing the trace, {what}")


if __name__ == "__main__":
    main()
