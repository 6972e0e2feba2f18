"""Short runs say they are short, pilots keep their own names (issue 41, item 5).

A ``baseline`` run whose budget, not its own train.py, ended its training (the demo's 8-minute T1 on a slow CPU) is
too short to compare: the record step says so in the run's description and a tag, with the step it reached, and the
leaderboard marks its cell, never ranks the entry nor makes the cell bold. The same run ending by itself is not.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import leaderboard, render, tables
from bench.pipeline import record
from bench.result import RunResult

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "bench" / "fixtures" / "results" / "v3_t6_baseline.json"


def _result(**changes) -> RunResult:
    return dataclasses.replace(RunResult.load(FIXTURE), **changes)


def test_a_baseline_stopped_by_its_budget_is_too_short_with_the_step_it_reached():
    done = _result()  # the fixture: T6's baseline finished its train.py well inside its budget
    assert done.run.agent == "baseline" and not done.timed_out and record.too_short(done) == ""
    base = _result()
    cut = _result(timed_out=True, run=dataclasses.replace(base.run, budget_s=480.0))
    steps = [e.step for e in cut.evaluations]
    why = record.too_short(cut)
    assert f"step {max(steps)}" in why and "8 min budget" in why
    scripts = {"launched": 1, "runs": 1}
    note = record._note(cut, {**scripts, "relay": {}}, [])
    assert f"**Too short to compare**: {why}" in note and "1 script launched" in note and "\\" not in note
    llm = dataclasses.replace(cut, run=dataclasses.replace(cut.run, agent="claude-code"))
    assert record.too_short(llm) == ""  # an LLM agent stopped at its budget is the protocol, not a short run


def _runs(short: str) -> pd.DataFrame:
    rows = [
        {"run_id": f"{e}-{t}", "experiment": "demo", "agent": e, "model": "", "task": t, "repeat": 1,
         "status": "success", "score": s, "higher_is_better": np.nan, "budget_min": 40.0, "wall_time_s": 600.0,
         "budget_utilisation": 0.5, "scripts_launched": 1.0, "synthetic": False, "metric": "", "tokens_input": np.nan,
         "tokens_output": np.nan, "tokens_cached": np.nan, "cost_usd": np.nan, "nonstandard": False, "deviations": "",
         "deviation_notes": "", "hardware": "", "too_short": short if (e, t) == ("baseline", "t1") else ""}
        for e, t, s in (("baseline", "t1", 3.0), ("baseline", "t6", 0.378), ("other", "t1", 3.3), ("other", "t6", 0.39))
    ]  # fmt: skip
    return pd.DataFrame(rows)


def test_the_leaderboard_marks_a_too_short_cell_and_never_ranks_its_entry():
    why = "the 8 min budget ended the baseline's own training at step 40"
    lb = leaderboard.build(_runs(why), registry=False)
    s = lb.summary.set_index("entry")
    assert bool(s.loc["baseline", "too_short"]) and pd.isna(s.loc["baseline", "rank"])
    assert s.loc["other", "rank"] == 1  # the other entry, although its Agg is lower
    md = render.to_markdown(tables.table4(lb))
    assert "(too short)" in md and "**3.0000" not in md  # its T1 cell (the best score) is not bold
    text = leaderboard.short_text(_runs(why), {"t1": 3.438, "t6": 0.384})
    assert "baseline (too short)" in text and f"t1: too short to compare: {why}" in text

    plain = leaderboard.build(_runs(""), registry=False).summary.set_index("entry")
    assert plain.loc["baseline", "rank"] == 1 and not plain.loc["baseline", "too_short"]
