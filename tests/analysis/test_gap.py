"""MLRC-Bench's gap closed beside Eq. 1 (analysis/gap.py): the measure, the leaderboard's columns, the summary run's
metrics, the report's table and its note on tasks without a reference.

Expected values are worked out by hand from the seven task.toml files (T6: baseline 0.384, reference 0.375, lower is
better; T5: baseline 0.806, reference 0.969; T3: no reference), never by calling the code under test.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis import gap, leaderboard, render, summary
from bench.tasks.direction import Direction
from bench.tracking import schema


@pytest.mark.parametrize(
    ("score", "baseline", "reference", "direction", "expected"),
    [
        (0.380, 0.384, 0.375, Direction.MIN, 4 / 9),  # T6: 0.004 of the 0.009 between DLinear and PatchTST
        (0.375, 0.384, 0.375, Direction.MIN, 1.0),  # the reference itself
        (0.384, 0.384, 0.375, Direction.MIN, 0.0),  # the baseline itself
        (0.366, 0.384, 0.375, Direction.MIN, 2.0),  # twice as far as the reference
        (0.393, 0.384, 0.375, Direction.MIN, -1.0),  # worse than the baseline by one gap
        (0.8875, 0.806, 0.969, Direction.MAX, 0.5),  # T5: half of 0.163
        (0.806, 0.806, 0.969, Direction.MAX, 0.0),
    ],
)
def test_gap_closed_by_hand(score, baseline, reference, direction, expected):
    assert gap.gap_closed(score, baseline, reference, direction) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("baseline", "reference", "direction"),
    [
        (0.384, 0.384, Direction.MIN),  # no gap to close
        (0.384, 0.390, Direction.MIN),  # a "reference" worse than the baseline: undefined, not a flipped sign
        (0.806, 0.700, Direction.MAX),
        (0.806, math.nan, Direction.MAX),  # no reference
    ],
)
def test_gap_closed_is_undefined_without_a_better_reference(baseline, reference, direction):
    assert math.isnan(gap.gap_closed(0.5, baseline, reference, direction))


def test_gap_column_follows_each_rows_direction():
    out = gap.gap_column([0.380, 0.8875, 0.7], [0.384, 0.806, 0.660], [0.375, 0.969, np.nan], [False, True, True])
    assert out[:2] == pytest.approx([4 / 9, 0.5]) and np.isnan(out[2])


def _runs(scores: dict[str, list[float]]) -> pd.DataFrame:
    """Hand-made successful runs of one offline agent (the baseline agent), ``scores[t]`` on task t."""
    rows = [
        {"run_id": f"r-{t}-{i}", "experiment": "gap-test", "agent": "baseline", "model": "", "task": t,
         "repeat": i + 1, "status": "success", "score": s, "higher_is_better": np.nan, "budget_min": 40.0,
         "wall_time_s": 600.0, "budget_utilisation": 0.25, "scripts_launched": 1.0, "synthetic": False, "metric": "",
         "tokens_input": np.nan, "tokens_output": np.nan, "tokens_cached": np.nan, "cost_usd": np.nan,
         "nonstandard": False, "deviations": "", "deviation_notes": "", "hardware": ""}
        for t, values in scores.items() for i, s in enumerate(values)
    ]  # fmt: skip
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def board() -> leaderboard.Leaderboard:
    # T6 mean 0.381 -> 0.003 / 0.009 = 1/3, best 0.380 -> 4/9; T5 0.8875 -> 1/2; T3 has no reference
    return leaderboard.build(_runs({"t6": [0.380, 0.382], "t5": [0.8875], "t3": [0.70]}))


def test_the_leaderboard_carries_the_gap_closed_beside_eq1(board):
    cells = board.cells.set_index("task")
    assert cells.loc["t6", "gap_mean"] == pytest.approx(1 / 3) and cells.loc["t6", "gap_best"] == pytest.approx(4 / 9)
    assert cells.loc["t5", "gap_mean"] == pytest.approx(0.5) and cells.loc["t5", "gap_reference"] == 0.969
    assert np.isnan(cells.loc["t3", "gap_mean"])
    assert cells.loc["t6", "rel_mean"] == pytest.approx((0.384 - 0.381) / 0.384)  # Eq. 1 still there
    row = board.summary.iloc[0]
    assert row["gap"] == pytest.approx((1 / 3 + 1 / 2) / 2)  # over the two tasks with a reference
    assert row["gap_max"] == pytest.approx((4 / 9 + 1 / 2) / 2)
    assert (row["gap_tasks"], row["gap_of_tasks"]) == (2, 2)


def test_tasks_without_a_reference_are_named(board):
    assert gap.without_reference(board.tasks) == ["t3"]
    note = gap.missing_note(board.tasks)
    assert "no reference for T3" in note and "[[references]]" in note


def test_the_summary_run_logs_the_gap_closed(board):
    metrics = summary.entry_metrics(board, "gap-test", "baseline")
    assert metrics[schema.SUMMARY_GAP] == pytest.approx(5 / 12)
    assert metrics[schema.SUMMARY_GAP_MAX] == pytest.approx(17 / 36)
    assert metrics[schema.SUMMARY_GAP_TASKS] == 2
    assert metrics[schema.summary_task_metric("t6", schema.SUMMARY_GAP_MEAN)] == pytest.approx(1 / 3)
    assert schema.summary_task_metric("t3", schema.SUMMARY_GAP_MEAN) not in metrics  # undefined: not logged


def test_the_gap_table_shows_each_task_and_its_reference(board):
    table = gap.gap_table(board)
    md = render.to_markdown(table)
    assert "+0.333" in md and "+0.500" in md and "+0.417" in md and "+0.472" in md
    assert "PatchTST/42" in md and "no reference for T3" in md
    assert table.data.set_index("task").loc["t6", "gap_mean"] == pytest.approx(1 / 3)


def test_the_mlflow_comparison_view_shows_the_gap_closed():
    from bench.tracking import views

    assert "metrics.`gap_closed`" in views.compare_columns() and "metrics.`gap_closed_max`" in views.compare_columns()
    assert "metrics.`gap_closed`" in views.selected_columns(summaries=True)
