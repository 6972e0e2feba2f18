"""Reports mark a run whose API budget (``--max-cost``) ran out: a note under the leaderboard and on the report's
front page, from the run's ``bench.api_budget`` tag as the record step writes it (bench.gateway.metering.budget_tag).

Three agent runs on T6 written through the harness's MlflowWriter: alpha r1 with a budget of $0.5 that the gateway's
log shows spent 12 min 30 s (750 s) after the launch, $0.6 used; alpha r2 with a budget not reached; beta without
one. Only alpha r1 gets a note: "at 12.5 min" (750 / 60), "$0.6000 used".
"""

from __future__ import annotations

import uuid

import pytest

from analysis import leaderboard, notes
from analysis.runs import load
from bench.gateway import metering
from bench.tracking import schema
from bench.tracking.writer import MlflowWriter

START = 1_790_000_000.0


def _gateway(cap: float | None, hit: bool) -> dict:
    """agent_events as metering.merge leaves them: the gateway's summary of llm.jsonl."""
    t = START + 100
    records = [{"t": t, "api": "chat", "model": "gpt-5.5", "status": 200, "input": 10, "output": 5, "cost_usd": 0.6}]
    if hit:
        records.append({"t": START + 750, "api": "chat", "model": "gpt-5.5", "status": 429, "refused": "budget"})
    return {"gateway": metering.summary(records, cap)}


def _agent_run(w: MlflowWriter, agent: str, repeat: int, events: dict) -> None:
    tags = schema.agent_run_tags(w.campaign, agent, "", "t6", repeat, f"/runs/t6-{agent}-r{repeat}")
    run = w.create_run(f"t6-{agent}-r{repeat}", tags)
    w.log_params(run, {schema.PARAM_METRIC: "mse", schema.PARAM_DIRECTION: "min"})
    w.log_metrics(run, [(schema.SUCCESS, 1.0, 0, None), (schema.SCORE, 0.3, 0, None)])
    w.set_tags(run, {schema.STATUS: "success", schema.API_BUDGET: metering.budget_tag(events, START)})
    w.end_run(run)


@pytest.fixture
def budget_store() -> str:
    name = f"budget-{uuid.uuid4().hex[:6]}"
    w = MlflowWriter(name)
    _agent_run(w, "alpha", 1, _gateway(0.5, hit=True))
    _agent_run(w, "alpha", 2, _gateway(5.0, hit=False))
    _agent_run(w, "beta", 1, {})
    return name


NOTE = "alpha on T6 r1: API budget of $0.5 reached at 12.5 min ($0.6000 used); its later LLM requests were refused."


def test_the_tag_says_when_the_budget_ran_out():
    assert metering.budget_tag(_gateway(0.5, hit=True), START) == (
        "$0.5: spent at 12.5 min: later requests refused ($0.6000 used)"
    )
    assert metering.budget_tag(_gateway(5.0, hit=False), START) == "$5.0: not reached ($0.6000 used)"
    assert metering.budget_tag({}, START) == ""


def test_a_run_that_hit_its_api_budget_gets_a_note(budget_store):
    runs = load(budget_store)
    assert notes.api_budget_notes(runs.agents) == [NOTE]
    lb = leaderboard.build(runs)
    assert NOTE in notes.table_notes(lb)  # under every leaderboard table


def test_the_report_shows_the_note(budget_store, tmp_path):
    from analysis import report_cli

    out = tmp_path / "report"
    assert report_cli.main(["--experiment", budget_store, "--out", str(out)]) == 0
    text = "\n".join(p.read_text() for p in out.glob("*.md"))
    assert NOTE in text, text[:2000]
    assert "beta on T6" not in text.split(NOTE)[0][-200:]  # the runs without a spent budget: no note


def test_runs_without_the_tag_get_no_note():
    import pandas as pd

    assert notes.api_budget_notes(None) == [] and notes.api_budget_notes(pd.DataFrame()) == []
    old = pd.DataFrame({"agent": ["a"], "model": [""], "task": ["t6"], "repeat": [1], "api_budget": [""]})
    assert notes.api_budget_notes(old) == []
