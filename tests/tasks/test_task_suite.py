"""The seven tasks as a suite: faithful to the paper's Table 2, one shared helper block, listed by `bench tasks`.

What each task folder promises on its own (output contract, --eval, its command line) is in test_conformance.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from bench.cli import main
from bench.tasks import all_tasks

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = pd.read_csv(ROOT / "analysis" / "data" / "published" / "tasks.csv")
BLOCK = re.compile(r"^# fmt: off\n(.*?)^# fmt: on\n", re.S | re.M)


def _block(path: Path) -> str:
    found = BLOCK.findall(path.read_text(encoding="utf-8"))
    assert len(found) == 1, f"{path}: expected exactly one '# fmt: off' ... '# fmt: on' helper block"
    return found[0]


def test_all_seven_tasks_match_table_2():
    tasks = {t.id: t for t in all_tasks()}
    assert sorted(tasks) == [f"t{i}" for i in range(1, 8)]
    for row in PUBLISHED.itertuples():
        t = tasks[row.task.lower()]
        assert t.name == f"{row.task.lower()}_{row.name}"
        assert (t.budget_minutes, t.metric, t.baseline_score) == (row.budget_min, row.metric, row.baseline_score)
        assert t.direction == {"lower": "min", "higher": "max"}[row.direction]
        if not pd.isna(row.reference_score):
            assert t.reference_score == pytest.approx(row.reference_score)
        assert t.data, f"{t.id} declares no data source"


def test_every_prepare_py_shares_the_helper_block_verbatim():
    """save_checkpoint/log_metrics are the output contract: one text, so a fix lands in every task."""
    reference = _block(ROOT / "tasks" / "t6_time_series_forecasting" / "prepare.py")
    for t in all_tasks():
        assert _block(t.file("prepare.py")) == reference, f"{t.name}/prepare.py: the helper block differs from T6's"


def test_bench_tasks_lists_budget_metric_direction_and_data_status(capsys):
    assert main(["tasks"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line for line in lines[1:]}
    assert sorted(rows) == [f"t{i}" for i in range(1, 8)]
    for t in all_tasks():
        line = rows[t.id]
        assert f"{t.budget_minutes:g} m" in line and t.metric in line and f" {t.direction} " in line
        assert re.search(r"\s(prepared|raw|missing)", line)
    assert "weights 0/2 installed" in rows["t3"]
