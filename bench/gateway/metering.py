"""A run's metering.

Which gateway its CLI gets (at the launch), and what the gateway's log says (at the record).

At the launch, :func:`plan` decides whether the agent's LLM requests go through a metering gateway
(:mod:`bench.gateway.proxy`): a sandboxed CLI agent whose adapter names the base-URL variable it can
be pointed with (``Agent.gateway_var``) and whose run reaches one API (where that variable is not
set here and the API's URL has no path, the vendor's own, the upstream gets the adapter's
``Agent.gateway_path``: the path its client's base URL has, ``/v1``). ``BENCH_GATEWAY=0`` turns it
off (the CLI then reaches its API through the sandbox's proxy, as before). Two settings of the
harness's environment serve tests and split-horizon set-ups:
``BENCH_GATEWAY_RESOLVE=host=address[,...]`` dials an address instead of asking DNS (the certificate
is still checked against the host), ``BENCH_GATEWAY_CA=file`` trusts a CA beside the system's.

At the record, :func:`summary` reads ``llm.jsonl`` into the run's totals (tokens, cost, requests,
errors, requests cut mid-answer, the budget's refusals) and :func:`series` into time series for the
agent run (cumulative values, one point per request, step = whole seconds since the launch).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from bench import settings
from bench.agents import credentials
from bench.agents.base import Agent, LaunchContext
from bench.gateway import refusals, routes
from bench.gateway.proxy import INSIDE_PORT, Gateway
from bench.gateway.request_log import LOG_NAME
from bench.tracking import schema

CHARGED_MAX_TOKENS = "gateway+max_tokens"  # cost_source where some answers were charged their max_tokens
OPENCODE_VAR = "OPENCODE_PROVIDER_BASE_URL"  # opencode's built-in providers: the family comes from the vendor's host


@dataclass
class Metering:
    """The gateway of one launch and what the launch needs from it."""

    gateway: Gateway
    ctx: LaunchContext  # with ``base_urls`` pointing at the gateway inside the sandbox
    services: dict  # inside port -> handler, for the sandbox's network


def plan(
    agent: Agent, ctx: LaunchContext, endpoints: tuple[str, ...], log: Path, max_cost: float | None = None
) -> Metering | None:
    """The gateway for this launch.

    None when the agent's requests cannot (or must not) go through one.
    """
    if not settings.GATEWAY.get() or len(endpoints) != 1:
        return None
    var = agent.gateway_var(ctx)
    if not var:
        return None
    upstream = endpoints[0]
    if not os.environ.get(var) and not urlsplit(upstream).path.strip("/"):
        upstream = upstream.rstrip("/") + agent.gateway_path(ctx)
    resolve = settings.GATEWAY_RESOLVE.get()
    gw = Gateway(
        upstream,
        log,
        max_cost=max_cost,
        resolve=resolve,
        cafile=settings.GATEWAY_CA.get(),
        model=ctx.model,
        family=routes.family_of(upstream, None if var == OPENCODE_VAR else var),
    )
    gw.access = credentials.fingerprint(agent.name, ctx.model)  # on a refusal's line: did the key change since?
    return Metering(gw, replace(ctx, base_urls={var: gw.inside_url(INSIDE_PORT)}), {INSIDE_PORT: gw.handle})


def read(log: Path) -> list[dict]:
    """The gateway's lines (a torn last line, as a killed harness leaves it, is skipped)."""
    out = []
    try:
        text = Path(log).read_text(errors="replace")
    except OSError:
        return []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and "t" in rec and "truncated" not in rec:
            out.append(rec)
    return out


def log_path(run_dir: Path) -> Path:
    """Where the gateway writes a run's line per LLM request (under the run's evidence)."""
    return Path(run_dir) / "evidence" / LOG_NAME


def _error(rec: dict) -> bool:
    return not isinstance(rec.get("status"), int) or not 200 <= rec["status"] < 400


def summary(records: list[dict], max_cost: float | None = None) -> dict:
    """The run's totals from the gateway's lines.

    ``metrics`` (schema names) and what result.json keeps.
    """
    model_calls = [r for r in records if r.get("api")]
    priced = [r for r in model_calls if "refused" not in r and r.get("status") != 0]
    unpriced = sorted({str(r.get("model")) for r in priced if r.get("cost_usd") is None and _tokens(r)})
    cost = sum(r.get("cost_usd") or 0.0 for r in priced)
    metrics = {
        schema.TOKENS_INPUT: float(sum(int(r.get("input") or 0) for r in priced)),
        schema.TOKENS_OUTPUT: float(sum(int(r.get("output") or 0) for r in priced)),
        schema.TOKENS_CACHED: float(sum(int(r.get("cached") or 0) for r in priced)),
        schema.COST_USD: None if unpriced else round(cost, 6),
        schema.LLM_REQUESTS: float(len(model_calls)),  # not the CLI's other calls (a ChatGPT login's account checks)
        schema.LLM_ERRORS: float(sum(_error(r) for r in model_calls)),
    }
    refused = [r for r in records if r.get("refused") == "budget"]
    return {
        "metrics": metrics,
        "requests": len(records),
        "model_requests": len(model_calls),
        "cut": sum(1 for r in records if r.get("cut")),
        "incomplete": sum(1 for r in priced if r.get("complete") is False),
        # answers left without their final usage, charged their max_tokens at the output rate
        # (gateway's module doc)
        "charged_max_tokens": sum(1 for r in priced if r.get("cost_basis") == "max_tokens"),
        "unpriced_models": unpriced,
        "max_cost_usd": max_cost,
        "cap_hit": bool(refused),
        "cap_hit_at": refused[0]["t"] if refused else None,
        # requests the gateway answered itself, by why: budget, token (none of the run's),
        # misplaced (the run's token outside its credential header: an agent probing), target (not
        # a plain path), route (not an endpoint the CLI needs), unpriced (a model without a price
        # under a budget)
        "refused": dict(sorted(Counter(str(r["refused"]) for r in records if r.get("refused")).items())),
    }


def _tokens(r: dict) -> int:
    return int(r.get("input") or 0) + int(r.get("output") or 0)


def series(records: list[dict], started_at: float, cost: bool = True) -> list[tuple[str, float, int, float]]:
    """The agent run's charts of tokens, cost, requests and errors over the run.

    (metric, cumulative value, step = whole seconds since the launch, unix time) per request, in the
    order the requests ended; no cost when ``cost`` is False (a model without a price).
    """
    out: list[tuple[str, float, int, float]] = []
    tin = tout = tcached = requests = errors = 0
    spent = 0.0
    for r in sorted(records, key=lambda r: r["t"] + float(r.get("latency_s") or 0)):
        end = r["t"] + float(r.get("latency_s") or 0)
        step = max(0, int(end - started_at))
        if not r.get("api"):
            continue  # not a model request (a model list, an account check): in the log, not in the series
        requests += 1
        errors += _error(r)
        points = [(schema.LLM_REQUESTS, requests), (schema.LLM_ERRORS, errors)]
        if "refused" not in r and r.get("status") != 0:
            tin += int(r.get("input") or 0)
            tout += int(r.get("output") or 0)
            tcached += int(r.get("cached") or 0)
            spent += r.get("cost_usd") or 0.0
            points += [(schema.TOKENS_INPUT, tin), (schema.TOKENS_OUTPUT, tout), (schema.TOKENS_CACHED, tcached)]
            points += [(schema.COST_USD, round(spent, 6))] if cost else []
        out += [(k, float(v), step, end) for k, v in points]
    return out


def merge(agent_events: dict, log: Path, max_cost: float | None = None) -> dict:
    """The run's agent_events with the gateway's figures.

    Its totals replace the CLI's tokens and cost (which stay under ``cli_metrics`` for comparison),
    ``gateway`` holds the summary, ``cost_source`` says where ``cost_usd`` came from: ``gateway``
    (its tokens, read from the API's own answers, x the price table), ``gateway+max_tokens`` (the
    same, where some answers left early never said their usage and were charged their ``max_tokens``
    at the output rate: an upper bound for those) or ``unknown``.

    The CLI's own cost is never the run's: the agent writes the CLI's output (it can print a
    ``result`` event with ``total_cost_usd: -100``), so a figure from it is the agent's word. It
    stays under ``cli_metrics``; where the gateway cannot price a request (a model not in the table,
    run without a budget) or there is no gateway (an unsandboxed run, ``BENCH_GATEWAY=0``),
    ``cost_usd`` is unknown (None), never the CLI's figure, never negative.
    """
    events = dict(agent_events)
    cli = dict(events.get("metrics") or {})
    records = read(log)
    if not records:
        events["metrics"] = {**cli, schema.COST_USD: None}
        events["cli_metrics"] = cli
        events["cost_source"] = "unknown"
        if max_cost is not None:
            events["gateway"] = {"max_cost_usd": max_cost, "cap_hit": False, "requests": 0}
        return events
    s = summary(records, max_cost)
    metrics = {**cli, **s["metrics"]}
    cost = s["metrics"][schema.COST_USD]
    source = "gateway" if cost is not None and cost >= 0 else "unknown"
    if source == "gateway" and s["charged_max_tokens"]:
        source = CHARGED_MAX_TOKENS  # some answers' usage never came: charged at their max_tokens
    if source == "unknown":
        metrics[schema.COST_USD] = None
    events.update(metrics=metrics, cli_metrics=cli, gateway=s, cost_source=source)
    if failure := refused(records):  # the gateway's word replaces what the CLI's stream said (bench.agents.health)
        events["api_failure"] = failure
    return events


def refused(records: list[dict]) -> dict | None:
    """The run's infrastructure failure when the gateway stopped it on an answer that cannot heal.

    See :mod:`bench.gateway.refusals`. For ``result.json``'s ``agent_events.api_failure``
    (:mod:`bench.outcome`); None otherwise. ``heals: false`` and ``access`` (the
    credential's fingerprint) tell a campaign not to run the cell again until the credential
    changes (:mod:`bench.campaign.job`).
    """
    first = next((r for r in records if isinstance(r.get("refusal"), dict) and r["refusal"].get("stops")), None)
    if first is None:
        return None
    refusal = first["refusal"]
    kind, status, error = str(refusal.get("kind")), refusal.get("status"), str(refusal.get("error") or "")[:200]
    what = refusals.WHAT.get(kind, "refused the run")
    request = f"{first.get('method')} {str(first.get('path') or '').split('?', 1)[0][:100]}"
    return {
        "kind": kind,
        "status": status,
        "error": error,
        "why": f"the model API {what}: {status} {error} ({request}); it cannot heal: the run was stopped at once",
        "errors": sum(1 for r in records if isinstance(r.get("refusal"), dict)),
        "ended_early": True,
        "heals": False,
        "at": first.get("t"),
        "access": refusal.get("access"),
    }


def cap_hit(agent_events: dict) -> dict | None:
    """The ``limits.hit`` entry of result.json when the run's API budget refused a request.

    None otherwise.
    """
    gw = agent_events.get("gateway") or {}
    if not gw.get("cap_hit"):
        return None
    spent = (gw.get("metrics") or {}).get(schema.COST_USD)
    return {
        "limit": "api-cost",
        "at": gw.get("cap_hit_at"),
        "detail": f"the API budget (--max-cost {gw.get('max_cost_usd')}) was spent (${spent} used): later LLM "
        "requests were refused",
    }


def budget_tag(agent_events: dict, started_at: float | None = None) -> str:
    """The agent run's bench.api_budget tag.

    '' without a budget; ``$CAP: spent at M min: later requests refused ($USED used)`` (M: minutes
    from ``started_at``, the launch, to the first refused request), or
    ``$CAP: not reached ($USED used)``. The reports read it (analysis.notes.api_budget_notes).
    """
    gw = agent_events.get("gateway") or {}
    if gw.get("max_cost_usd") is None:
        return ""
    spent = (gw.get("metrics") or {}).get(schema.COST_USD)
    used = "unknown" if spent is None else f"${spent:.4f}"
    state = "not reached"
    if gw.get("cap_hit"):
        at = gw.get("cap_hit_at")
        when = f" at {max(0.0, at - started_at) / 60:.1f} min" if started_at is not None and at is not None else ""
        state = f"spent{when}: later requests refused"
    return f"${gw['max_cost_usd']}: {state} ({used} used)"
