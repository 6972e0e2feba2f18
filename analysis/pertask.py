"""Figures of a campaign's runs drawn task by task: each task its own panel, its own metric and its own budget.

Why per task: scores are not comparable across tasks (bits per byte beside an MSE, opposite directions), and budgets
differ (T6: 5 minutes, T1: 40): one axis for all of them draws a garbled y axis and squashes a 3-minute run onto a
40-minute x axis. Notebook 02 draws these; the report's own figures (:mod:`analysis.figures`) are per task already.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis import published as pub
from analysis.figures import entry_colors
from analysis.leaderboard import Leaderboard
from analysis.runs import RunSet
from bench.tasks.direction import Direction


def _panels(tasks: list[str], width: float = 3.6, height: float = 2.8) -> tuple[Figure, list]:
    ncols = min(len(tasks), 3) or 1
    nrows = math.ceil(len(tasks) / ncols) or 1
    fig = Figure(figsize=(width * ncols, height * nrows + 0.6), layout="constrained")
    return fig, [fig.add_subplot(nrows, ncols, k + 1) for k in range(len(tasks))]


def _ylabel(lb: Leaderboard, task: str) -> str:
    t = lb.tasks.loc[task]
    return f"{Direction.of(bool(t['higher_is_better'])).arrow} {pub.metric_label(t['metric'])}"


def task_budgets(runs: RunSet) -> pd.Series:
    """Each task's budget in minutes: the largest budget of its agent runs (a campaign gives a task one budget)."""
    return runs.agents.groupby("task")["budget_min"].max()


def scores_figure(lb: Leaderboard, runs: RunSet) -> Figure:
    """Each successful run's official score, one panel per task, a column of dots per entry, the task baseline
    dashed."""
    ok = runs.agents[(runs.agents["status"] == "success") & runs.agents["score"].notna()]
    tasks = [t for t in lb.tasks.index if t in set(ok["task"])]
    fig, axes = _panels(tasks)
    colors = entry_colors(runs.agents["entry"])
    for ax, task in zip(axes, tasks, strict=True):
        mine = ok[ok["task"] == task]
        entries = sorted(mine["entry"].unique())
        for i, entry in enumerate(entries):
            dots = mine[mine["entry"] == entry]["score"]
            ax.scatter([i] * len(dots), dots, s=18, color=colors[entry], zorder=3)
        ax.axhline(lb.tasks.loc[task, "baseline"], color="grey", ls="--", lw=0.8)
        ax.set_xticks(range(len(entries)), entries, fontsize=7, rotation=20)
        ax.set_xlim(-0.6, len(entries) - 0.4)
        ax.set_title(f"{lb.tasks.loc[task, 'label']} {lb.tasks.loc[task, 'title']}", fontsize=9)
        ax.set_ylabel(_ylabel(lb, task), fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("official score of each successful run, per task (dashed: the task's baseline)", fontsize=9)
    return fig


def checkpoints_figure(lb: Leaderboard, runs: RunSet, hist: pd.DataFrame) -> Figure:
    """Every checkpoint's self-reported validation score of every script run against minutes into its agent's
    budget, one panel per task on the task's own budget (``hist``: :func:`analysis.runs.metric_history` of the
    script runs, with their ``parent_run_id``)."""
    start = runs.agents.set_index("run_id")["start_time"].astype(float)
    task_of = runs.agents.set_index("run_id")["task"]
    entry_of = runs.agents.set_index("run_id")["entry"]
    h = hist.assign(
        minute=(hist["time"].astype(float) - hist["parent_run_id"].map(start)) / 60.0,
        task=hist["parent_run_id"].map(task_of),
    )
    tasks = [t for t in lb.tasks.index if t in set(h["task"])]
    budgets = task_budgets(runs)
    fig, axes = _panels(tasks)
    colors = entry_colors(runs.agents["entry"])
    for ax, task in zip(axes, tasks, strict=True):
        for (parent, _script), g in h[h["task"] == task].groupby(["parent_run_id", "script"]):
            ax.plot(g["minute"], g["value"], marker="o", ms=3, color=colors[entry_of[parent]], alpha=0.7)
        budget = budgets.get(task, np.nan)
        right = budget if np.isfinite(budget) else h.loc[h["task"] == task, "minute"].max()
        if np.isfinite(budget):
            ax.axvline(budget, color="black", lw=0.6, ls="-.")
        ax.set_xlim(0, right * 1.02 if np.isfinite(right) and right > 0 else 1)
        ax.set_title(f"{lb.tasks.loc[task, 'label']} {lb.tasks.loc[task, 'title']}", fontsize=9)
        ax.set_xlabel("minutes into the budget", fontsize=8)
        ax.set_ylabel(f"self-reported {_ylabel(lb, task)}", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle("every checkpoint of every script run (colour: agent; dash-dot: the budget)", fontsize=9)
    return fig
