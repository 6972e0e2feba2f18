"""From MLflow: the loader, the leaderboard, curves, timelines and ``bench report`` on real and synthetic stores.

``real_store`` is made by real ``bench run``s (baseline x1; command x3, the third crashing) on T6 with
generated data; ``synthetic_store`` is generated through the Recorder (several windows, parallel scripts).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.image import imread

from analysis import curves, figures, leaderboard, render, report, tables
from analysis.runs import AGENT_COLUMNS, agent_runs, load, metric_history
from bench.tracking import schema

ROOT = Path(__file__).resolve().parents[2]
TABLES = ["leaderboard", "table4", "table5", "table6", "table8", "paired"]
FIGURES = ["figure3", "utilisation", "anytime", "timeline", "agg_intervals", "paired"]


# --- the real store ---------------------------------------------------------------------------
@pytest.mark.slow
def test_agent_runs_are_one_tidy_row_per_run(real_store):
    runs = agent_runs(real_store)
    assert list(runs.columns) == AGENT_COLUMNS
    assert len(runs) == 4
    by = runs.set_index(["agent", "repeat"])
    assert list(by.index) == [("baseline", 1), ("command", 1), ("command", 2), ("command", 3)]
    assert list(by["status"]) == ["success", "success", "success", "failed"]
    assert by.loc[("command", 3), "score"] != by.loc[("command", 3), "score"]  # NaN: no score for a failed run
    assert (by["scripts_launched"] == [1, 3, 3, 1]).all()
    assert by["metric"].eq("mse").all() and (~by["higher_is_better"].astype(bool)).all()
    assert (by["budget_min"] == [3, 3, 3, 1]).all() and by["wall_time_s"].gt(0).all()
    assert by["budget_utilisation"].between(0, 1).all()
    assert by[["tokens_input", "tokens_output", "tokens_cached", "cost_usd"]].isna().all().all()  # offline agents
    assert not by["synthetic"].any()


@pytest.mark.slow
def test_fast_path_and_mlflow_api_read_the_same_runs(real_store):
    fast, api = load(real_store, fast=True), load(real_store, fast=False)
    for name in ("agents", "scripts", "evals"):
        pd.testing.assert_frame_equal(getattr(fast, name), getattr(api, name), check_dtype=False)
    ids = fast.scripts["run_id"]
    pd.testing.assert_frame_equal(
        metric_history(ids, schema.CHECKPOINT_SCORE, fast=True),
        metric_history(ids, schema.CHECKPOINT_SCORE, fast=False),
        check_dtype=False,
    )


@pytest.mark.slow
def test_leaderboard_shows_the_failing_run_as_success_below_100_percent(real_store):
    lb = leaderboard.build(load(real_store))
    cell = lb.cell(real_store, "command", "t6")
    assert (cell["n_success"], cell["n_runs"]) == (2, 3)
    assert cell["mean"] == pytest.approx(cell["best"]) or cell["best"] < cell["mean"]  # lower is better
    t4, t5 = render.to_markdown(tables.table4(lb)), render.to_markdown(tables.table5(lb))
    assert "⚠2/3" in t4 and "2/3 – 3 ⚠" in t5 and "1/1 – 1 |" in t5
    assert r"\cellcolor{red!15}" in render.to_latex(tables.table4(lb))
    s = lb.summary.set_index("entry")
    assert s.loc["command", "successes"] == 2 and s.loc["command", "runs"] == 3


@pytest.mark.slow
def test_curves_and_timeline_from_child_runs(real_store):
    runs = load(real_store)
    lb = leaderboard.build(runs)
    c = curves.anytime(runs, lb.tasks)
    ok = set(runs.agents.loc[runs.agents["status"] == "success", "run_id"])
    assert set(c.loc[c["curve"] == "official", "run_id"]) == ok
    assert set(c.loc[c["curve"] == "self-reported", "run_id"]) == ok
    final = c[c["curve"] == "official"].groupby("run_id")["score"].last()
    assert np.allclose(final.sort_index(), runs.agents.set_index("run_id").loc[final.index, "score"].sort_index())
    selfrep = c[c["curve"] == "self-reported"]
    assert (selfrep.groupby("run_id")["score"].apply(lambda s: s.is_monotonic_decreasing)).all()  # best so far, MSE
    tl = curves.timeline(runs)
    assert len(tl) == 8 and set(tl["exit"]) == {"FINISHED", "FAILED"}
    parallel = tl[tl["entry"] == "command"].groupby("parent_run_id")["lanes"].max()
    assert (parallel.loc[list(ok & set(parallel.index))] == 2).all()  # run_1 and run_2 ran side by side
    assert (tl["start_min"] >= 0).all() and (tl["end_min"] >= tl["start_min"]).all()


@pytest.mark.slow
def test_bench_report_writes_every_table_and_figure(real_store, tmp_path):
    out = tmp_path / "report"
    assert report.main(["--experiment", real_store, "--out", str(out)]) == 0
    for name in TABLES:
        for ext in ("md", "tex", "csv"):
            assert (out / f"{name}.{ext}").stat().st_size > 0, f"{name}.{ext}"
    for name in FIGURES:
        for ext in ("png", "pdf"):
            assert (out / f"{name}.{ext}").stat().st_size > 1000, f"{name}.{ext}"
        assert imread(out / f"{name}.png").shape[0] > 200
    index = (out / "index.md").read_text()
    assert all(f"]({name}.png)" in index for name in FIGURES)
    assert "2/3 ⚠" in index and "command" in index and "Not drawn" not in index
    assert "⚠2/3" in (out / "table4.md").read_text()
    assert "command [" in (out / "paired.md").read_text() and "baseline [" in (out / "paired.md").read_text()


@pytest.mark.slow
def test_report_with_published_rows_side_by_side(real_store, tmp_path):
    out = tmp_path / "both"
    assert report.main(["--experiment", real_store, "--out", str(out), "--published"]) == 0
    t4 = (out / "table4.md").read_text()
    assert "**Published: Claude Code**" in t4 and f"**MLflow: {real_store}**" in t4
    assert "(1/7 tasks)" in t4  # the new entries ran one task: their Agg is partial, and not ranked
    lead = pd.read_csv(out / "leaderboard.csv")
    assert lead.loc[lead["source"] == "published", "rank"].notna().all()
    assert lead.loc[lead["source"] == real_store, "rank"].isna().all()


@pytest.mark.slow
def test_notebook_02_compares_agents_from_mlflow(real_store, notebooks, monkeypatch):
    monkeypatch.setenv("BENCH_EXPERIMENT", real_store)
    nb = notebooks.execute(ROOT / "notebooks" / "02_agent_strategies.ipynb")
    text = notebooks.text(nb)
    assert "4 agent runs, 8 script runs" in text and "**Table 4.**" in text and "⚠2/3" in text
    assert notebooks.images(nb) == 5  # scores, child-run curves, anytime, timelines, intervals


# --- the synthetic store (fast) ---------------------------------------------------------------
def test_synthetic_runs_are_marked_and_windows_make_anytime_steps(synthetic_store):
    runs = load(synthetic_store)
    assert len(runs.agents) == 12 and runs.agents["synthetic"].all()
    assert (runs.agents["status"] == "failed").sum() == 2  # every 5th run
    assert runs.agents["tokens_input"].notna().all() and runs.agents["cost_usd"].gt(0).all()
    lb = leaderboard.build(runs)
    c = curves.official_anytime(runs, lb.tasks)
    assert c.groupby("run_id").size().eq(4).all()  # 3 windows + the held end point
    assert "[synthetic]" in render.to_markdown(tables.table4(lb))
    partial = lb.cells.loc[lb.cells["partial_data"].eq(True), ["entry", "task"]]
    assert partial.values.tolist() == [["synthetic-a (synth-model-1)", "t2"]]  # marked, and only where it happened
    (note,) = tables.partial_data_notes(lb)
    assert "PARTIAL data" in note and "not comparable" in note
    tl = curves.timeline(runs)
    assert set(tl["exit"]) >= {"FINISHED", "FAILED"}


def test_every_figure_draws_from_the_synthetic_store(synthetic_store, tmp_path):
    from analysis import stats

    runs = load(synthetic_store)
    lb = leaderboard.build(runs, published=True)
    iv = stats.bootstrap_agg(lb, n_boot=200)
    assert set(iv["method"]) == {"runs", "parametric (mean, std, n)"}
    made = [
        figures.figure3(lb),
        figures.utilisation_figure(lb),
        figures.anytime_figure(lb, curves.anytime(runs, lb.tasks)),
        figures.timeline_figure(lb, curves.timeline(runs)),
        figures.intervals_figure(iv),
        figures.paired_figure(stats.compare(lb, f"{synthetic_store}:synthetic-a (synth-model-1)", "Opus 4.7")),
    ]
    for k, fig in enumerate(made):
        fig.savefig(tmp_path / f"{k}.png")
        assert (tmp_path / f"{k}.png").stat().st_size > 5000


def test_cli_plugs_into_bench_and_reports_errors(tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="bench")
    report.add_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["report", "--experiment", "a", "--experiment", "b", "--published", "--out", "x"])
    assert args.func is report.cmd_report and args.experiment == ["a", "b"] and args.published and args.out == "x"
    assert parser.parse_args(["report"]).out == "report" and parser.parse_args(["report"]).experiment is None
    assert report.main(["--experiment", "no-such-campaign", "--out", str(tmp_path / "r")]) == 1
    assert "no agent runs" in capsys.readouterr().err
    assert report.main(["--experiment", "no-such-campaign", "--published", "--out", str(tmp_path / "p")]) == 0
    assert (tmp_path / "p" / "figure3.png").exists() and "Not drawn" in (tmp_path / "p" / "index.md").read_text()
    bad = ["--experiment", "no-such-campaign", "--published", "--compare", "Opus 4.7", "Nobody", "--out", str(tmp_path)]
    assert report.main(bad) == 1 and "unknown entry 'Nobody'" in capsys.readouterr().err


def test_a_task_without_baseline_is_shown_but_not_in_agg():
    rows = [{"run_id": f"r{i}{t}", "experiment": "x", "agent": "a", "model": "", "task": t, "repeat": i,
             "status": "success", "score": 0.5 + 0.01 * i, "higher_is_better": True, "budget_min": 10.0,
             "wall_time_s": 300.0, "budget_utilisation": 0.5, "scripts_launched": 2.0, "synthetic": False,
             "metric": "f1", "tokens_input": np.nan, "tokens_output": np.nan, "tokens_cached": np.nan,
             "cost_usd": np.nan} for i in range(3) for t in ("t6", "t99")]  # fmt: skip
    lb = leaderboard.build(pd.DataFrame(rows), calibration=False)
    assert np.isnan(lb.tasks.loc["t99", "baseline"]) and lb.tasks.loc["t99", "metric"] == "f1"
    s = lb.summary.set_index("entry").loc["a"]
    assert (s["agg_tasks"], s["of_tasks"], s["rank"]) == (1, 1, 1)
    assert "Task 99 ↑ f1" in render.to_markdown(tables.table4(lb))
