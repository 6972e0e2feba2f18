"""What ``bench report`` and the notebooks read of a campaign, as DataFrames, for comparing two stores.

Used by the bundle tests (an export imported elsewhere must read the same): the report's tables (their tidy data),
the leaderboard's cells, the runs (agent, script, eval) and the curves, each without the columns that name a run by
its store's id or its run folder's place, rows in a set order (the loader sorts children by their parent's id).
"""

from __future__ import annotations

import pandas as pd


def report_frames(campaign: str) -> dict[str, pd.DataFrame]:
    from analysis import curves, gap, tables
    from analysis.leaderboard import build
    from analysis.runs import load

    rs = load([campaign])
    lb = build(rs)
    out = {
        t.name: t.data
        for t in (tables.leaderboard_table(lb), tables.table4(lb), tables.table5(lb), tables.table6(lb))
        + (tables.table8(lb), gap.gap_table(lb))
    }
    out |= {"cells": lb.cells, "agents": rs.agents, "scripts": rs.scripts, "evals": rs.evals}
    out |= {"timeline": curves.timeline(rs), "anytime": curves.anytime(rs, lb.tasks)}
    return {name: _comparable(df) for name, df in out.items()}


def _comparable(df: pd.DataFrame) -> pd.DataFrame:
    ids = [c for c in df.columns if "run_id" in str(c) or "workspace" in str(c) or "experiment_id" in str(c)]
    df = df.drop(columns=ids).reset_index(drop=True)
    order = sorted(range(len(df)), key=lambda i: tuple(map(str, df.iloc[i].tolist())))
    return df.iloc[order].reset_index(drop=True)


def assert_same(a: dict[str, pd.DataFrame], b: dict[str, pd.DataFrame]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert not a[name].empty or name in ("gap",), name  # a comparison of nothing proves nothing
        pd.testing.assert_frame_equal(a[name], b[name], obj=name)
