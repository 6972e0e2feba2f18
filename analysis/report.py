"""``bench report``: every table and figure, from MLflow (and the published numbers), into one folder.

Output (``report/`` by default)::

    index.md                     the leaderboard, links to everything, figures inline, what each shows, and
                                 which runs were outside the paper's protocol (marked §; left out with --published)
    leaderboard.{md,tex,csv}     entries ranked by Agg with bootstrap 95 % interval, Agg-max, success, cost
    cells.csv                    the long form: one row per entry and task with every statistic
    table4/5/6/8.{md,tex,csv}    the paper's layouts
    gap.{md,tex,csv}             the share of the baseline-to-reference gap closed per task (MLRC-Bench; analysis.gap)
    paired.{md,tex,csv}          paired comparison of two entries (the top two by Agg, or --compare A B)
    figure3.{png,pdf,csv}        mean scripts per task vs Agg with fitted line and Pearson r
    utilisation.{png,pdf}        budget utilisation per task
    anytime.{png,pdf,csv}        score vs minutes into the budget per run (official and self-reported)
    timeline.{png,pdf,csv}       script launches within the budget per run
    agg_intervals.{png,pdf,csv}  Agg with bootstrap 95 % intervals
    paired.{png,pdf}

The sub-command's arguments live in :mod:`analysis.report_cli` (light, read on every ``bench`` start); ``python -m
analysis.report_cli`` runs it alone.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from analysis import curves, figures, gap, noise, notes, stats, tables
from analysis import published as pub
from analysis.deviations import excluded_note
from analysis.leaderboard import AGENT, Leaderboard, build, top_two
from analysis.render import to_markdown, write
from analysis.runs import load
from bench.errors import InputError

FIGURE_NOTES = {
    "figure3": "Paper Figure 3: each agent entry's mean number of training scripts per task (x) against its Agg "
    "(y), with the least-squares line (dashed) and Pearson r. A negative slope: more launches, lower Agg.",
    "utilisation": "Share of the wall-clock budget each entry used per task (bars: mean over runs; dots: single "
    "runs). The paper's Table 8 as a figure, for every entry with timing.",
    "anytime": "Per task, each run's score against minutes into the budget. Solid steps: the official score of the "
    "checkpoint the harness would have submitted had the budget ended then (window checkpoints); dotted: the best "
    "validation score the run's scripts had reported so far (child-run metrics).",
    "timeline": "Per task, one row per agent run: every script it launched as a bar from launch to end (stacked "
    "in lanes when scripts ran in parallel), green finished, red failed, orange killed; black tick: the agent ended.",
    "agg_intervals": "Agg per entry with its bootstrap 95 % interval (runs resampled per task; published rows "
    "parametric from mean, std, n): overlapping intervals mean the ranking is not settled.",
    "paired": "Paired comparison: per task difference of the two entries' Eq. 1 terms (green: the first is better), "
    "and the Agg difference with its bootstrap 95 % interval.",
}


def _save(fig, folder: Path, name: str) -> list[Path]:
    paths = [folder / f"{name}.png", folder / f"{name}.pdf"]
    width, height = fig.get_size_inches()
    fig.savefig(paths[0], dpi=130 if width * height < 120 else 100)  # big panels: fewer pixels, same content
    fig.set_layout_engine("none")  # the layout is solved: the PDF reuses it instead of solving it again
    fig.savefig(paths[1])
    return paths


class ReportError(InputError, LookupError):
    """Nothing to report, or an entry that does not exist: a message for the user, not a traceback."""


def _pair(lb: Leaderboard, compare: list[str] | None) -> tuple[str, str] | None:
    if compare:
        try:
            lb.find(compare[0]), lb.find(compare[1])
        except KeyError as e:
            raise ReportError(f"--compare: {e.args[0]}") from e
        return compare[0], compare[1]
    return top_two(lb)  # two different agents, never one agent with itself


def _check_experiments(names: list[str], fatal: bool = True) -> None:
    """ReportError naming the experiments that do not exist in the store, and the ones that could be meant; with
    ``fatal`` False (a report of the published rows), the same sentence as a warning."""
    from bench.tracking import views

    try:
        views.experiments(names)
    except LookupError as e:
        message = str(e)  # it names the experiments that could be meant
        if fatal:
            raise ReportError(message) from e
        print(f"bench report: {message}; the report holds the other rows", file=sys.stderr)


def write_report(
    out: Path,
    experiments: list[str] | None = None,
    *,
    published: bool = False,
    calibration: bool = False,
    calibration_dir: Path | None = None,
    compare: list[str] | None = None,
    n_boot: int = 2000,
    include_nonstandard: bool = False,
) -> dict[str, list[Path]]:
    """Load, compute and write everything; returns the written files by artefact name.

    ``include_nonstandard``: with ``published``, keep the runs made outside the paper's protocol (marked);
    by default they are left out of a comparison with the paper and the front page says so."""
    out = Path(out)
    if experiments:
        _check_experiments(list(experiments), fatal=not published)
    out.mkdir(parents=True, exist_ok=True)
    loaded = load(experiments)
    lb = build(
        loaded,
        published=published,
        calibration=calibration,
        calibration_dir=calibration_dir,
        include_nonstandard=include_nonstandard,
    )
    runs = lb.runs if lb.runs is not None else loaded  # without the runs left out
    if not (lb.cells["kind"] == AGENT).any():  # the Optuna-tuned row alone is no leaderboard
        raise ReportError(
            "no agent runs in the selected experiments"
            + ("" if published else "; add --published for the paper's rows")
        )
    written: dict[str, list[Path]] = {}
    intervals = stats.bootstrap_agg(lb, n_boot=n_boot)
    pair = _pair(lb, compare)
    comparison = stats.compare(lb, *pair, n_boot=n_boot) if pair else None
    floor = noise.noise_table(lb)  # each entry's gain against the task's seed-to-seed noise (analysis/noise.py)

    for t in (
        tables.leaderboard_table(lb, intervals),
        tables.table4(lb),
        tables.table5(lb),
        tables.table6(lb),
        tables.table8(lb),
        gap.gap_table(lb),
        floor,
    ) + ((tables.paired_table(comparison),) if comparison else ()):
        written[t.name] = list(write(t, out).values())
    lb.cells.to_csv(out / "cells.csv", index=False, float_format="%.6g")
    written["cells"] = [out / "cells.csv"]

    points, fit = figures.figure3_data(lb)
    points.assign(**{f"fit_{k}": v for k, v in fit.items()}).to_csv(out / "figure3.csv", index=False)
    intervals.to_csv(out / "agg_intervals.csv", index=False, float_format="%.6g")
    jobs: list[tuple[str, Callable]] = []  # (name, figure maker)
    if not runs.empty:
        tl = curves.timeline(runs)
        if not tl.empty:
            tl.to_csv(out / "timeline.csv", index=False, float_format="%.6g")
            jobs.append(("timeline", lambda: figures.timeline_figure(lb, tl)))
        any_curves = curves.anytime(runs, lb.tasks)
        if not any_curves.empty:
            any_curves.to_csv(out / "anytime.csv", index=False, float_format="%.6g")
            jobs.append(("anytime", lambda: figures.anytime_figure(lb, any_curves)))
    jobs += [("utilisation", lambda: figures.utilisation_figure(lb)), ("figure3", lambda: figures.figure3(lb)),
             ("agg_intervals", lambda: figures.intervals_figure(intervals))]  # fmt: skip
    if comparison:
        jobs.append(("paired", lambda: figures.paired_figure(comparison)))
    for name, make in jobs:  # (drawing in forked workers was slower on a busy 2-core machine: measured)
        paths = _save(make(), out, name) + [p for p in [out / f"{name}.csv"] if p.exists()]
        written[name] = list(dict.fromkeys(written.get(name, []) + paths))
    (out / "index.md").write_text(
        _index(lb, loaded, experiments, published, fit, comparison, written, intervals, floor)
    )
    return written


def _index(lb, runs, experiments, published, fit, comparison, written, intervals, floor) -> str:
    """The report's front page: what went in, the leaderboard, and every file with what it shows."""
    exps = sorted(set(runs.agents["experiment"])) if not runs.empty else []
    lines = [
        "# 1GC-7RC report",
        "",
        f"Generated {datetime.now(UTC):%Y-%m-%d %H:%M UTC}. MLflow experiments: "
        + (", ".join(f"`{e}`" for e in exps) or "none")
        + f" ({len(runs.agents)} agent runs, {len(runs.scripts)} script runs, {len(runs.evals)} eval runs"
        + (f"; {len(lb.excluded)} non-standard agent runs left out" if len(lb.excluded) else "")
        + ")"
        + (f"; published rows from {pub.PAPER}" if published else "")
        + (
            f"; {pub.calibration_label(lb.cells[lb.cells['source'] == pub.CALIBRATION])} calibration row from "
            "`baselines/results/` (see the tables' notes)"
            if (lb.cells["source"] == pub.CALIBRATION).any()
            else ""
        )
        + ".",
        "",
    ]
    if experiments and set(experiments) - set(exps):
        lines += [
            f"Experiments without agent runs (or unknown): {', '.join(sorted(set(experiments) - set(exps)))}.",
            "",
        ]
    if lb.cells["synthetic"].fillna(False).astype(bool).any():
        lines += ["**Contains synthetic runs (generated for benchmarks, not results).**", ""]
    if left_out := excluded_note(lb.excluded):
        lines += [f"**{left_out}**", ""]
    if nonstandard := notes.nonstandard_notes(lb):
        lines += [f"**{note}**" for note in nonstandard] + [""]
    if partial := notes.partial_data_notes(lb):
        lines += [f"**{note}**" for note in partial] + [""]
    if unsandboxed := notes.unsandboxed_notes(lb):
        lines += [f"**{note}**" for note in unsandboxed] + [""]
    if flagged := notes.audit_notes(lb):
        lines += [f"**{note}**" for note in flagged] + [""]
    if packed := notes.task_pack_notes(runs.agents):  # tasks from outside the repository: pack, version, hash
        lines += packed + [""]
    if labelled := notes.tag_notes(runs.agents):  # the runs' own labels (bench run --tag), a line per run
        lines += labelled + [""]
    if missing := gap.missing_note(lb.tasks):  # the tasks without a reference: no gap-closed term there
        lines += [missing, ""]
    board = tables.leaderboard_table(lb, intervals)
    said = {line.strip("*") for line in lines}  # the notes said once above: not again under the table
    board.notes = [note for note in board.notes if note not in said]
    lines += [to_markdown(board), to_markdown(floor), "## Tables", ""]
    titles = {
        "table4": "Table 4: mean ± std, Agg",
        "table5": "Table 5: success and scripts launched",
        "table6": "Table 6: best of N, Agg-max",
        "table8": "Table 8: budget utilisation",
        "leaderboard": "Leaderboard",
        "gap": "Gap closed per task (MLRC-Bench's measure, beside Eq. 1)",
        "noise": "Noise floor: each entry's gain against the baseline's seed-to-seed spread",
        "paired": "Paired comparison",
        "cells": "All cells (long form)",
    }
    for name, title in titles.items():
        files = [p for p in written.get(name, []) if p.suffix in (".md", ".tex", ".csv")]
        if files:
            lines.append(f"- {title}: " + ", ".join(f"[{p.suffix[1:]}]({p.name})" for p in files))
    lines += ["", "## Figures", ""]
    for name, note in FIGURE_NOTES.items():
        files = [p for p in written.get(name, []) if p.suffix in (".png", ".pdf", ".csv")]
        if not files:
            lines += [
                f"### {name}",
                "",
                "Not drawn: no data (it needs MLflow runs with script or eval child runs).",
                "",
            ]
            continue
        extra = ""
        if name == "figure3":
            extra = (
                f" Fit: slope {fit['slope']:+.4f} Agg per script, Pearson r = {fit['r']:+.2f} (p = {fit['p']:.3f},"
                f" n = {fit['n']})."
                if pd.notna(fit["slope"])
                else f" No fit: {fit['n']} point(s)."
            )
        if name == "paired" and comparison:
            extra = f" Entries: {comparison['a']} vs {comparison['b']}."
        lines += [
            f"### {name}",
            "",
            note + extra,
            "",
            f"![{name}]({name}.png)",
            "",
            "Files: " + ", ".join(f"[{p.suffix[1:]}]({p.name})" for p in files),
            "",
        ]
    return "\n".join(lines)


def latest_campaign() -> tuple[str, int] | None:
    """The campaign whose newest agent run started last (:func:`analysis.runs.latest_campaign`, what notebook 02
    reads too), and how many campaigns with agent runs the store holds; None when it holds none. What a bare
    ``bench report`` reports: one campaign's leaderboard, never every campaign of the store mixed in one (a demo, a
    pilot and a study are different comparisons)."""
    from analysis import runs

    agents = runs.agent_runs()
    if agents.empty:
        return None
    return str(runs.latest_campaign(agents)), int(agents["experiment"].nunique())


def cmd_report(args: argparse.Namespace) -> int:
    """``bench report``: write the report, print where it is. Without ``--experiment``: the latest campaign, named
    in one line with how to choose another."""
    started = time.perf_counter()
    experiments = args.experiment
    if not experiments and (latest := latest_campaign()) is not None:
        experiments = [latest[0]]
        others = f" ({latest[1]} campaigns in the store)" if latest[1] > 1 else ""
        print(
            f"bench report: the latest campaign, {latest[0]}{others}; --experiment NAME reports another "
            "(repeat it for several)"
        )
    try:
        written = write_report(
            Path(args.out),
            experiments,
            published=args.published,
            calibration=args.calibration or args.calibration_dir is not None,
            calibration_dir=args.calibration_dir,
            compare=args.compare,
            include_nonstandard=args.include_nonstandard,
        )
    except ReportError as e:  # bad input (an experiment or entry that does not exist, nothing to report): exit 2,
        print(f"bench report: {e}", file=sys.stderr)  # as bench ui and every other command say it
        return 2
    n = sum(len(v) for v in written.values()) + 1  # and index.md, which lists them (the summary's count has it too)
    print(
        f"report: {n} files in {Path(args.out).resolve()} ({time.perf_counter() - started:.1f} s); "
        f"start with {Path(args.out) / 'index.md'}"
    )
    if not getattr(args, "record", False):  # reading does not write: the campaign wrote its summary when it ended
        return 0
    from analysis import summary  # asked for: the campaign and summary runs in MLflow, one line per experiment

    summary.after_report(experiments, render=write_report)
    return 0
