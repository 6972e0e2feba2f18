"""Reference points beyond the baseline in task.toml: ``reference_score`` as "paper_reference", ``[[references]]``,
``gap_reference``, and one clear error for each malformed declaration."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from bench.tasks import TaskError, get_task, load_task
from bench.tasks.registry import PAPER_REFERENCE, Reference

ROOT = Path(__file__).resolve().parents[3]


def _task(tmp_path: Path, extra: str, reference: str = "reference_score = 0.375\n") -> Path:
    folder = tmp_path / "t6_copy"
    shutil.copytree(ROOT / "tasks" / "t6_time_series_forecasting", folder, ignore=shutil.ignore_patterns("__pycache__"))
    toml = (folder / "task.toml").read_text()
    head, data = toml.split("[[data]]", 1)
    head = "\n".join(line for line in head.splitlines() if not line.startswith("reference_"))
    (folder / "task.toml").write_text(head + "\n" + reference + extra + "\n[[data]]" + data)
    return folder


def test_the_paper_reference_of_every_built_in_task_carries_its_source():
    t6 = get_task("t6")
    assert t6.reference == Reference(PAPER_REFERENCE, 0.375, t6.reference.source)
    assert "PatchTST/42" in t6.reference.source and t6.reference_score == 0.375
    assert get_task("t3").reference is None and get_task("t3").references == ()  # paper Appendix D: none comparable
    for key in ("t1", "t2", "t4", "t5", "t6", "t7"):
        assert get_task(key).reference.source, key


def test_further_references_follow_the_paper_reference_and_gap_reference_picks_one(tmp_path):
    extra = (
        'gap_reference = "top_human"\n'
        '[[references]]\nname = "top_human"\nscore = 0.36\nsource = "a competition\'s winner"\n'
        '[[references]]\nname = "sota"\nscore = 0.35\nsource = "arXiv:0000.00000"\n'
    )
    task = load_task(_task(tmp_path, extra))
    assert [r.name for r in task.references] == [PAPER_REFERENCE, "top_human", "sota"]
    assert task.reference == Reference("top_human", 0.36, "a competition's winner")
    without = load_task(_task(tmp_path / "b", extra.split("\n", 1)[1]))
    assert without.reference.name == PAPER_REFERENCE  # no gap_reference: the first declared


def test_references_without_reference_score(tmp_path):
    extra = '[[references]]\nname = "sota"\nscore = 0.35\nsource = "x"\n'
    task = load_task(_task(tmp_path, extra, reference=""))
    assert task.reference_score is None and task.reference == Reference("sota", 0.35, "x")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('[[references]]\nname = "sota"\nscore = 0.35\n', "needs source"),
        ('[[references]]\nname = "sota"\nscore = "0.35"\nsource = "x"\n', "must be a finite number"),
        ('[[references]]\nname = "sota"\nscore = nan\nsource = "x"\n', "must be a finite number"),
        ('[[references]]\nname = "so ta"\nscore = 0.3\nsource = "x"\n', "needs name"),
        ('[[references]]\nname = "sota"\nscore = 0.3\nsource = "x"\nurl = "y"\n', "name, score and source only"),
        ('[[references]]\nname = "paper_reference"\nscore = 0.3\nsource = "x"\n', "declared twice"),
        ('gap_reference = "top_human"\n', "names no declared reference (declared: paper_reference)"),
    ],
)
def test_a_malformed_reference_is_one_clear_error(tmp_path, extra, message):
    with pytest.raises(TaskError, match=re.escape(message)):
        load_task(_task(tmp_path, extra))
