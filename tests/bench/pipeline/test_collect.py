"""Collection: scored checkpoints -> overall best + best of each 5-minute window."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from bench.evidence import Arrival
from bench.pipeline.arrivals import Arrivals, checkpoint_files, identify
from bench.pipeline.collect import Checkpoint, NotACheckpoint, scan, select, verify_copy
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


def _save(
    path: Path, score: float, metric: str = "mse", mtime: float | None = None, saved: float | None = None
) -> None:
    torch.save(
        {
            "format": "1gc-7rc/checkpoint-v1",
            "state_dict": {"w": torch.zeros(2)},
            "config": {"d": 2},
            "script": "run_1.py",
            "val_score": score,
            "metric": metric,
            "step": 1,
            "time": saved if saved is not None else mtime if mtime is not None else time.time(),
        },
        path,
    )
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def _seen(path: Path, at: float) -> Arrival:
    """``path`` as the harness would have recorded it at ``at``: its current content, first seen then."""
    return Arrival(first_seen=at, at=at, identity=identify(path))


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


def test_the_harness_clock_places_checkpoints_not_their_mtime_and_copies_are_rejected(tmp_path):
    start = 1_000_000.0
    _save(tmp_path / "future_mtime.pt", 0.2, mtime=start + 4000)  # touch -d '+1 hour': neither late nor window 13
    _save(tmp_path / "copied_in.pt", 0.01, mtime=start + 10, saved=start - 3600)  # cp from an earlier run
    _save(tmp_path / "back_dated.pt", 0.02, mtime=start - 3600, saved=start + 10)  # touch -d '1 hour ago'
    _save(tmp_path / "unseen.pt", 0.03, mtime=start + 20)  # never listed while the run went on
    seen = {tmp_path / n: _seen(tmp_path / n, start + 30) for n in ("future_mtime.pt", "copied_in.pt", "back_dated.pt")}
    found, rejected = scan(tmp_path, started_at=start, metric="mse", deadline_s=1000, arrivals=seen)
    assert [(c.path.name, c.saved_s, c.window) for c in found] == [("future_mtime.pt", 30.0, 0)]
    reasons = {r.path.name: r.reason for r in rejected}
    assert reasons == {
        "copied_in.pt": "saved 3600 s before the run started (its own time): copied in",
        "back_dated.pt": "modified 3600 s before the run started: copied in or back-dated",
        "unseen.pt": "not seen in checkpoints/ while the run was going on",
    }


def test_arrivals_notes_first_sight_and_takes_a_last_look_when_stopped(tmp_path):
    (tmp_path / "before.pt").write_bytes(b"x")
    t0 = time.time()
    arrivals = Arrivals(tmp_path, interval=0.05).start()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "during.pt").write_bytes(b"y")
    deadline = time.time() + 30
    while tmp_path / "sub" / "during.pt" not in arrivals.seen and time.time() < deadline:
        time.sleep(0.05)
    first = arrivals.seen[tmp_path / "sub" / "during.pt"]
    os.utime(tmp_path / "sub" / "during.pt", (t0 - 3600, t0 - 3600))  # a later touch changes nothing
    arrivals.interval = 3600  # no more polls: only stop()'s last look can see the next file
    time.sleep(0.2)
    (tmp_path / "last.pt").write_bytes(b"z")
    arrivals.stop()
    seen = arrivals.seen
    assert set(seen) == {tmp_path / "before.pt", tmp_path / "sub" / "during.pt", tmp_path / "last.pt"}
    assert t0 <= seen[tmp_path / "before.pt"] <= first <= seen[tmp_path / "last.pt"] <= time.time()
    assert seen[tmp_path / "sub" / "during.pt"] == first


def test_a_checkpoint_may_name_only_a_workspace_script_that_ran(tmp_path):
    start = time.time() - 10
    for name, script in (
        ("ran.pt", "run_1.py"),
        ("up.pt", "../evil.py"),
        ("abs.pt", "/tmp/evil.py"),
        ("no.pt", "run_9.py"),
    ):
        _save(tmp_path / name, 0.3)
        payload = torch.load(tmp_path / name, weights_only=True)
        torch.save({**payload, "script": script}, tmp_path / name)
    found, rejected = scan(tmp_path, started_at=start, metric="mse", scripts={"run_1.py", "train.py"})
    assert [c.path.name for c in found] == ["ran.pt"]
    assert {r.path.name: r.reason for r in rejected} == {
        "up.pt": "names the script '../evil.py', not a workspace script that ran",
        "abs.pt": "names the script '/tmp/evil.py', not a workspace script that ran",
        "no.pt": "names the script 'run_9.py', not a workspace script that ran",
    }


def test_an_overwritten_checkpoint_is_placed_at_its_new_content_not_its_first_sight(tmp_path):
    """The time travel attack: a placeholder at 3 s, the minute-6 model written over it. Window 1, at 361 s."""
    start = time.time() - 400
    path = tmp_path / "early.pt"
    path.write_bytes(b"placeholder")
    placeholder = _seen(path, start + 3)
    _save(path, 0.1, mtime=start + 3)  # rewritten in place, its mtime put back
    arrival = Arrival(first_seen=placeholder.first_seen, at=start + 361, identity=identify(path), changes=1)
    _save(tmp_path / "honest.pt", 0.2, mtime=start + 200)
    arrivals = {path: arrival, tmp_path / "honest.pt": _seen(tmp_path / "honest.pt", start + 200)}
    found, rejected = scan(tmp_path, started_at=start, metric="mse", deadline_s=600, arrivals=arrivals)
    assert rejected == []
    early = next(c for c in found if c.path == path)
    assert (early.saved_s, early.window, early.first_seen_s) == (361.0, 1, 3.0)
    assert early.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert next(c for c in found if c.path.name == "honest.pt").first_seen_s is None  # never changed
    sel = select(found, Direction.MIN)
    assert sel.best.path == path and sel.best.saved_s == 361.0
    assert {k: c.path.name for k, c in sel.windows.items()} == {0: "honest.pt", 1: "early.pt"}


def test_bytes_that_are_not_the_last_recorded_content_are_rejected_and_a_touch_is_not_a_change(tmp_path):
    start = time.time() - 100
    _save(tmp_path / "after_last_look.pt", 0.1, mtime=start + 10)
    _save(tmp_path / "touched.pt", 0.2, mtime=start + 10)
    arrivals = {tmp_path / n: _seen(tmp_path / n, start + 20) for n in ("after_last_look.pt", "touched.pt")}
    _save(tmp_path / "after_last_look.pt", 0.01, mtime=start + 10)  # written after the harness's last look
    os.utime(tmp_path / "touched.pt", (start + 50, start + 50))  # the same bytes: the stat moved, not the content
    (tmp_path / "link.pt").symlink_to(tmp_path / "touched.pt")
    found, rejected = scan(tmp_path, started_at=start, metric="mse", deadline_s=600, arrivals={
        **arrivals, tmp_path / "link.pt": arrivals[tmp_path / "touched.pt"]})  # fmt: skip
    assert [(c.path.name, c.saved_s) for c in found] == [("touched.pt", pytest.approx(20.0))]
    reasons = {r.path.name: r.reason for r in rejected}
    assert reasons["link.pt"] == "a symbolic link, not a checkpoint file"
    assert reasons["after_last_look.pt"].startswith("its bytes are not the ones the harness timed (sha256 ")
    assert reasons["after_last_look.pt"].endswith(
        "now): written after the harness's last look, or without moving its stat"
    )


def test_an_unmoved_stat_does_not_vouch_for_the_bytes(tmp_path):
    """Bytes rewritten through a shared mapping move no time until written back: the hash decides, not the stat."""
    start = time.time() - 100
    path = tmp_path / "mapped.pt"
    _save(path, 0.1, mtime=start + 10)
    recorded = _seen(path, start + 20)
    other = replace(recorded.identity, sha256=hashlib.sha256(b"the bytes the harness saw").hexdigest())
    assert other.same_stat(os.lstat(path))  # to the polls, nothing happened
    found, rejected = scan(tmp_path, started_at=start, metric="mse", arrivals={path: replace(recorded, identity=other)})
    assert found == [] and "its bytes are not the ones the harness timed" in rejected[0].reason


def test_the_staged_copy_must_be_the_content_that_was_timed(tmp_path):
    path = tmp_path / "a.pt"
    _save(path, 0.3)
    found, _ = scan(tmp_path, started_at=time.time() - 10, metric="mse", arrivals={path: _seen(path, time.time())})
    ckpt = found[0]
    copy = tmp_path / "staged.pt"
    shutil.copyfile(path, copy)
    assert verify_copy(ckpt, copy) == hashlib.sha256(path.read_bytes()).hexdigest()
    copy.write_bytes(copy.read_bytes()[:-1] + b"!")
    with pytest.raises(NotACheckpoint, match="is not the content the harness timed"):
        verify_copy(ckpt, copy)


def test_checkpoints_nested_past_the_recursion_limit_a_fifo_and_a_link_are_listed_without_harm(tmp_path):
    """What the agent makes under checkpoints/ is listed by the bounded, link-free walk of bench.untrusted, in the
    harness's per-second look and in collect alike: a folder nested 1,100 deep (os.walk and rglob recurse: a
    RecursionError once ended the run unrecorded), a FIFO (opening it would block) and a link are named, not
    followed, and the honest checkpoint beside them is collected."""
    start = time.time() - 5
    _save(tmp_path / "ok.pt", 0.4)
    os.mkfifo(tmp_path / "pipe.pt")
    (tmp_path / "link.pt").symlink_to(tmp_path / "ok.pt")
    fd = os.open(tmp_path, os.O_RDONLY)
    for _ in range(1_100):  # made through fds: Path.mkdir(parents=True) recurses too
        os.mkdir("d", dir_fd=fd)
        fd, parent = os.open("d", os.O_RDONLY, dir_fd=fd), fd
        os.close(parent)
    os.close(fd)
    try:
        assert [p.name for p, _ in checkpoint_files(tmp_path)] == ["ok.pt"]  # within the walk's depth bound
        seen = {tmp_path / "ok.pt": _seen(tmp_path / "ok.pt", start + 1)}
        found, rejected = scan(tmp_path, started_at=start, metric="mse", arrivals=seen)
        assert [c.path.name for c in found] == ["ok.pt"]
        reasons = {Path(r.path).name: r.reason for r in rejected}
        assert reasons["link.pt"] == "a symbolic link, not a checkpoint file"
        assert "not-regular" in reasons["pipe.pt"] and any("too-deep" in r for r in reasons.values()), reasons
    finally:  # shutil.rmtree (and pytest's own clean-up) recurse too
        subprocess.run(["rm", "-rf", str(tmp_path / "d")], check=True)
