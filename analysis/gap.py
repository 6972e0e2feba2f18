"""The share of the baseline-to-reference gap an agent closes: MLRC-Bench's measure, beside the paper's Eq. 1.

MLRC-Bench (Zhang et al. 2025, "MLRC-Bench: Can Language Agents Solve Machine Learning Research Challenges?",
arXiv:2504.09702, its "Relative Improvement to Human") scores an agent on a task by how much of the margin between
the task's baseline and the top human solution it closes::

    (s_agent - s_baseline) / (s_top_human - s_baseline)

MLRC-Bench reports it in **percent** (x 100; "the best agent closes only 9.3 % of the gap"), from the best of a
task-model pair's runs: its leaderboard code computes ``agent_margin / human_margin * 100`` per run, with
``agent_margin = test - baseline_test`` and ``human_margin = human - baseline_test`` (asserted > 0), and keeps the
``max`` over the pair's runs (read in the MLRC-Bench repository's capability-level script). Here it is a
**fraction** (0.093), computed for the mean of the successful runs (``gap``, like Eq. 1's Agg) and for the
best run (``gap_max``, like Agg-max and like MLRC-Bench's own choice).

Direction: the formula is the same for a metric where lower is better (both differences change sign), but it is
only defined when the reference is strictly better than the baseline under the task's :class:`Direction`; otherwise
(a reference equal to the baseline, or a reference worse than it) the value is NaN, never a sign-flipped number. 0
is the baseline, 1 the reference, below 0 worse than the baseline, above 1 beyond the reference.

Eq. 1 divides by the baseline and so weighs tasks by how far the baseline is from zero; the gap closed divides by
what a better method is known to reach, so a task where the baseline is already near the reference counts as much as
one where it is far. Which reference a task measures to is :attr:`bench.tasks.registry.Task.reference`
(``gap_reference`` in task.toml, else the first declared; the paper's Reference row for the seven). A task without
one has no gap term; :func:`missing_note` names those tasks.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.render import Cell, Row, Table
from bench.tasks.direction import Direction

MLRC_BENCH = "MLRC-Bench (Zhang et al. 2025, arXiv:2504.09702)"
GAP_DIRECTION = Direction.MAX  # the gap closed grows with quality on every task


def gap_closed(score: float, baseline: float, reference: float, direction: Direction) -> float:
    """The share of the baseline-to-reference gap ``score`` closes; NaN when the reference does not beat the
    baseline under ``direction`` (or any input is missing)."""
    return direction.gap_closed(score, baseline, reference)  # bench's one definition (the agent run logs it too)


def gap_column(scores, baselines, references, higher_is_better) -> np.ndarray:
    """:func:`gap_closed` element by element (arrays of one length, or scalars that broadcast); NaN in, NaN out."""
    s, b, r, h = np.broadcast_arrays(
        np.asarray(scores, dtype=float),
        np.asarray(baselines, dtype=float),
        np.asarray(references, dtype=float),
        np.asarray(higher_is_better, dtype=bool),
    )
    out = np.full(s.shape, np.nan)
    for i in np.ndindex(s.shape):
        out[i] = gap_closed(s[i], b[i], r[i], Direction.of(bool(h[i])))
    return out


def with_gap(table: pd.DataFrame, tasks: pd.DataFrame) -> pd.DataFrame:
    """Cells (with ``baseline`` and ``higher_is_better`` from :func:`analysis.leaderboard.with_baselines`) plus the
    task's gap reference and the gap closed by the mean (``gap_mean``) and by the best run (``gap_best``)."""
    table = table.copy()
    column = tasks["gap_reference"] if "gap_reference" in tasks else pd.Series(np.nan, index=tasks.index)
    table["gap_reference"] = table["task"].map(column).astype(float)
    for value, out in (("mean", "gap_mean"), ("best", "gap_best")):
        table[out] = gap_column(table[value], table["baseline"], table["gap_reference"], table["higher_is_better"])
    return table


def summarize(summary: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """The entries' summary plus ``gap`` / ``gap_max`` (mean over the entry's tasks with a gap term of
    ``gap_mean`` / ``gap_best``), ``gap_tasks`` (how many) and ``gap_of_tasks`` (tasks of the table with a
    reference). Ranking stays Eq. 1's: the gap closed is reported beside it."""
    if summary.empty:
        return summary
    g = table.groupby(["source", "entry"], sort=False).agg(
        gap=("gap_mean", "mean"), gap_max=("gap_best", "mean"), gap_tasks=("gap_mean", "count")
    )
    out = summary.drop(columns=["gap", "gap_max", "gap_tasks", "gap_of_tasks"], errors="ignore")
    out = out.merge(g.reset_index(), on=["source", "entry"], how="left")
    out["gap_of_tasks"] = table.loc[table["gap_reference"].notna(), "task"].nunique()
    return out


def without_reference(tasks: pd.DataFrame) -> list[str]:
    """The tasks (ids) that have no gap term: no reference, or one that does not beat the baseline."""
    out = []
    for task, t in tasks.iterrows():
        ref = float(t.get("gap_reference", np.nan))
        if not Direction.of(bool(t["higher_is_better"])).better(ref, float(t["baseline"])):  # NaN beats nothing
            out.append(str(task))
    return out


def missing_note(tasks: pd.DataFrame) -> str:
    """One line naming the tasks without a gap term and what to do ("" when every task has one)."""
    missing = without_reference(tasks)
    if not missing:
        return ""
    names = ", ".join(str(tasks.loc[t, "label"]) if "label" in tasks else t.upper() for t in missing)
    return (
        f"Gap closed ({MLRC_BENCH}): no reference for {names}, so no gap term there (a task declares one in its "
        "task.toml: reference_score, or [[references]] with name, score and source); the entries' gap is the "
        "mean over the other tasks."
    )


def _fmt(value, decimals: int = 3) -> str:
    return "–" if value is None or pd.isna(value) else f"{value:+.{decimals}f}"


def gap_table(lb) -> Table:
    """Per task the gap closed by each entry's mean, and per entry its mean over the tasks (Gap) and the same with
    each task's best run (Gap-max): the MLRC-Bench view of the leaderboard (``gap.{md,tex,csv}``)."""
    tasks = lb.tasks
    cols = [str(t["label"]) for _, t in tasks.iterrows()] + ["Gap", "Gap-max"]
    subs = [str(t.get("gap_reference_name") or "no reference") for _, t in tasks.iterrows()] + ["mean", "best run"]
    t = Table(
        "gap",
        "Gap closed",
        f"Share of the baseline-to-reference gap closed ({MLRC_BENCH}, there in percent, here a fraction: 0 the "
        "baseline, 1 the reference), by the mean of the successful runs per task; Gap: its mean over the entry's "
        "tasks with a reference, Gap-max: the same with each task's best run (MLRC-Bench's own choice).",
        cols,
        subs,
        corner="Entry",
    )
    refs = [Cell(f"{v:.4g}" if pd.notna(v) else "–") for v in tasks.get("gap_reference", [np.nan] * len(tasks))]
    t.rows.append(Row("Reference", refs + [Cell(""), Cell("")]))
    t.rows.append(Row("Baseline", [Cell(f"{v:.4g}") for v in tasks["baseline"]] + [Cell(""), Cell("")], True))
    summary = lb.summary.set_index(["source", "entry"])
    for e in lb.entries().itertuples():
        cells = []
        for task in tasks.index:
            c = lb.cell(e.source, e.entry, task)
            cells.append(Cell(_fmt(c["gap_mean"]) if c is not None else ""))
        s = summary.loc[(e.source, e.entry)]
        note = f"({s['gap_tasks']:.0f}/{s['gap_of_tasks']:.0f} tasks)" if s["gap_tasks"] < s["gap_of_tasks"] else ""
        cells += [Cell(_fmt(s["gap"]), note=note), Cell(_fmt(s["gap_max"]))]
        t.rows.append(Row(f"{e.entry} [{e.source}]", cells))
    keep = ["source", "entry", "task", "mean", "best", "baseline", "gap_reference", "gap_mean", "gap_best"]
    t.data = lb.cells[[c for c in keep if c in lb.cells]]
    sources = [
        f"{r['label']}: {r['gap_reference_name']} {r['gap_reference']:.4g} ({r['gap_reference_source'] or 'no source'})"
        for _, r in tasks.iterrows()
        if pd.notna(r.get("gap_reference", np.nan))
    ]
    t.notes = (["References: " + "; ".join(sources) + "."] if sources else []) + [n for n in [missing_note(tasks)] if n]
    return t
