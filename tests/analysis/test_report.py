"""From MLflow: the loader, the leaderboard, curves, timelines and ``bench report`` on real and synthetic stores.

``real_store`` is made by real ``bench run``s (baseline x1; command x3, the third crashing) on T6 with
generated data; ``synthetic_store`` is generated through the MlflowWriter (several windows, parallel scripts).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.image import imread

from analysis import curves, figures, leaderboard, render, report_cli, tables
from analysis.runs import AGENT_COLUMNS, RunSet, agent_runs, load, metric_history
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
    # § on every cell: the runs had 3 (1) of T6's 40 minutes, on a CPU (outside the paper's protocol)
    assert "⚠2/3 §" in t4 and "2/3 – 3 ⚠§" in t5 and "1/1 – 1 § |" in t5
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
    assert report_cli.main(["--experiment", real_store, "--out", str(out)]) == 0
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
    # the runs had 3 (1) of T6's 40 minutes on a CPU: outside the paper's protocol, shown only when asked, marked §
    assert report_cli.main(["--experiment", real_store, "--out", str(out), "--published", "--include-nonstandard"]) == 0
    t4 = (out / "table4.md").read_text()
    assert "**Published: Claude Code**" in t4 and f"**MLflow: {real_store}**" in t4
    assert "| command § |" in t4 and "(budget, hardware)" in t4
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
    assert notebooks.images(nb) == 6  # scores, strategies per task, child-run curves, anytime, timelines, intervals


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
    unsandboxed = lb.cells.loc[lb.cells["unsandboxed"].eq(True), ["entry", "task"]]
    assert unsandboxed.values.tolist() == [["synthetic-b (synth-model-2)", "t1"]]
    (note,) = tables.unsandboxed_notes(lb)
    assert "WITHOUT the sandbox" in note and note.startswith("synthetic-b (synth-model-2)")
    tl = curves.timeline(runs)
    assert set(tl["exit"]) >= {"FINISHED", "FAILED"}


def test_every_figure_draws_from_the_synthetic_store(synthetic_store):
    """Each figure draws what the store holds, counted from how conftest generated it (not from the figure code).

    synthetic.generate(agents=2, tasks=2, repeats=3, scripts=4, evals=3, fail_every=5): agents a and b on
    t1 (val_bpb, lower) and t2 (top1_acc, higher), 3 repeats each; run n (0-based, a before b, t1 before t2)
    fails when n % 5 == 4, so a/t2/r2 and b/t2/r1 failed and every t1 run succeeded; agent a launches 4
    scripts per run, b 3 (every script of a failed run fails); the published rows are the paper's 7 agents,
    of which only GPT 5.5 has budget utilisation (Table 8).
    """
    from matplotlib.collections import LineCollection, PathCollection, PolyCollection
    from matplotlib.colors import to_hex

    from analysis import stats

    runs = load(synthetic_store)
    lb = leaderboard.build(runs, published=True, include_nonstandard=True)  # a/t2 partial, b/t1 unsandboxed: kept
    iv = stats.bootstrap_agg(lb, n_boot=200)
    assert set(iv["method"]) == {"runs", "parametric (mean, std, n)"}

    # Figure 3: one point per entry (7 published + 2), x = mean scripts per task (a: 4, b: 3; GPT 5.5: 48/7)
    ax = figures.figure3(lb).axes[0]
    xs = sorted(float(c.get_offsets()[0][0]) for c in ax.collections)
    assert len(xs) == 9 and xs[:2] == [3.0, 4.0] and 48 / 7 in [pytest.approx(x) for x in xs]
    assert len(ax.lines) == 1  # the fitted line (7 entries have all tasks)

    # utilisation: a finite bar per entry x task it ran (GPT 5.5: 7, a: 2, b: 2), dots where > 1 run (2 x 2, 3 each)
    ax = figures.utilisation_figure(lb).axes[0]
    assert sum(np.isfinite(p.get_height()) for p in ax.patches) == 11
    assert [len(c.get_offsets()) for c in ax.collections] == [3, 3, 3, 3]

    # anytime: a panel per task with runs; one official and one self-reported line per successful run
    # (t1: 6, t2: 4), a dot per evaluated window (3 per run), and the direction in the axis label; the official
    # score and the scripts' own validation score are two measurements: each on its own axis (issue 41)
    axes = figures.anytime_figure(lb, curves.anytime(runs, lb.tasks)).axes
    panels, right = axes[0::2], axes[1::2]  # each panel, then its twin
    assert [a.get_ylabel() for a in panels] == ["↓ official bpb (solid)", "↑ official Acc (solid)"]
    assert [a.get_ylabel() for a in right] == [
        "↓ self-reported validation (dotted)",
        "↑ self-reported validation (dotted)",
    ]
    for a, v, n_ok in zip(panels, right, (6, 4), strict=True):
        lines = [len(c.get_segments()) for c in a.collections if isinstance(c, LineCollection)]
        dots = [len(c.get_offsets()) for c in a.collections if isinstance(c, PathCollection)]
        assert lines == [n_ok] and dots == [3 * n_ok]
        assert [len(c.get_segments()) for c in v.collections if isinstance(c, LineCollection)] == [n_ok]

    # timeline: a bar per script (each task: 3 x 4 + 3 x 3 = 21), an end tick per run (6), red = failed
    # (t1: none; t2: the 4 + 3 scripts of the two failed runs)
    for a, n_failed in zip(figures.timeline_figure(lb, curves.timeline(runs)).axes, (0, 7), strict=True):
        (bars,) = [c for c in a.collections if isinstance(c, PolyCollection)]
        (ends,) = [c for c in a.collections if isinstance(c, LineCollection)]
        assert len(bars.get_paths()) == 21 and len(ends.get_segments()) == 6
        assert sum(to_hex(c) == figures.EXIT_COLORS["FAILED"] for c in bars.get_facecolors()) == n_failed

    # intervals: one interval per entry, the new ones labelled with the 2 of 7 tasks their Agg covers
    ax = figures.intervals_figure(iv).axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert len(ax.containers) == 9 and len(labels) == 9
    assert f"synthetic-a (synth-model-1) [{synthetic_store}] § (2/7 tasks)" in labels  # § : t2 on partial data

    # paired: one bar per common task (t1, t2) and the Agg difference with its interval
    ax = figures.paired_figure(stats.compare(lb, f"{synthetic_store}:synthetic-a (synth-model-1)", "Opus 4.7")).axes[0]
    assert len(ax.patches) == 2 and [t.get_text() for t in ax.get_xticklabels()] == ["T1", "T2", "Agg"]


def test_cli_plugs_into_bench_and_reports_errors(tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="bench")
    report_cli.add_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["report", "--experiment", "a", "--experiment", "b", "--published", "--out", "x"])
    assert args.func is report_cli.cmd_report and args.experiment == ["a", "b"] and args.published and args.out == "x"
    assert parser.parse_args(["report"]).out == "report" and parser.parse_args(["report"]).experiment is None
    assert report_cli.main(["--experiment", "no-such-campaign", "--out", str(tmp_path / "r")]) == 2  # bad input
    assert "no experiment 'no-such-campaign' in " in capsys.readouterr().err  # it does not exist: said so
    assert report_cli.main(["--experiment", "no-such-campaign", "--published", "--out", str(tmp_path / "p")]) == 0
    assert (tmp_path / "p" / "figure3.png").exists() and "Not drawn" in (tmp_path / "p" / "index.md").read_text()
    on_disk = sum(1 for f in (tmp_path / "p").rglob("*") if f.is_file())  # what it says it wrote: every file there
    assert f"report: {on_disk} files in {(tmp_path / 'p').resolve()}" in capsys.readouterr().out
    bad = ["--experiment", "no-such-campaign", "--published", "--compare", "Opus 4.7", "Nobody", "--out", str(tmp_path)]
    assert report_cli.main(bad) == 2 and "unknown entry 'Nobody'" in capsys.readouterr().err


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


def _agent_rows(task: str, scores: list[float], higher: bool) -> list[dict]:
    """Hand-made agent runs of agent ``a`` on one task (NaN score: a failed run)."""
    return [{"run_id": f"{task}-{i}", "experiment": "x", "agent": "a", "model": "", "task": task, "repeat": i + 1,
             "status": "failed" if np.isnan(s) else "success", "score": s, "higher_is_better": higher,
             "budget_min": 40.0, "wall_time_s": 600.0, "budget_utilisation": 0.25, "scripts_launched": 1.0,
             "synthetic": False, "metric": "m", "tokens_input": np.nan, "tokens_output": np.nan,
             "tokens_cached": np.nan, "cost_usd": np.nan, "start_time": 0.0} for i, s in enumerate(scores)]  # fmt: skip


def test_short_table_takes_the_best_run_in_the_task_direction():
    """``bench demo``'s table: on t6 (MSE, lower is better) the best of 0.40 and 0.38 is 0.38; on t7 (accuracy) 0.82."""
    runs = pd.DataFrame(_agent_rows("t6", [0.40, 0.38, np.nan], False) + _agent_rows("t7", [0.80, 0.82], True))
    table = leaderboard.short_table(runs, {"t6": 0.384}).set_index("task")
    assert list(table.columns) == ["agent", "mean", "std", "success", "best", "baseline"]
    assert table.loc["t6", "best"] == pytest.approx(0.38) and table.loc["t7", "best"] == pytest.approx(0.82)
    assert table.loc["t6", "mean"] == pytest.approx(0.39) and table.loc["t6", "std"] == pytest.approx(0.01 * 2**0.5)
    assert list(table["success"]) == ["2/3", "2/2"] and list(table["agent"]) == ["a", "a"]
    assert table.loc["t6", "baseline"] == 0.384 and np.isnan(table.loc["t7", "baseline"])
    assert leaderboard.short_table(runs.iloc[:0]).empty


def test_a_success_without_a_score_is_not_counted_as_one():
    """n/N counts the runs that succeeded with an official score: of a scored success (0.40), a success whose
    score is missing (a record cut short) and a failed run, 1 of 3 succeeded, and the mean is 0.40."""
    rows = _agent_rows("t6", [0.40, 0.41, np.nan], False)
    rows[1]["score"] = np.nan  # status success, no score
    cell = leaderboard.cells(pd.DataFrame(rows)).iloc[0]
    assert (cell["n_success"], cell["n_runs"]) == (1, 3) and cell["mean"] == pytest.approx(0.40)


def test_an_entry_with_a_single_run_on_a_task_gets_no_interval():
    """One successful run says nothing about the spread: no 95 % interval (not a zero-width one) in the table and
    the figure, while an entry with two runs per task gets one around its Agg."""
    from analysis import stats

    one = pd.DataFrame(_agent_rows("t6", [0.38], False))
    two = pd.DataFrame(_agent_rows("t6", [0.38, 0.36], False)).assign(agent="b", run_id=lambda d: "b" + d["run_id"])
    lb = leaderboard.build(pd.concat([one, two], ignore_index=True), calibration=False)
    iv = stats.bootstrap_agg(lb, n_boot=200).set_index("entry")
    assert np.isnan(iv.loc["a", "lo"]) and np.isnan(iv.loc["a", "hi"])
    assert iv.loc["b", "lo"] < iv.loc["b", "agg"] < iv.loc["b", "hi"]
    ax = figures.intervals_figure(iv.reset_index()).axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert any(label.startswith("a ") and "no interval" in label for label in labels), labels


def test_official_anytime_keeps_the_earlier_checkpoint_on_a_tie_and_follows_the_direction():
    """What the harness would have submitted by each minute: the best by validation, ties to the earlier one.

    t6 (lower is better): validation 0.40, 0.40 (a tie: the first stays), then 0.38 -> officials 0.41, 0.41, 0.385.
    t7 (higher is better): validation 0.50, 0.60, 0.55 (worse: the 0.60 one stays) -> 0.51, 0.61, 0.61.
    """
    agents = pd.DataFrame(_agent_rows("t6", [0.385], False) + _agent_rows("t7", [0.61], True))
    agents["entry"], agents["wall_time_s"] = "a", 1200.0  # the runs end at minute 20
    evals = pd.DataFrame(
        {
            "parent_run_id": ["t6-0"] * 3 + ["t7-0"] * 3,
            "saved_minutes": [5.0, 10.0, 15.0] * 2,
            "val_score": [0.40, 0.40, 0.38, 0.50, 0.60, 0.55],
            "official_score": [0.41, 0.39, 0.385, 0.51, 0.61, 0.57],
        }
    )
    rs = RunSet(agents, pd.DataFrame(columns=["run_id", "parent_run_id"]), evals)
    c = curves.official_anytime(rs, pd.DataFrame(columns=["higher_is_better"]))  # no task metadata: the runs' own
    by = c.groupby("run_id")
    assert by["score"].apply(list).to_dict() == {
        "t6-0": pytest.approx([0.41, 0.41, 0.385, 0.385]),  # the last value held to the end of the run
        "t7-0": pytest.approx([0.51, 0.61, 0.61, 0.61]),
    }
    assert by["minute"].apply(list).to_dict() == {"t6-0": [5.0, 10.0, 15.0, 20.0], "t7-0": [5.0, 10.0, 15.0, 20.0]}


def test_bench_starts_without_the_reports_libraries():
    """Every ``bench`` start builds the whole parser, ``bench report`` included: that must not import pandas or
    matplotlib (about 0.6 s), which only the report itself needs."""
    code = "import sys, bench.cli; bench.cli.build_parser(); print(sorted({'pandas', 'matplotlib'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
