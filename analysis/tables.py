"""The paper's table layouts (Tables 4, 5, 6, 8) and the leaderboard, built from a :class:`Leaderboard`.

Each function returns a :class:`analysis.render.Table` that renders to Markdown, LaTeX and CSV.
The layouts follow the paper: tasks as columns with the metric's direction, Reference and Baseline
rows first (then the Optuna-tuned calibration row when present), agents grouped under a header
(the paper's CLI groups for published rows, the MLflow experiment for new ones), the best agent
value of each column in bold, and cells whose success rate is below 100 % flagged (red in LaTeX).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis import published as pub
from analysis.deviations import MARK
from analysis.leaderboard import AGENT, AGG_DIRECTION, Leaderboard, reduced_budget
from analysis.notes import audit_notes, partial_data_notes, table_notes, unsandboxed_notes
from analysis.render import Cell, Row, Table
from bench.tasks.direction import Direction

__all__ = ["audit_notes", "partial_data_notes", "unsandboxed_notes"]  # their home is analysis.notes

NA = "N/A"


def fmt(value, decimals: int = 4, sign: bool = False) -> str:
    """A number as the paper prints it ('–' when missing)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)) or pd.isna(value):
        return "–"
    value = value if round(value, decimals) != 0 else 0.0  # no "-0.000" from rounding noise
    return f"{value:+.{decimals}f}" if sign else f"{value:.{decimals}f}"


def _count(value) -> str:
    return "–" if pd.isna(value) else (f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}")


def _headers(lb: Leaderboard, last: str | None, last_sub: str | None) -> tuple[list[str], list[str]]:
    cols, subs = [], []
    for task, t in lb.tasks.iterrows():
        cols.append(f"Task {task[1:]}" if task[1:].isdigit() else t["label"])
        subs.append(f"{Direction.of(bool(t['higher_is_better'])).arrow} {pub.metric_label(t['metric'])}")
    if last:
        cols.append(last)
        subs.append(last_sub or "")
    return cols, subs


def _best(lb: Leaderboard, column: str, decimals: int) -> set[tuple[str, str, str]]:
    """(source, entry, task) of the best agent value per task, at printed precision (ties all bold)."""
    c = lb.cells[(lb.cells["kind"] == AGENT) & lb.cells[column].notna()]
    c = c[(c["superseded_by"] == "") & (c["entry_superseded_by"] == "")]  # superseded cells and entries never bold
    c = c[~reduced_budget(c["deviations"])]  # nor a cell made on another budget than the task's
    c = c[
        c["too_short"].astype(object).where(c["too_short"].notna(), "").eq("")
    ]  # nor one whose baseline training the budget cut (too short to compare)
    marks = set()
    for task, group in c.groupby("task"):
        values = group[column].round(decimals)
        top = Direction.of(bool(lb.tasks.loc[task, "higher_is_better"])).best(values, key=float)
        marks |= {(r.source, r.entry, task) for r in group[values == top].itertuples()}
    return marks


def _best_summary(lb: Leaderboard, column: str, decimals: int = 3) -> set[tuple[str, str]]:
    """(source, entry) of the highest Agg / Agg-max among the ranked entries (Eq. 1: higher is better)."""
    s = lb.summary[lb.summary["rank"].notna() & lb.summary[column].notna()]  # ranked: complete, not superseded
    if s.empty:
        return set()
    values = s[column].round(decimals)
    top = AGG_DIRECTION.best(values, key=float)
    return {(r.source, r.entry) for r in s[values == top].itertuples()}


def _agg_cell(lb: Leaderboard, source: str, entry: str, column: str, best: set) -> Cell:
    row = lb.summary[(lb.summary["source"] == source) & (lb.summary["entry"] == entry)].iloc[0]
    n_tasks = row["of_tasks"]
    note = f"({row['agg_tasks']}/{n_tasks} tasks)" if 0 < row["agg_tasks"] < n_tasks else ""
    return Cell(fmt(row[column], 3, sign=True), bold=(source, entry) in best, note=note)


def reference_note(lb: Leaderboard) -> list[str]:
    """What the rows above the rule are: the Reference row is no agent's and no rival's (a table note)."""
    ref = lb.tasks[lb.tasks["reference"].notna()]
    if ref.empty:
        return []
    sources = "; ".join(
        f"{r.label} {r.reference_source}" if isinstance(r.reference_source, str) and r.reference_source else r.label
        for r in ref.itertuples()
    )
    return [
        "Reference: a published result on the task's dataset from the literature, trained without the 1GC-7RC "
        f"budget ({sources}; paper Appendix D): context for the scale, not an entry. Baseline: the task's "
        "baseline score (Table 2), the b of Eq. 1."
    ]


def _reference_rows(lb: Leaderboard, value: str, with_last: bool) -> list[Row]:
    """Reference (published, Appendix D), Baseline (Table 2) and the Optuna-tuned row when present."""
    tail = [Cell("–")] if with_last else []
    rows = []
    if lb.tasks["reference"].notna().any():
        rows.append(Row("Reference", [Cell(fmt(v, 3)) for v in lb.tasks["reference"]] + tail))
    rows.append(Row("Baseline", [Cell(fmt(v, 3)) for v in lb.tasks["baseline"]] + tail))
    cal = lb.cells[lb.cells["source"] == pub.CALIBRATION].set_index("task")
    if not cal.empty:
        cells = [Cell(fmt(cal.loc[t, value]) if t in cal.index else "–") for t in lb.tasks.index]
        last = "agg" if value == "mean" else "agg_max"
        rows.append(
            Row(
                pub.calibration_label(cal),  # where and how it was tuned; the table note says more
                cells + ([_agg_cell(lb, pub.CALIBRATION, pub.CALIBRATION_LABEL, last, set())] if with_last else []),
            )
        )
    rows[-1].rule_after = True
    return rows


def _agent_rows(lb: Leaderboard, make_cell, last=None) -> list[Row | str]:
    """Group headers and one row per agent entry, in display order."""
    out: list[Row | str] = []
    group = None
    for e in lb.entries().itertuples():
        name = e.group if isinstance(e.group, str) and e.group else "Other entries"  # no group: still a header
        if name != group:
            group = name
            out.append(group)
        cells = [make_cell(lb.cell(e.source, e.entry, t), t) for t in lb.tasks.index]
        out.append(Row(row_label(lb, e.source, e.entry), cells + ([last(e.source, e.entry)] if last else [])))
    return out


def row_label(lb: Leaderboard, source: str, entry: str) -> str:
    """An entry's label with its marks: § when it has runs outside the protocol, "(superseded)" when a larger
    sample of the same agent replaces it (the notes say by what and how)."""
    s = lb.summary[(lb.summary["source"] == source) & (lb.summary["entry"] == entry)]
    if s.empty:
        return entry
    r = s.iloc[0]
    return entry + (f" {MARK}" if r["nonstandard"] else "") + (" (superseded)" if r["superseded_by"] else "")


def _marks(c: pd.Series, note: str) -> tuple[str, bool]:
    """A cell's note with § for non-standard runs and who supersedes it; whether it is muted (superseded)."""
    by = c["superseded_by"] or c["entry_superseded_by"]
    short = "(too short)" if isinstance(c.get("too_short"), str) and c["too_short"] else ""
    parts = [note, MARK if c["nonstandard"] else "", short, f"(superseded by {by})" if by else ""]
    return " ".join(p for p in parts if p), bool(by)


def _flagged(c: pd.Series) -> bool:
    return int(c["n_success"]) < int(c["n_runs"])


def _score_cell(c: pd.Series | None, column: str, bold: set, with_std: bool) -> Cell:
    if c is None:
        return Cell("")
    flag = _flagged(c)
    note = f"{int(c['n_success'])}/{int(c['n_runs'])}" if flag else ""
    note, muted = _marks(c, note)
    if pd.isna(c[column]):
        return Cell(NA, flag=flag, note=note)
    text = fmt(c[column])
    if with_std and pd.notna(c["std"]):
        text += f" ± {fmt(c['std'])}"
    return Cell(text, bold=(c["source"], c["entry"], c["task"]) in bold, flag=flag, note=note, muted=muted)


def _tidy(lb: Leaderboard, column: str, bold: set, agg_column: str, best_agg: set) -> pd.DataFrame:
    c = lb.cells
    keep = ["source", "group", "entry", "task", "n_runs", "n_success", column, "std", "superseded_by"]
    data = c[keep + ["entry_superseded_by", "nonstandard", "deviations"]].copy()
    data = data.rename(columns={column: "value"})
    data["bold"] = [(s, e, t) in bold for s, e, t in zip(c["source"], c["entry"], c["task"], strict=True)]
    data["flag_success_below_100"] = c["n_success"] < c["n_runs"]
    agg = lb.summary[["source", "group", "entry", agg_column, "agg_tasks", "rank", "nonstandard", "deviations"]]
    agg = agg.rename(columns={agg_column: "value"})
    agg["bold"] = [(s, e) in best_agg for s, e in zip(agg["source"], agg["entry"], strict=True)]
    agg["task"] = agg_column
    return pd.concat([data, agg], ignore_index=True)


def table4(lb: Leaderboard) -> Table:
    """Table 4: mean ± std over successful runs, best mean in bold, success < 100 % flagged, Agg."""
    bold, best_agg = _best(lb, "mean", 4), _best_summary(lb, "agg")
    cols, subs = _headers(lb, "1GC-7RC", f"{AGG_DIRECTION.arrow} Agg")
    t = Table(
        "table4",
        "Table 4",
        "Main results: mean ± std over the successful runs. Bold: best mean (incl. Agg). "
        "{flag}: success rate < 100 % (n/N shown). Agg: baseline-relative improvement (Eq. 1).",
        cols,
        subs,
        corner="",
    )
    t.rows = _reference_rows(lb, "mean", True)
    t.rows += _agent_rows(
        lb, lambda c, _: _score_cell(c, "mean", bold, True), lambda s, e: _agg_cell(lb, s, e, "agg", best_agg)
    )
    t.data = _tidy(lb, "mean", bold, "agg", best_agg)
    t.notes = reference_note(lb) + table_notes(lb)
    return t


def table6(lb: Leaderboard) -> Table:
    """Table 6: best single run (best of N), best in bold, success < 100 % flagged, Agg-max."""
    bold, best_agg = _best(lb, "best", 4), _best_summary(lb, "agg_max")
    cols, subs = _headers(lb, "1GC-7RC", f"{AGG_DIRECTION.arrow} Agg-max")
    t = Table(
        "table6",
        "Table 6",
        "Best single run per agent (best of N, not mean). Bold: best score (incl. "
        "Agg-max). {flag}: success rate < 100 %. Agg-max: Eq. 1 on the best-of-N scores.",
        cols,
        subs,
    )
    t.rows = _reference_rows(lb, "best", True)
    t.rows += _agent_rows(
        lb, lambda c, _: _score_cell(c, "best", bold, False), lambda s, e: _agg_cell(lb, s, e, "agg_max", best_agg)
    )
    t.data = _tidy(lb, "best", bold, "agg_max", best_agg)
    t.notes = reference_note(lb) + table_notes(lb)
    return t


def table5(lb: Leaderboard) -> Table:
    """Table 5: success n/N and the mean number of training scripts launched over valid runs."""
    cols, _ = _headers(lb, None, None)

    def cell(c, _task) -> Cell:
        if c is None:
            return Cell("")
        scripts = c["mean_scripts"] if pd.notna(c["mean_scripts"]) else np.nan
        note, muted = _marks(c, "")
        return Cell(f"{int(c['n_success'])}/{int(c['n_runs'])} – {_count(scripts)}", flag=_flagged(c), note=note,
                    muted=muted)  # fmt: skip

    t = Table(
        "table5",
        "Table 5",
        "Mean number of training scripts launched (counted by the tracer within the "
        "budget). Each cell: success rate n/N, then the mean script count over valid runs. {flag}: n < N.",
        cols,
        None,
    )
    t.rows = _agent_rows(lb, cell)
    data = lb.cells[lb.cells["kind"] == AGENT]
    t.data = data[["source", "group", "entry", "task", "n_runs", "n_success", "mean_scripts", "mean_scripts_all",
                   "nonstandard", "deviations"]]  # fmt: skip
    t.notes = table_notes(lb)
    return t


def table8(lb: Leaderboard) -> Table:
    """Table 8 for every entry with timing: budget, minutes used and utilisation per task, and their means."""
    cols = ["Budget", "Used", "Utilisation"]
    t = Table(
        "table8",
        "Table 8",
        "Per-task wall-clock budget utilisation (agent wall time / budget), mean over the runs of each agent.",
        cols,
        ["minutes", "minutes", "%"],
        corner="Task",
    )
    c = lb.cells[(lb.cells["kind"] == AGENT) & lb.cells["utilisation"].notna()].copy()
    c["used_min"] = c["wall_min"].where(c["wall_min"].notna(), c["utilisation"] * c["budget_min"])
    c["used_min"] = np.minimum(c["used_min"], c["budget_min"])  # time past the budget is grace, not budget
    for (source, entry), g in c.groupby(["source", "entry"], sort=False):
        model = g["model"].iloc[0]
        label = row_label(lb, source, entry)
        t.rows.append(f"{label}" + (f" ({model})" if model and model not in entry else "") + f" [{source}]")
        for r in g.itertuples():
            title = lb.tasks.loc[r.task, "title"]
            t.rows.append(
                Row(
                    f"{lb.tasks.loc[r.task, 'label']} - {title}",
                    [Cell(_count(r.budget_min)), Cell(fmt(r.used_min, 2)), Cell(fmt(100 * r.utilisation, 2))],
                )
            )
        t.rows.append(
            Row(
                f"Mean over {len(g)} task{'s' if len(g) > 1 else ''}",
                [
                    Cell(_count(round(g["budget_min"].mean(), 1))),
                    Cell(fmt(g["used_min"].mean(), 2)),
                    Cell(fmt(100 * g["utilisation"].mean(), 2)),
                ],
            )
        )
    c["utilisation_pct"] = 100 * c["utilisation"]
    cols = ["source", "entry", "model", "task", "n_runs", "budget_min", "used_min", "utilisation_pct", "nonstandard"]
    t.data = c[cols + ["deviations"]]
    if c.empty:
        t.notes = ["No entry has timing data (published: only GPT 5.5, Table 8; MLflow runs always have it)."]
    else:
        t.notes = table_notes(lb)
    return t


def leaderboard_table(lb: Leaderboard, intervals: pd.DataFrame | None = None) -> Table:
    """The leaderboard: entries ranked by Agg, with its bootstrap 95 % interval, Agg-max, success, cost."""
    s = lb.summary.copy()
    if intervals is not None and not intervals.empty:
        s = s.merge(intervals[["source", "entry", "lo", "hi", "method"]], on=["source", "entry"], how="left")
    else:
        s["lo"] = s["hi"] = np.nan
        s["method"] = ""
    cols = [
        "Source",
        "Agg",
        "95 % CI",
        "Agg-max",
        "Gap closed",
        "Success",
        "Tasks",
        "Scripts/task",
        "Budget used",
        "Tokens/run",
        "Cost/run",
    ]
    t = Table(
        "leaderboard",
        "Leaderboard",
        "Entries ranked by Agg (Eq. 1, mean over successful runs); 95 % CI: "
        "bootstrap percentile interval of Agg; Gap closed: share of the baseline-to-reference gap closed by the "
        "mean (MLRC-Bench; gap.md per task); Success: successful / all runs; Tasks: tasks in Agg / tasks in "
        "the table (entries without all of them are not ranked); an entry with more runs supersedes one with "
        "fewer for the same agent (Section 3.1): listed, not ranked. § marks runs outside the paper's protocol.",
        cols,
        None,
        corner="Entry",
    )
    for r in s.itertuples():
        rank = f"{r.rank}. " if pd.notna(r.rank) else ""  # unranked: not all tasks, or superseded
        ci = f"[{fmt(r.lo, 3, True)}, {fmt(r.hi, 3, True)}]" if pd.notna(r.lo) else "–"
        tokens = r.tokens_input + r.tokens_output if pd.notna(r.tokens_input) and pd.notna(r.tokens_output) else np.nan
        t.rows.append(
            Row(
                f"{rank}{row_label(lb, r.source, r.entry)}",
                [
                    Cell(r.source),
                    Cell(fmt(r.agg, 3, True)),
                    Cell(ci),
                    Cell(fmt(r.agg_max, 3, True)),
                    Cell(fmt(getattr(r, "gap", None), 3, True)),  # MLRC-Bench's measure (analysis.gap)
                    Cell(f"{r.successes}/{r.runs}", flag=r.successes < r.runs),
                    Cell(f"{r.agg_tasks}/{r.of_tasks}"),
                    Cell(fmt(r.mean_scripts, 1)),
                    Cell(fmt(100 * r.utilisation, 0) + " %" if pd.notna(r.utilisation) else "–"),
                    Cell(f"{tokens:,.0f}" if pd.notna(tokens) else "–"),
                    Cell(f"${r.cost_usd:.2f}" if pd.notna(r.cost_usd) else "–"),
                ],
            )
        )
    t.data = s
    t.notes = table_notes(lb)
    return t


def paired_table(comparison: dict) -> Table:
    """A paired comparison of two entries (see :func:`analysis.stats.compare`)."""
    a, b, per_task = comparison["a"], comparison["b"], comparison["tasks"]
    cols = [f"{a} mean", f"{b} mean", f"{a} rel.", f"{b} rel.", "Δ rel.", "p (Welch)"]
    t = Table(
        "paired",
        "Paired comparison",
        f"{a} vs {b}, paired by task: Eq. 1 terms per task and their difference (positive: the first is better).",
        cols,
        None,
        corner="Task",
    )
    for r in per_task.itertuples():
        t.rows.append(
            Row(
                r.label,
                [
                    Cell(fmt(r.mean_a)),
                    Cell(fmt(r.mean_b)),
                    Cell(fmt(r.rel_a, 3, True)),
                    Cell(fmt(r.rel_b, 3, True)),
                    Cell(fmt(r.diff, 3, True)),
                    Cell(fmt(r.p_welch, 3)),
                ],
            )
        )
    o = comparison["overall"]
    ci = f"[{fmt(o['diff_lo'], 3, True)}, {fmt(o['diff_hi'], 3, True)}]"
    t.rows.append(
        Row(
            "Agg (common tasks)",
            [
                Cell(""),
                Cell(""),
                Cell(fmt(o["agg_a"], 3, True)),
                Cell(fmt(o["agg_b"], 3, True)),
                Cell(fmt(o["diff"], 3, True), note=ci),
                Cell(fmt(o["p_wilcoxon"], 3), note="Wilcoxon"),
            ],
        )
    )
    t.data = per_task
    t.notes = [
        f"{a} better on {o['wins_a']} task(s), {b} on {o['wins_b']}, ties {o['ties']}; Δ Agg 95 % bootstrap "
        f"interval {ci}; Wilcoxon signed-rank over tasks p = {fmt(o['p_wilcoxon'], 3)} (n = {o['n_tasks']})."
    ]
    return t
