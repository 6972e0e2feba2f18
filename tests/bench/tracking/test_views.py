"""The MLflow UI's saved views (bench/tracking/views.py) and the links `bench ui` prints.

The URL and the tag format are MLflow 3.17's (read from its UI bundle); tests/bench/test_ui_browser.py checks that
a real UI applies them. Here: the strings, by hand, and which experiments get links.
"""

from __future__ import annotations

import argparse
import json
import uuid

import pytest

from bench.tracking import schema, store, ui, views
from bench.tracking.writer import MlflowWriter


def test_links_open_the_runs_tab_with_the_view_named_in_model_training_mode():
    assert (
        views.url("http://127.0.0.1:5000/", "7", views.COMPARE_VIEW)
        == "http://127.0.0.1:5000/#/experiments/7/runs?benchView=bench-compare&workflowType=machine_learning"
    )
    assert (
        views.url("http://h:1", "12", views.RUNS_VIEW, mode="CHART")
        == "http://h:1/#/experiments/12/runs?benchView=bench-runs&compareRunsMode=CHART"
        "&workflowType=machine_learning"
    )
    assert views.url("http://h:1", "12", None) == "http://h:1/#/experiments/12/runs?workflowType=machine_learning"


def test_no_view_averages_a_raw_score_over_tasks():
    """A grouped view groups by task first (an average inside one task is meaningful): by the one tag whose value
    starts with the task; the overall comparison shows the summary runs' Agg (Eq. 1 over tasks), never a group row
    over all of an agent's runs."""
    by_id = {v.id: v for v in views.all_views()}
    assert list(by_id) == [views.RUNS_VIEW, views.TASKS_VIEW, views.COMPARE_VIEW]
    for view in by_id.values():
        group = view.state["groupBy"]
        if group is not None:
            assert group["groupByKeys"] == [{"mode": "tag", "groupByData": "bench.group"}]
    tasks = by_id[views.TASKS_VIEW].state
    assert schema.group_label("t6", "claude-code (claude-opus-4-7)") == "t6 · claude-code (claude-opus-4-7)"
    assert tasks["orderByKey"] == "tags.`bench.group`" and tasks["orderByAsc"] is True
    assert tasks["searchFilter"] == "tags.`bench.kind` = 'agent'"
    compare = by_id[views.COMPARE_VIEW].state
    assert compare["groupBy"] is None and compare["searchFilter"] == "tags.`bench.kind` = 'summary'"
    names = ["tags.`bench.entry`", "tags.`bench.agent`", "tags.`bench.model`"]  # who first, then Agg, Agg-max, ...
    assert compare["selectedColumns"][:6] == [*names, "metrics.`agg`", "metrics.`agg_max`", "metrics.`success_rate`"]
    assert compare["orderByKey"] == "metrics.`agg`" and compare["orderByAsc"] is False
    assert "metrics.`score`" not in compare["selectedColumns"]


def test_the_envelope_is_the_one_the_ui_writes():
    view = views.all_views()[1]  # per task
    envelope = json.loads(view.envelope(1_795_000_000_000))
    assert set(envelope) == {"name", "createdAt", "updatedAt", "state"}
    assert envelope["createdAt"] == envelope["updatedAt"] == 1_795_000_000_000
    assert isinstance(envelope["state"], str) and json.loads(envelope["state"]) == view.state
    assert len(view.envelope(0)) < 20_000  # the UI refuses to save a larger view; MLflow's tag limit is 20,000
    assert view.state["columnOrder"] == [views.RUN_NAME, *view.state["selectedColumns"]]
    assert set(view.state["columnWidths"]) == set(view.state["columnOrder"])
    assert view.state["selectedColumns"][:3] == [  # its group rows show means: the metrics first
        "metrics.`score`",
        "metrics.`rel_improvement`",
        "metrics.`budget_utilisation`",
    ]
    # the runs view: how each run ended and why before any metric (a campaign of failed runs has no score column)
    assert views.all_views()[0].state["selectedColumns"][:7] == [
        "tags.`bench.status`",
        "tags.`bench.reason`",
        "tags.`bench.entry`",
        "tags.`bench.task`",
        "metrics.`score`",
        "metrics.`rel_improvement`",
        "metrics.`budget_utilisation`",
    ]
    # the charts open on score, rel_improvement and budget_utilisation, in a section the UI appends the rest to
    cards, sections = view.state["compareRunCharts"], view.state["compareRunSections"]
    assert [c["metricKey"] for c in cards] == ["score", "rel_improvement", "budget_utilisation"]
    assert {c["metricSectionId"] for c in cards} == {sections[0]["uuid"]} and sections[0]["isReordered"] is True
    assert sections[0]["name"] == "Model metrics" and all(c["type"] == "BAR" and not c["deleted"] for c in cards)
    assert "compareRunCharts" not in views.all_views()[2].state  # the comparison's charts: the UI's own


def test_bench_ui_links_campaigns_with_agent_runs_and_refuses_unknown_ones(capsys):
    from bench import cli

    with_runs, without = f"ui-{uuid.uuid4().hex[:6]}", f"ui-empty-{uuid.uuid4().hex[:6]}"
    w = MlflowWriter(with_runs)
    old = {schema.KIND: schema.KIND_AGENT, schema.TASK: "t6", schema.AGENT: "baseline"}  # recorded before bench.group
    w.end_run(run := w.create_run("t6-baseline-r1", old))
    MlflowWriter(without).experiment_id  # noqa: B018 (creates the experiment, with no run)
    names = [name for name, _ in views.experiments()]
    assert with_runs in names and without not in names
    assert views.experiments([without]) == [(without, MlflowWriter(without).experiment_id)]
    with pytest.raises(LookupError, match="no experiment 'nope"):
        views.experiments(["nope-" + with_runs])

    exp_id = w.experiment_id
    ui.print_links("http://127.0.0.1:5099", [(with_runs, exp_id)])
    out = capsys.readouterr().out.splitlines()
    link = f"http://127.0.0.1:5099/#/experiments/{exp_id}/runs?benchView"
    assert out == [
        f"  {with_runs}: runs             {link}=bench-runs&workflowType=machine_learning",
        f"  {with_runs}: per task         {link}=bench-tasks&workflowType=machine_learning",
        f"  {with_runs}: compare agents   {link}=bench-compare&workflowType=machine_learning",
    ]
    tags = store.client().get_experiment(exp_id).tags
    assert {schema.SHARED_VIEW_PREFIX + v for v in (views.RUNS_VIEW, views.TASKS_VIEW, views.COMPARE_VIEW)} <= set(tags)
    assert store.client().get_run(run).data.tags[schema.GROUP] == "t6 · baseline"  # the per-task view's groups
    campaigns = views.campaign_ids(store.tracking_uri())  # what the bench-ui app seeds: the views' holders
    assert exp_id in campaigns and MlflowWriter(without).experiment_id not in campaigns

    args = argparse.Namespace(host="127.0.0.1", port=5099, experiment=["nope-" + with_runs])
    with pytest.raises(cli.InputError, match="^ui --experiment: no experiment") as e:
        cli.cmd_ui(args)  # refused before any server starts
    assert "experiments with agent runs: " in str(e.value) and with_runs in str(e.value)  # what could be meant


def test_the_links_of_campaigns_with_names_of_different_lengths_start_in_one_column(monkeypatch, capsys):
    from bench.tracking import ui, writer

    monkeypatch.setattr(writer, "MlflowWriter", lambda name: name)  # nothing is saved: only what is printed
    monkeypatch.setattr(views, "save", lambda w: None)
    monkeypatch.setattr(views, "backfill_groups", lambda w, eid: None)
    ui.print_links("http://127.0.0.1:5000", [("tworuns", "1"), ("two-agents-long", "2")])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 * len(views.all_views())
    assert len({line.index("http://") for line in lines}) == 1, lines  # every link in the same column
    assert lines[0].startswith("  tworuns:         ") and lines[-1].startswith("  two-agents-long: ")
