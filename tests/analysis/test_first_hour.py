"""What a researcher meets in the first hour, each piece tested without the 10-minute demo: the demo's leaderboard
(no NaN for one run, the § mark), its ending (a summary run, a UI hint that works), the default comparison of two
different agents, the latest campaign, per-task figures on each task's own axis, figure titles and labels that do
not run off or over each other, the report's notes and its refusal of an unknown experiment, and `make lab`.

Expected values are computed here by hand from the scores written (T6: MSE, lower is better, baseline 0.384, budget
40 min in its task.toml; T5: accuracy, higher is better).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from analysis import figures, leaderboard, pertask, report, tables
from analysis.runs import latest_campaign, load
from bench.tracking import schema, store
from bench.tracking.writer import MlflowWriter

ROOT = Path(__file__).resolve().parents[2]
TASK = {"t6": ("mse", "min"), "t5": ("accuracy", "max")}


def _agent_run(w: MlflowWriter, agent: str, task: str, repeat: int, score: float, budget_min: float, start: float):
    tags = schema.agent_run_tags(w.campaign, agent, "", task, repeat, f"/runs/{task}-{agent}-r{repeat}")
    run = w.create_run(f"{task}-{agent}-r{repeat}", {**tags, schema.STATUS: "success"}, start_time=start)
    metric, direction = TASK[task]
    w.log_params(
        run,
        {schema.PARAM_METRIC: metric, schema.PARAM_DIRECTION: direction, schema.PARAM_BUDGET_MINUTES: budget_min},
    )
    w.log_metrics(run, [(schema.SCORE, score, 0, start + 60), (schema.SUCCESS, 1.0, 0, start + 60)])
    w.end_run(run, end_time=start + 120)
    return run


def _frame(rows: list[tuple[str, str, float, float]]) -> pd.DataFrame:
    """Agent runs by hand: (agent, task, score, budget_min), all successful; a budget other than the task's 40
    minutes is a deviation, as analysis.runs marks it from the run's tags."""
    return pd.DataFrame(
        [
            {"run_id": f"r{i}", "experiment": "x", "agent": a, "model": "", "task": t, "repeat": i + 1,
             "status": "success", "score": s, "higher_is_better": t != "t6", "budget_min": b, "wall_time_s": 60.0,
             "budget_utilisation": 0.5, "scripts_launched": 1.0, "synthetic": False, "metric": TASK[t][0],
             "tokens_input": np.nan, "tokens_output": np.nan, "tokens_cached": np.nan, "cost_usd": np.nan,
             "start_time": 0.0, "nonstandard": b != 40.0, "deviations": "budget" if b != 40.0 else ""}
            for i, (a, t, s, b) in enumerate(rows)
        ]
    )  # fmt: skip


def test_the_demo_leaderboard_has_no_nan_for_one_run_and_marks_a_short_budget():
    """One T6 run of 0.38 on the task's 40 minutes, one on 8 minutes (the demo's reduced budget): the std of one run
    is "–", the 8-minute entry gets § and a line naming the deviation."""
    runs = _frame([("baseline", "t6", 0.38, 40.0), ("short", "t6", 0.40, 8.0)])
    text = leaderboard.short_text(runs, {"t6": 0.384})
    assert "NaN" not in text and "nan" not in text
    lines = text.splitlines()
    baseline = next(line for line in lines if line.split()[:2] == ["t6", "baseline"])
    short = next(line for line in lines if line.split()[:2] == ["t6", "short"])
    assert baseline.split()[2:] == ["0.3800", "–", "1/1", "0.3800", "0.3840"]  # task agent mean std success best b
    assert "short §" in short and "baseline §" not in text
    assert lines[-1].startswith("§ outside the paper's protocol") and "t6 short: budget" in lines[-1]
    assert leaderboard.short_text(runs.iloc[:0]) == "(no runs)"


def test_the_default_pair_is_two_different_agents_never_one_with_itself():
    # the same agent "a" in two campaigns (better in the second) and a worse agent "b": a's best against b
    two = pd.concat(
        [
            _frame([("a", "t6", 0.30, 40.0)]).assign(experiment="c1", run_id="1"),
            _frame([("a", "t6", 0.20, 40.0)]).assign(experiment="c2", run_id="2"),
            _frame([("b", "t6", 0.35, 40.0)]).assign(experiment="c2", run_id="3"),
        ],
        ignore_index=True,
    )
    lb = leaderboard.build(two, calibration=False)
    assert leaderboard.top_two(lb) == ("c2:a", "c2:b")
    one_agent = leaderboard.build(two[two["agent"] == "a"], calibration=False)
    assert leaderboard.top_two(one_agent) is None


def test_the_latest_campaign_is_the_one_whose_agent_run_started_last():
    older, newer = f"old-{uuid.uuid4().hex[:6]}", f"new-{uuid.uuid4().hex[:6]}"
    _agent_run(MlflowWriter(newer), "baseline", "t6", 1, 0.38, 40.0, start=2_000_000_000.0)
    _agent_run(MlflowWriter(older), "baseline", "t6", 1, 0.38, 40.0, start=1_000_000_000.0)  # written last
    assert latest_campaign() == newer


def test_per_task_figures_draw_each_task_on_its_own_metric_and_budget():
    """T6 runs on a 3-minute budget and T5 runs on 40: each panel's x axis ends at its own task's budget."""
    name = f"pertask-{uuid.uuid4().hex[:6]}"
    w = MlflowWriter(name)
    parents = {
        ("t6", 1): _agent_run(w, "baseline", "t6", 1, 0.38, 3.0, start=1_800_000_000.0),
        ("t5", 1): _agent_run(w, "baseline", "t5", 1, 0.81, 40.0, start=1_800_000_000.0),
    }
    runs = load(name)
    lb = leaderboard.build(runs, calibration=False)
    hist = pd.DataFrame(
        [  # a script's checkpoints, 1 and 2 minutes into each budget
            {"run_id": f"s-{t}", "parent_run_id": p, "script": "run_1.py", "step": k, "value": v, "time": t0 + 60 * k}
            for (t, _), p in parents.items()
            for k, v, t0 in [(1, 0.5, 1_800_000_000.0), (2, 0.6, 1_800_000_000.0)]
        ]
    )
    fig = pertask.checkpoints_figure(lb, runs, hist)
    by_title = {ax.get_title().split()[0]: ax for ax in fig.axes}
    assert by_title["T6"].get_xlim()[1] == pytest.approx(3.0 * 1.02)
    assert by_title["T5"].get_xlim()[1] == pytest.approx(40.0 * 1.02)
    assert "MSE" in by_title["T6"].get_ylabel().upper() and "↓" in by_title["T6"].get_ylabel()
    scores = pertask.scores_figure(lb, runs)
    assert sorted(ax.get_title().split()[0] for ax in scores.axes) == ["T5", "T6"]
    t6 = next(ax for ax in scores.axes if ax.get_title().startswith("T6"))
    assert t6.collections[0].get_offsets()[0][1] == pytest.approx(0.38)  # the run's score, on T6's own axis


def _inside(fig, artist) -> bool:
    FigureCanvasAgg(fig).draw()
    box, page = artist.get_window_extent(), fig.bbox
    return box.x0 >= page.x0 - 0.5 and box.x1 <= page.x1 + 0.5


def test_a_long_note_title_is_wrapped_inside_the_figure():
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.0, 3.0), layout="constrained")
    fig.add_subplot()
    note = "§ outside the paper's protocol: " + "; ".join(
        f"agent-{i} [campaign-{i:04d}]: budget, hardware" for i in range(6)
    )
    fig.suptitle(note, fontsize=8)
    assert not _inside(fig, fig._suptitle)  # the failure being fixed: one line runs past both edges
    figures.note_title(fig, note)
    assert _inside(fig, fig._suptitle) and fig._suptitle.get_text().count("\n") >= 2


def test_figure3_lists_coinciding_entries_at_one_spot_without_overprinting():
    points = pd.DataFrame(
        {
            "entry": ["a", "b", "c"],
            "mean_scripts": [3.0, 3.0, 9.0],
            "agg": [0.10, 0.10, 0.40],
            "nonstandard": [False, True, False],
            "superseded_by": ["", "", ""],
            "complete": [True, True, True],
            "agg_tasks": [2, 2, 2],
            "of_tasks": [2, 2, 2],
        }
    )
    spots = figures._coinciding_labels(points)
    assert spots == {(9.0, 0.40): ["c"], (3.0, 0.10): ["a", "b §"]}


def test_table4_explains_its_reference_row():
    lb = leaderboard.build(_frame([("a", "t6", 0.38, 40.0)]), calibration=False)
    t4 = tables.table4(lb)
    assert any(getattr(r, "label", "") == "Reference" for r in t4.rows)
    assert any(n.startswith("Reference: a published result") and "T6 PatchTST" in n for n in t4.notes)


def test_bench_report_names_an_experiment_that_does_not_exist(tmp_path, capsys):
    name = f"real-{uuid.uuid4().hex[:6]}"
    _agent_run(MlflowWriter(name), "baseline", "t6", 1, 0.38, 40.0, start=1_900_000_000.0)
    args = report_args(tmp_path / "out", [f"nope-{name}"])
    assert report.cmd_report(args) == 2  # bad input, as in every command
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"bench report: no experiment 'nope-{name}' in {store.tracking_uri()}")
    assert name in err and not (tmp_path / "out").exists()  # what exists is named; nothing written


def report_args(out: Path, experiments: list[str]):
    import argparse

    return argparse.Namespace(
        out=str(out),
        experiment=experiments,
        published=False,
        calibration=False,
        calibration_dir=None,
        compare=None,
        include_nonstandard=False,
    )


@pytest.mark.slow
def test_the_demo_ends_with_a_summary_run_and_a_working_ui_hint(capsys, monkeypatch):
    """bench demo's end (bench.demo.finish) on two runs written as the demo's would be: the leaderboard without NaN,
    the campaign's summary run in MLflow, and a UI command that works without an activated environment."""
    from bench import demo

    name = f"demo-{uuid.uuid4().hex[:6]}"
    w = MlflowWriter(name)
    _agent_run(w, "baseline", "t6", 1, 0.38, 40.0, start=1_900_000_000.0)
    _agent_run(w, "baseline", "t5", 1, 0.81, 8.0, start=1_900_000_100.0)
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # not activated: `bench` is not on PATH
    demo.finish(name, {"t6": 0.384, "t5": 0.806})
    out = capsys.readouterr().out
    assert "NaN" not in out and "baseline §" in out
    assert re.search(rf"\[demo\] campaign summary of {name}: MLflow run \w+ \(1 entry,", out)
    exp = store.client().get_experiment_by_name(name).experiment_id
    summaries = store.client().search_runs([exp], f"tags.`{schema.KIND}` = '{schema.KIND_SUMMARY}'")
    assert len(summaries) == 1 and summaries[0].data.tags[schema.ENTRY] == "baseline"
    hint = next(line for line in out.splitlines() if line.startswith("Open the MLflow UI:"))
    bench = Path(sys.executable).parent / "bench"
    assert "make ui" in hint and f"{bench.relative_to(ROOT) if bench.is_relative_to(ROOT) else bench} ui" in hint
    assert _make_plan("ui").stdout.strip().endswith("bench ui")


def _make_plan(*args: str) -> subprocess.CompletedProcess:
    """`make -n ARGS` as a user's shell runs it: under `make test` the inherited MAKEFLAGS/MAKELEVEL would add
    make's "Entering directory" lines to the plan (CI runs the suite through `make test`)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")}
    return subprocess.run(
        ["make", "--no-print-directory", "-n", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )


def test_make_lab_installs_the_lab_extra_and_opens_the_notebooks():
    """The documented front end: `make lab` installs the `lab` extra (JupyterLab) and opens it on notebooks/."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(re.match(r"jupyterlab\b", r) for r in extras["lab"])
    plan = _make_plan("-W", "pyproject.toml", "lab")
    assert plan.returncode == 0, plan.stderr
    assert "pip install -q -c constraints.txt -e '.[lab]'" in plan.stdout  # the lab extra, at the pinned versions
    assert re.search(r"jupyter-lab --notebook-dir=notebooks", plan.stdout)


@pytest.mark.slow
def test_the_lab_extra_resolves_on_the_package_index():
    """pip resolves the `lab` extra's requirement (metadata only, no install); skipped without the index."""
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["lab"][0]
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed", "-q", spec],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0 and re.search(r"(?i)connection|network|resolve host|timed out", done.stderr):
        pytest.skip(f"no package index: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr
