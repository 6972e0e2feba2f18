"""bench/rules/labels.py on recorded results: what the audit makes of the scorer's label scan and of a score outside
what the task allows (margins from a task.toml written here, expected verdicts worked out by hand)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.result import Audit, Evaluation, Official, Violation
from bench.rules import labels
from bench.rules.context import Context

TOML = """id = "t9"
direction = "{direction}"
eval_split = "{split}"
reference_score = {reference}

[scoring]
targets = "labels"
test_val_error_ratio = 0.3
reference_margin = 0.05
"""


def _task(tmp_path: Path, direction: str = "max", split: str = "test", reference: float = 0.9) -> Path:
    folder = tmp_path / "t9_toy"
    folder.mkdir(exist_ok=True)
    (folder / "task.toml").write_text(TOML.format(direction=direction, split=split, reference=reference))
    return folder


def _eval(value: float, val: float | None, candidate: str = "best", scan: dict | None = None, path: str = "a.pt"):
    raw = {"value": value, "split": "test", **({"val_value": val} if val is not None else {})}
    if scan is not None:
        raw["label_scan"] = scan
    return Evaluation(
        candidate, f"/run/checkpoints/{path}", "run_1.py", 0.0, "m", None, 0.0, 0, Official(value, None, raw)
    )


def _found(tmp_path: Path, task: Path | None, *evaluations: Evaluation) -> list[Violation]:
    ctx = Context(tmp_path, tmp_path, "t9", (), {}, list(evaluations), 0.0, 60.0, [], [], True, task_dir=task)
    return [v for check in labels.CHECKS for v in check(ctx)]


@pytest.mark.parametrize(
    ("direction", "value", "val", "flagged"),
    [
        ("max", 0.80, 0.78, False),  # test error 0.20 against val error 0.22: ratio 0.91
        ("max", 0.94, 0.78, True),  # 0.06 / 0.22 = 0.27 < 0.3
        ("max", 0.99, 0.70, True),  # 0.01 / 0.30 = 0.033
        ("min", 0.05, 0.60, True),  # MSE 0.05 / 0.60 = 0.083
        ("min", 0.37, 0.65, False),  # the tuned T6 baseline's numbers: 0.57
    ],
)
def test_a_test_error_far_below_the_harness_validation_error_is_flagged(tmp_path, direction, value, val, flagged):
    task = _task(tmp_path, direction, reference=0.999 if direction == "max" else 0.0)  # no reference flag here
    found = _found(tmp_path, task, _eval(value, val))
    gap = [v for v in found if labels.GAP in v.reason]
    assert len(gap) == int(flagged) and len(found) == len(gap), found
    for v in gap:
        assert v.verdict == "flag" and v.rule == 9 and f"test {value:.4g}" in v.reason and f"{val:.4g}" in v.reason


def test_a_val_scored_task_has_no_gap_check(tmp_path):
    task = _task(tmp_path, "max", split="val", reference=0.99)
    assert _found(tmp_path, task, _eval(0.99, 0.2)) == []


@pytest.mark.parametrize(("direction", "reference", "value", "flagged"),
                         [("max", 0.9, 0.951, True), ("max", 0.9, 0.949, False), ("min", 0.375, 0.32, True),
                          ("min", 0.375, 0.33, False)])  # fmt: skip
def test_a_score_beyond_the_reference_by_more_than_the_margin_is_flagged(
    tmp_path, direction, reference, value, flagged
):
    task = _task(tmp_path, direction, reference=reference)
    window = _eval(value, None, candidate="window-1", path="w.pt")
    found = [v for v in _found(tmp_path, task, window) if labels.REFERENCE in v.reason]
    assert bool(found) == flagged
    if flagged:
        assert found[0].verdict == "flag" and f"({reference})" in found[0].reason and f"{value:.4g}" in found[0].reason


def test_found_targets_disqualify_and_a_failed_scan_is_flagged(tmp_path):
    hit = {"where": "checkpoint.pt:archive/data/3 (tensor 'lut')", "encoding": "int64", "order": "evaluation order",
           "windows": 16, "of": 16}  # fmt: skip
    carried = _eval(0.99, 0.99, scan={"found": [hit], "windows": 16})
    broken = _eval(0.5, None, candidate="window-2", path="b.pt", scan={"error": "OSError: gone"})
    clean = _eval(0.5, None, candidate="window-3", path="c.pt", scan={"found": [], "windows": 16})
    found = _found(tmp_path, None, carried, broken, clean)  # no task folder: only the scan's findings
    assert [(v.rule, v.verdict) for v in found] == [(9, "disqualify"), (9, "flag")]
    assert "a.pt carries the evaluation's targets" in found[0].reason and "(tensor 'lut')" in found[0].reason
    assert "16 of 16 windows" in found[0].reason and "b.pt" in found[1].reason and "OSError: gone" in found[1].reason
    other = Violation(9, "a.pt's self-reported validation score 0.9 disagrees with the harness's 0.8", "flag")
    assert labels.score_findings(Audit(violations=(*found, other))) == found


def test_a_task_without_margins_raises_none_and_a_bad_margin_is_named(tmp_path):
    folder = tmp_path / "t9_toy"
    folder.mkdir()
    (folder / "task.toml").write_text('id = "t9"\ndirection = "min"\neval_split = "test"\nreference_score = 1.0\n')
    assert _found(tmp_path, folder, _eval(0.0, 5.0)) == []
    (folder / "task.toml").write_text('id = "t9"\n[scoring]\nreference_margin = "big"\n')
    with pytest.raises(ValueError, match="reference_margin must be a number >= 0"):
        labels.bounds(folder)
