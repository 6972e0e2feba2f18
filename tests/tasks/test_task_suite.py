"""The seven tasks as a suite: faithful to the paper's Table 2, one shared helper file, listed by `bench tasks`.

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
HELPERS = ROOT / "tasks" / "task_helpers.py"


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


def test_every_task_locks_the_one_shared_helper_file():
    """save_checkpoint/log_metrics are the output contract: one text, tasks/task_helpers.py, so a fix lands in every
    task. Each task folder holds it as a link to that file (a workspace and the evaluation get a locked copy of its
    content), and its prepare.py imports the helpers from it instead of holding a copy."""
    helpers = HELPERS.read_bytes()
    for t in all_tasks():
        assert "task_helpers.py" in t.locked_files, f"{t.name}/task.toml: task_helpers.py is not in extra_locked"
        assert t.file("task_helpers.py").resolve() == HELPERS.resolve(), f"{t.name}/task_helpers.py is not the link"
        assert t.file("task_helpers.py").read_bytes() == helpers
        prepare = t.file("prepare.py").read_text(encoding="utf-8")
        assert "from task_helpers import" in prepare, f"{t.name}/prepare.py does not import the shared helpers"
        copies = [f"def {name}(" for name in ("_trace", "log_metrics", "load_checkpoint", "rebuild_model")]
        assert not [c for c in copies if c in prepare], f"{t.name}/prepare.py holds a copy of the shared helpers"


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
