"""Within-budget views of each agent run: anytime curves and script timelines.

The paper reports one number per run; the harness records how the run got there. Two anytime curves
per run, both as "score vs minutes into the budget":

- official: the score the harness would have submitted had the budget ended at minute m, i.e. the
  official score of the best-by-validation checkpoint saved by m. It is exact at the granularity of the
  5-minute windows, because the harness officially evaluates the best checkpoint of every window (the
  eval child runs, with the minute each checkpoint was saved);
- self-reported: the best validation score the agent's scripts had reported by minute m (every
  checkpoint of every script run, from the child runs' ``schema.CHECKPOINT_SCORE`` history).

"Best" is :class:`bench.tasks.Direction`'s: scores are multiplied by the task's sign, and a checkpoint
takes over only when it strictly beats the best before it (ties keep the earlier one, as the harness does).

The timeline puts each script run of an agent run on the budget's time axis, in lanes when scripts ran
in parallel, coloured by how it ended.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.leaderboard import higher_is_better
from analysis.runs import RunSet, metric_history
from bench.tasks.direction import signs
from bench.tracking import schema

CURVE_COLUMNS = ["run_id", "experiment", "entry", "task", "repeat", "minute", "score", "curve"]


def _agent_info(rs: RunSet, tasks: pd.DataFrame) -> pd.DataFrame:
    a = rs.agents.set_index("run_id")
    info = a[["experiment", "entry", "task", "repeat", "start_time", "wall_time_s", "budget_min"]].copy()
    info["sign"] = signs(higher_is_better(a, tasks))  # sign * score grows with quality
    info["end_min"] = np.minimum(info["wall_time_s"] / 60.0, info["budget_min"].fillna(np.inf))
    return info


def _running_best(df: pd.DataFrame, key: str, value: str, carry: str) -> pd.DataFrame:
    """Per ``key``, in time order: the value of ``carry`` at the running best of the signed ``value``.

    A value takes over only when it strictly beats the best before it, and NaN never does: the rule of
    :meth:`Direction.better <bench.tasks.Direction.better>`, so that on a tie the earlier checkpoint stays
    the best, as in the harness's selection (:func:`bench.pipeline.collect.select`).
    """
    df = df.sort_values([key, "minute"], kind="stable").copy()
    by = df[key]
    best = df.groupby(key, sort=False)[value].cummax().groupby(by, sort=False).ffill()
    before = best.groupby(by, sort=False).shift()  # the best strictly before each row (NaN: none yet)
    new_best = df[value].notna() & (before.isna() | (df[value] > before))
    df["out"] = df[carry].where(new_best)
    df["out"] = df.groupby(key, sort=False)["out"].ffill()
    return df


def official_anytime(rs: RunSet, tasks: pd.DataFrame) -> pd.DataFrame:
    """Official score of what would have been submitted at each minute (from the eval child runs)."""
    if rs.evals.empty or rs.agents.empty:
        return pd.DataFrame(columns=CURVE_COLUMNS)
    info = _agent_info(rs, tasks)
    e = rs.evals[rs.evals["official_score"].notna() & rs.evals["saved_minutes"].notna()]
    e = e[e["parent_run_id"].isin(info.index)].copy()
    if e.empty:
        return pd.DataFrame(columns=CURVE_COLUMNS)
    e["minute"] = e["saved_minutes"].astype(float)
    e["signed_val"] = e["val_score"].astype(float) * e["parent_run_id"].map(info["sign"])
    e = _running_best(e, "parent_run_id", "signed_val", "official_score")
    out = pd.DataFrame({"run_id": e["parent_run_id"], "minute": e["minute"], "score": e["out"]})
    last = out.groupby("run_id").tail(1).copy()  # hold the last value to the end of the run
    last["minute"] = np.maximum(last["run_id"].map(info["end_min"]).fillna(last["minute"]), last["minute"])
    out = pd.concat([out, last], ignore_index=True)
    return _decorate(out, info, "official")


def selfreported_anytime(rs: RunSet, tasks: pd.DataFrame, history: pd.DataFrame | None = None) -> pd.DataFrame:
    """Best self-reported validation score so far, over all the run's scripts (from child-run metrics)."""
    if rs.scripts.empty or rs.agents.empty:
        return pd.DataFrame(columns=CURVE_COLUMNS)
    info = _agent_info(rs, tasks)
    h = metric_history(rs.scripts["run_id"], schema.CHECKPOINT_SCORE) if history is None else history
    if h.empty:
        return pd.DataFrame(columns=CURVE_COLUMNS)
    h = h.merge(rs.scripts[["run_id", "parent_run_id"]], on="run_id")
    h = h[h["parent_run_id"].isin(info.index)].copy()
    h["minute"] = (h["time"] - h["parent_run_id"].map(info["start_time"])) / 60.0
    h["signed"] = h["value"] * h["parent_run_id"].map(info["sign"])
    h = _running_best(h, "parent_run_id", "signed", "value")
    return _decorate(
        pd.DataFrame({"run_id": h["parent_run_id"], "minute": h["minute"], "score": h["out"]}), info, "self-reported"
    )


def _decorate(curve: pd.DataFrame, info: pd.DataFrame, name: str) -> pd.DataFrame:
    for col in ("experiment", "entry", "task", "repeat"):
        curve[col] = curve["run_id"].map(info[col])
    curve["curve"] = name
    return curve.sort_values(["run_id", "minute"], kind="stable").reset_index(drop=True)[CURVE_COLUMNS]


def anytime(rs: RunSet, tasks: pd.DataFrame, history: pd.DataFrame | None = None) -> pd.DataFrame:
    """Both curves of every run, long form (``curve`` says which)."""
    parts = [official_anytime(rs, tasks), selfreported_anytime(rs, tasks, history)]
    parts = [p for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=CURVE_COLUMNS)


def _lanes(starts: np.ndarray, ends: np.ndarray) -> list[int]:
    """Greedy interval partitioning: the lane of each script so that parallel scripts do not overlap."""
    lane_end: list[float] = []
    lanes = []
    for s, e in zip(starts, ends, strict=True):
        for i, end in enumerate(lane_end):
            if s >= end:
                lane_end[i] = e
                lanes.append(i)
                break
        else:
            lane_end.append(e)
            lanes.append(len(lane_end) - 1)
    return lanes


def timeline(rs: RunSet) -> pd.DataFrame:
    """One row per script run: entry, task, repeat, script, exit, start and end (minutes into the budget), lane."""
    cols = [
        "run_id",
        "parent_run_id",
        "experiment",
        "entry",
        "task",
        "repeat",
        "script",
        "exit",
        "start_min",
        "end_min",
        "lane",
        "lanes",
        "budget_min",
        "agent_end_min",
    ]
    if rs.scripts.empty or rs.agents.empty:
        return pd.DataFrame(columns=cols)
    a = rs.agents.set_index("run_id")
    s = rs.scripts[rs.scripts["parent_run_id"].isin(a.index)].copy()
    s["entry"] = s["parent_run_id"].map(a["entry"])
    s["budget_min"] = s["parent_run_id"].map(a["budget_min"])
    s["agent_end_min"] = s["parent_run_id"].map(a["wall_time_s"]) / 60.0
    s["start_min"] = s["start_min"].clip(lower=0).fillna(0.0)
    s["end_min"] = s["end_min"].fillna(s["agent_end_min"]).clip(lower=s["start_min"])
    s = s.sort_values(["parent_run_id", "start_min"], kind="stable")
    s["lane"] = 0
    for _, g in s.groupby("parent_run_id", sort=False):
        s.loc[g.index, "lane"] = _lanes(g["start_min"].to_numpy(), g["end_min"].to_numpy())
    s["lanes"] = s.groupby("parent_run_id")["lane"].transform("max") + 1
    return s.reset_index(drop=True)[cols]
