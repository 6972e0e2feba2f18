"""``bench tasks``: the table's columns line up whatever the tasks' ids and names (the example pack's task id,
``spirals``, is longer than the built-in ``t1``..``t7``; its columns slid right of the header's)."""

from __future__ import annotations

from pathlib import Path

from bench.cli import main
from bench.tasks import all_tasks

PACK = Path(__file__).resolve().parents[2] / "docs" / "example-pack" / "bench_example_pack"


def test_the_columns_line_up_with_a_task_id_longer_than_four_characters(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BENCH_TASKS_PATH", str(PACK))
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    tasks = all_tasks()
    assert max(len(t.id) for t in tasks) > 4  # the case: spirals is among them
    assert main(["tasks"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert len(rows) == len(tasks)
    name_at = header.index("name")
    ends = {word: header.index(word) + len(word) for word in ("budget", "metric", "dir", "split", "baseline")}
    for t, row in zip(tasks, rows, strict=True):
        assert row.startswith(t.id + " ") and row[name_at:].startswith(t.name + " "), (header, row)
        # the right-aligned values end where their header ends
        for word, value in (("budget", " m"), ("metric", t.metric), ("dir", t.direction), ("split", t.eval_split),
                            ("baseline", f"{t.baseline_score:.3f}")):  # fmt: skip
            assert row[: ends[word]].endswith(value), (word, header, row)
