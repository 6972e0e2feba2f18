"""The agent's conversation as one MLflow trace.

What it asked its model and was told, and the tools it ran.

Built at the record step from files the harness wrote during the run (so ``bench record`` and
``--resume`` build the same trace): the metering gateway's ``evidence/llm.jsonl`` (one line per LLM
request: time, latency, model, tokens, cost, status), its ``evidence/llm-bodies.jsonl`` (each
request's and answer's body, capped, secrets removed: :mod:`bench.gateway.transcript`) and the CLI's
``events.jsonl`` (its tool calls and their results, as parsed from its output). :func:`build` turns
them into a :class:`TraceSpec`, plain data; :meth:`bench.tracking.writer.MlflowWriter. log_trace`
writes it (the only MLflow call).

The trace: one root span (``AGENT``) from the launch to the end of the run, whose children, in time
order, are one ``LLM`` span per request (its real start and end: the gateway's clock; inputs: the
request's stored view; outputs: the answer's; attributes: model, tokens and cost in MLflow's own
keys, so the UI sums them, plus the gateway's fields) and one ``TOOL`` span per tool call (from the
call's event to its result's: the harness's clock as it read the CLI's output). It is linked to the
agent run (``mlflow.sourceRun``), so the run's Traces tab shows it.

Runs without a gateway (offline agents, a CLI that could not be pointed at one, ``BENCH_GATEWAY=0``)
get a trace of their tool calls alone when their CLI reported any; runs with neither (the baseline,
optuna) get none: the agent run's ``bench.trace`` tag says why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from bench.gateway import metering, transcript
from bench.tracking import schema
from bench.tracking.writer import MlflowWriter

TOOL_TEXT_CAP = 1024  # characters of a tool call's input or output in its span (the next request holds its result)
MAX_SPANS = 2_000  # a request or tool loop must not make a trace the UI cannot open (nor a record of minutes)
NS = 1_000_000_000
TOTALS = (schema.TOKENS_INPUT, schema.TOKENS_OUTPUT, schema.TOKENS_CACHED, schema.COST_USD, schema.TOOL_CALLS)


@dataclass
class SpanSpec:
    """One span of the conversation's trace, as built before it is written."""

    name: str
    span_type: str  # "LLM" | "TOOL"
    start_ns: int
    end_ns: int
    inputs: dict
    outputs: dict
    attributes: dict = field(default_factory=dict)
    error: str | None = None  # the span's status is ERROR with this description


@dataclass
class TraceSpec:
    """The conversation's trace, as built before it is written: its root and spans."""

    name: str
    start_ns: int
    end_ns: int
    inputs: dict
    outputs: dict
    tags: dict[str, str]
    spans: list[SpanSpec]


def _ns(t: float) -> int:
    return int(round(float(t) * NS))


def _redacted(text: object, redact: transcript.Redactor) -> str:
    return transcript.cap(redact(str(text or "")), TOOL_TEXT_CAP)[0]


def llm_spans(records: list[dict], bodies: dict[int, dict]) -> list[SpanSpec]:
    """One LLM span per gateway line, with its stored bodies when the gateway kept them."""
    out = []
    for i, r in enumerate(records, 1):
        start = float(r["t"])
        end = start + max(0.0, float(r.get("latency_s") or 0))
        body = bodies.get(r["body"]) if isinstance(r.get("body"), int) else None
        inputs = (body or {}).get("request") or {"path": r.get("path"), "body": "not kept"}
        if r.get("refused"):
            outputs: dict = {"refused": r["refused"], "status": r.get("status")}
        elif r.get("error"):
            outputs = {"error": r["error"]}
        else:
            outputs = (body or {}).get("response") or {"body": "not kept"}
        if body and body.get("omitted") == "run cap":
            inputs = {**inputs, "omitted": "the run's cap on stored bodies was reached"}
        attrs = {schema.SPAN_LLM_ATTRS[k]: v for k, v in r.items() if k in schema.SPAN_LLM_ATTRS and v is not None}
        if r.get("api") and not r.get("refused") and r.get("status") != 0:
            tin, tout = int(r.get("input") or 0), int(r.get("output") or 0)
            attrs["mlflow.chat.tokenUsage"] = {
                "input_tokens": tin,
                "output_tokens": tout,
                "total_tokens": tin + tout,
                "cache_read_input_tokens": int(r.get("cached") or 0),
                "cache_creation_input_tokens": int(r.get("cache_write") or 0),
            }
            if r.get("cost_usd") is not None:
                attrs["mlflow.llm.cost"] = {"total_cost": float(r["cost_usd"])}
        if r.get("model"):
            attrs["mlflow.llm.model"] = str(r["model"])
        status = r.get("status")
        error = None
        if not isinstance(status, int) or not 200 <= status < 400:
            error = str(r.get("error") or r.get("refused") or f"HTTP {status}")
        elif r.get("cut"):
            error = str(r["cut"])
        name = f"LLM {i}: {r.get('model') or r.get('api') or r.get('path')}"
        out.append(SpanSpec(name[:200], "LLM", _ns(start), _ns(end), inputs, outputs, attrs, error))
    return out


def _events(path: Path) -> list[dict]:
    out = []
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            ev = json.loads(line)
        except ValueError:
            continue  # a torn last line
        if isinstance(ev, dict) and ev.get("kind") in ("tool_call", "tool_result") and "t" in ev:
            out.append(ev)
    return out


def tool_spans(events: list[dict], end: float, redact: transcript.Redactor) -> list[SpanSpec]:
    """One TOOL span per tool call, ended by its result.

    The oldest open call of the same tool and target, else the oldest open call (the CLIs print
    results in the order of their calls). A call without result ends at the next call's start, or at
    the run's end.
    """
    calls: list[dict] = []
    results: dict[int, dict] = {}
    open_calls: list[int] = []
    for e in events:
        if e["kind"] == "tool_call":
            open_calls.append(len(calls))
            calls.append(e)
        elif open_calls:
            key = (e.get("tool"), e.get("target"))
            same = [i for i in open_calls if (calls[i].get("tool"), calls[i].get("target")) == key]
            i = same[0] if same else open_calls[0]
            open_calls.remove(i)
            results[i] = e
    out = []
    for i, c in enumerate(calls):
        res = results.get(i)
        stop = float(res["t"]) if res else float(calls[i + 1]["t"]) if i + 1 < len(calls) else end
        stop = max(stop, float(c["t"]))
        tool, target = str(c.get("tool") or "other"), str(c.get("target") or "")
        inputs = {"tool": tool, "target": _redacted(target, redact)}
        if c.get("text"):
            inputs["text"] = _redacted(c["text"], redact)
        outputs = {"text": _redacted(res.get("text"), redact), "is_error": bool(res.get("is_error"))} if res else {}
        attrs = {schema.SPAN_TOOL: tool, schema.SPAN_TOOL_TARGET: _redacted(target, redact)[:500]}
        error = "the tool reported an error" if res and res.get("is_error") else None
        name = f"{tool}: {redact(target)}"[:120]
        out.append(SpanSpec(name, "TOOL", _ns(c["t"]), _ns(stop), inputs, outputs, attrs, error))
    return out


def build(run_dir: Path, events_file: Path, info: dict) -> TraceSpec | str:
    """The run's trace, or a sentence saying why it has none.

    ``info``: ``started_at``, ``ended_at`` (unix s), ``name``, ``agent``, ``model``, ``task``,
    ``status``, ``reason``, ``totals`` (the run's LLM metrics).
    """
    records = metering.read(metering.log_path(run_dir))
    bodies = transcript.read(Path(run_dir) / "evidence" / transcript.BODIES_NAME)
    redact = transcript.Redactor(transcript.env_secrets())
    start, end = float(info["started_at"]), float(info["ended_at"])
    spans = llm_spans(records, bodies) + tool_spans(_events(events_file), end, redact)
    if not spans:
        return "none: no LLM request went through the gateway and the agent reported no tool call"
    spans.sort(key=lambda s: (s.start_ns, s.end_ns))
    left = len(spans) - MAX_SPANS
    spans = spans[:MAX_SPANS]
    start_ns = min(_ns(start), spans[0].start_ns)  # a request line may start before the recorded launch time
    end_ns = max([_ns(end), *(s.end_ns for s in spans)])
    inputs = {k: info.get(k) for k in ("agent", "model", "task")}
    outputs = {"status": info.get("status"), "reason": str(info.get("reason") or "")[:1000]}
    outputs.update(
        llm_requests=sum(1 for r in records if r.get("api")), tool_calls=sum(s.span_type == "TOOL" for s in spans)
    )
    outputs.update({k: v for k, v in (info.get("totals") or {}).items() if v is not None})
    if left > 0:
        outputs["spans_left_out"] = left
    tags = {schema.KIND: schema.TRACE_KIND, schema.AGENT: str(info.get("agent") or "")}
    tags[schema.TASK] = str(info.get("task") or "")
    return TraceSpec(str(info.get("name") or "agent run")[:200], start_ns, end_ns, inputs, outputs, tags, spans)


def record(writer: MlflowWriter, run_id: str, result: object, run_dir: Path, events_file: Path) -> str:
    """Write the run's trace unless the run has it already, whole.

    ``bench record`` run again; an incomplete one is replaced. Returns the agent run's
    ``bench.trace`` tag. Never raises: the run's record matters more than its trace, so a trace that
    cannot be built or written costs a warning and a ``failed: ...`` tag, nothing else.
    """
    try:
        info = {
            "started_at": result.started_at,
            "ended_at": result.started_at + result.wall_time_s,
            "name": f"conversation: {result.run.label}",
            "agent": result.run.agent,
            "model": result.run.model,
            "task": result.run.task,
            "status": result.status,
            "reason": result.reason,
            "totals": {k: v for k, v in (result.agent_events.get("metrics") or {}).items() if k in TOTALS},
        }
        spec = build(run_dir, events_file, info)
        found = writer.traces_of(run_id)
        if isinstance(spec, str):  # nothing to show (or the run's files are gone): a trace written before stays
            return next(iter(found), spec)
        if whole := [t for t, n in found.items() if n == len(spec.spans) + 1]:
            return whole[0]
        if found:  # an earlier attempt's trace, cut short (the store went away while it was written)
            writer.delete_traces(list(found))
        return writer.log_trace(run_id, spec)
    except Exception as e:  # a broken trace must not lose the record
        msg = f"failed: {type(e).__name__}: {e}"[:500]
        print(f"[bench] the run's MLflow trace was not written ({msg}); the run is recorded without it", flush=True)
        return msg
