"""Collection: scored checkpoints -> overall best + best of each 5-minute window."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from bench.pipeline.collect import Checkpoint, scan, select
from bench.tasks import Direction


def ck(name: str, score: float, minute: float) -> Checkpoint:
    return Checkpoint(path=Path(name), script="run_1.py", val_score=score, metric="mse", step=None, saved_s=minute * 60)


def test_best_overall_and_best_per_five_minute_window_lower_is_better():
    cks = [
        ck("a", 0.50, 1),
        ck("b", 0.45, 4.9),
        ck("c", 0.47, 5.0),
        ck("d", 0.40, 9.5),
        ck("e", 0.41, 12),
        ck("f", 0.39, 14.99),
    ]
    sel = select(cks, Direction.MIN)
    assert sel.best.path.name == "f"
    assert {k: c.path.name for k, c in sel.windows.items()} == {0: "b", 1: "d", 2: "f"}
    labels = [label for label, _ in sel.candidates()]
    assert labels == ["best", "window-0", "window-1", "window-2"]


def test_higher_is_better_and_ties_go_to_the_earlier_checkpoint():
    cks = [ck("late", 0.8, 3), ck("early", 0.8, 1), ck("low", 0.2, 2), ck("w3", 0.6, 16)]
    sel = select(cks, Direction.MAX)
    assert sel.best.path.name == "early"
    assert sel.windows[0].path.name == "early" and sel.windows[3].path.name == "w3"
    assert 1 not in sel.windows and 2 not in sel.windows


def test_no_checkpoints_selects_nothing():
    sel = select([], Direction.MAX)
    assert sel.best is None and sel.candidates() == []


def _save(path: Path, score: float, metric: str = "mse", mtime: float | None = None) -> None:
    torch.save(
        {
            "format": "1gc-7rc/checkpoint-v1",
            "state_dict": {"w": torch.zeros(2)},
            "config": {"d": 2},
            "script": "run_1.py",
            "val_score": score,
            "metric": metric,
            "step": 1,
            "time": 0.0,
        },
        path,
    )
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def test_scan_reads_metadata_times_files_and_rejects_malformed_ones(tmp_path):
    start = 1_000_000.0
    _save(tmp_path / "ok1.pt", 0.4, mtime=start + 30)
    _save(tmp_path / "ok2.pt", 0.3, mtime=start + 400)
    _save(tmp_path / "other_metric.pt", 0.1, metric="mae", mtime=start + 10)
    _save(tmp_path / "too_late.pt", 0.01, mtime=start + 5000)
    _save(tmp_path / "nan.pt", float("nan"), mtime=start + 10)
    (tmp_path / "garbage.pt").write_bytes(b"not a checkpoint")
    torch.save({"weights": 1}, tmp_path / "no_config.pt")
    (tmp_path / "half.pt.tmp").write_bytes(b"partial")  # an in-progress save is not looked at
    found, rejected = scan(tmp_path, started_at=start, metric="mse", deadline_s=1000)
    assert sorted(c.path.name for c in found) == ["ok1.pt", "ok2.pt"]
    assert {c.path.name: c.window for c in found} == {"ok1.pt": 0, "ok2.pt": 1}
    reasons = {r.path.name: r.reason for r in rejected}
    assert set(reasons) == {"other_metric.pt", "too_late.pt", "nan.pt", "garbage.pt", "no_config.pt"}
    assert "deadline" in reasons["too_late.pt"] and "mae" in reasons["other_metric.pt"]
