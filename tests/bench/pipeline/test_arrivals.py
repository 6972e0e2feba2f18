"""Checkpoint identities (issue 21): the harness times a checkpoint's content, not its name.

Each look records a file's identity (size, inode, mtime, ctime, sha256) when it first sees it and again when its
content changes; a file whose ``stat`` did not move is not read again. The records go to the evidence line by line
and come back the same on resume; the audit flags an overwrite with both times (rule 6).
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.evidence import UNTIMED, Arrival, Evidence, Identity
from bench.pipeline import arrivals as arrivals_mod
from bench.pipeline.arrivals import Arrivals, identify, look
from bench.rules.conduct import within_budget
from bench.rules.context import Context


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _counting(monkeypatch) -> list[Path]:
    """Record every file the harness hashes (to check that unchanged files are not read again)."""
    hashed: list[Path] = []
    real = arrivals_mod.sha256

    def counted(path):
        hashed.append(Path(path))
        return real(path)

    monkeypatch.setattr(arrivals_mod, "sha256", counted)
    return hashed


def test_first_sight_records_the_identity_and_an_unchanged_file_is_not_read_again(tmp_path, monkeypatch):
    hashed = _counting(monkeypatch)
    for i in range(50):
        (tmp_path / f"c{i}.pt").write_bytes(b"x" * i)
    files: dict[Path, Arrival] = {}
    before = time.time()
    look(tmp_path, files)
    a = files[tmp_path / "c7.pt"]
    st = os.stat(tmp_path / "c7.pt")
    assert a.identity == Identity(7, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, _sha(b"x" * 7))
    assert before <= a.first_seen == a.at <= time.time() and a.changes == 0
    assert len(hashed) == 50
    look(tmp_path, files)
    look(tmp_path, files)
    assert len(hashed) == 50  # nothing moved: a stat each, no read


def test_an_in_place_rewrite_with_the_same_size_and_mtime_is_a_change_placed_when_seen(tmp_path):
    path = tmp_path / "early.pt"
    path.write_bytes(b"placeholder")
    files: dict[Path, Arrival] = {}
    noted: list[Arrival] = []
    look(tmp_path, files, lambda p, a: noted.append(a))
    first = files[path]
    st = os.stat(path)
    time.sleep(0.05)
    with open(path, "r+b") as f:  # truncate and rewrite: the same inode, the same size
        f.truncate(0)
        f.write(b"trained!!!!")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # touch -r: the mtime put back; the ctime cannot be
    written = time.time()
    look(tmp_path, files, lambda p, a: noted.append(a))
    now = files[path]
    assert now.identity.sha256 == _sha(b"trained!!!!") and now.identity.ino == first.identity.ino
    assert now.identity.size == first.identity.size and now.identity.mtime_ns == first.identity.mtime_ns
    assert now.first_seen == first.first_seen and now.changes == 1
    assert now.at >= written > first.at  # never before the new bytes existed
    assert noted == [first, now]


def test_same_bytes_touched_chmodded_or_renamed_over_keep_their_time(tmp_path):
    path = tmp_path / "a.pt"
    path.write_bytes(b"weights")
    files: dict[Path, Arrival] = {}
    noted: list[Arrival] = []
    look(tmp_path, files, lambda p, a: noted.append(a))
    at = files[path].at
    os.utime(path, (1, 1))
    os.chmod(path, 0o600)
    (tmp_path / "copy").write_bytes(b"weights")
    os.replace(tmp_path / "copy", path)  # a new inode holding the same bytes
    look(tmp_path, files, lambda p, a: noted.append(a))
    assert files[path].at == at and files[path].changes == 0 and len(noted) == 1
    assert files[path].identity.same_stat(os.lstat(path))  # the new stat is kept: not hashed again next time


def test_a_file_replaced_by_rename_with_other_bytes_is_a_change(tmp_path):
    path = tmp_path / "a.pt"
    path.write_bytes(b"one")
    files: dict[Path, Arrival] = {}
    look(tmp_path, files)
    (tmp_path / "b.pt.tmp").write_bytes(b"two")
    os.replace(tmp_path / "b.pt.tmp", path)
    look(tmp_path, files)
    assert files[path].changes == 1 and files[path].identity.sha256 == _sha(b"two")


def test_links_and_saves_in_progress_are_not_checkpoints(tmp_path):
    (tmp_path / "real.pt").write_bytes(b"r")
    (tmp_path / "link.pt").symlink_to(tmp_path / "real.pt")
    (tmp_path / "dirlink").symlink_to(tmp_path)
    (tmp_path / "half.pt.tmp").write_bytes(b"partial")
    files: dict[Path, Arrival] = {}
    look(tmp_path, files)
    assert set(files) == {tmp_path / "real.pt"}


def test_a_file_that_moves_while_hashed_is_looked_at_again(tmp_path, monkeypatch):
    path = tmp_path / "big.pt"
    path.write_bytes(b"a" * 100)
    real = arrivals_mod.sha256

    def writer_still_writing(p):
        digest = real(p)
        with open(p, "ab") as f:
            f.write(b"more")
        return digest

    monkeypatch.setattr(arrivals_mod, "sha256", writer_still_writing)
    files: dict[Path, Arrival] = {}
    look(tmp_path, files)
    assert files == {}  # a half-written file has no identity yet
    monkeypatch.setattr(arrivals_mod, "sha256", real)
    look(tmp_path, files)
    assert files[path].identity.sha256 == _sha(b"a" * 100 + b"more")


def test_identify_refuses_what_is_not_a_regular_file(tmp_path):
    (tmp_path / "l").symlink_to("/etc/passwd")
    assert identify(tmp_path / "l") is None and identify(tmp_path / "missing") is None and identify(tmp_path) is None


def test_the_thread_records_changes_and_stop_takes_the_last_look(tmp_path):
    path = tmp_path / "x.pt"
    path.write_bytes(b"1")
    arrivals = Arrivals(tmp_path, interval=0.05).start()
    first = arrivals.files[path]
    arrivals.interval = 3600  # no more polls: only stop()'s last look can see the next content
    time.sleep(0.2)
    path.write_bytes(b"22")
    written = time.time()
    files = arrivals.stop()
    assert files[path].changes == 1 and files[path].at >= written and files[path].first_seen == first.first_seen
    assert arrivals.seen == {path: files[path].at}


def _workspace(tmp_path: Path) -> tuple[Path, Path, Evidence]:
    run_dir = tmp_path / "run"
    ws = run_dir / "workspace"
    (ws / "checkpoints").mkdir(parents=True)
    (ws / "prepare.py").write_text("LOCKED = 1\n")
    return run_dir, ws, Evidence(run_dir)


def test_the_evidence_keeps_every_identity_line_by_line_and_reads_them_back(tmp_path):
    run_dir, ws, evidence = _workspace(tmp_path)
    ckpt = ws / "checkpoints" / "a.pt"
    files: dict[Path, Arrival] = {}

    def note(p: Path, a: Arrival) -> None:
        evidence.note_arrival(ws, p, a, ["prepare.py"])

    ckpt.write_bytes(b"first")
    look(ws / "checkpoints", files, note)
    ckpt.write_bytes(b"second")
    look(ws / "checkpoints", files, note)
    (ws / "checkpoints" / "b.pt").write_bytes(b"b")
    look(ws / "checkpoints", files, note)
    lines = evidence.lines("arrivals.jsonl")
    assert [(r["path"], r["change"]) for r in lines] == [
        ("checkpoints/a.pt", 0),
        ("checkpoints/a.pt", 1),
        ("checkpoints/b.pt", 0),
    ]
    assert lines[1]["identity"]["sha256"] == _sha(b"second") and lines[1]["locked"]["prepare.py"]["sha256"]
    assert evidence.arrivals(ws) == files
    # a harness killed while writing a line leaves a torn one: the lines before it are kept
    with open(evidence.path("arrivals.jsonl"), "a") as f:
        f.write('{"path": "checkpoints/c.pt", "seen_')
    assert evidence.arrivals(ws) == files


def test_a_record_of_an_older_harness_without_identity_is_placed_at_its_first_sight(tmp_path):
    run_dir, ws, evidence = _workspace(tmp_path)
    evidence.append("arrivals.jsonl", {"path": "checkpoints/old.pt", "seen_at": 123.5, "locked": {}})
    assert evidence.arrivals(ws) == {ws / "checkpoints" / "old.pt": Arrival(123.5, 123.5, None)}


def test_on_resume_a_change_after_the_harness_died_is_placed_at_its_mtime_never_before_the_last_record(tmp_path):
    """``bench run --resume``: the recorded identities, then one look that places what nobody saw by its mtime."""
    from bench.pipeline.workspace import Workspace
    from bench.resume import _arrivals

    run_dir, ws, evidence = _workspace(tmp_path)
    folder = ws / "checkpoints"
    (folder / "kept.pt").write_bytes(b"kept")
    (folder / "changed.pt").write_bytes(b"old")
    files: dict[Path, Arrival] = {}
    look(folder, files, lambda p, a: evidence.note_arrival(ws, p, a, []))
    recorded = files[folder / "changed.pt"].at
    # the harness dies; the agent rewrites one file and back-dates it, and writes a new one
    (folder / "changed.pt").write_bytes(b"new")
    os.utime(folder / "changed.pt", (recorded - 100, recorded - 100))
    (folder / "late.pt").write_bytes(b"late")
    os.utime(folder / "late.pt", (recorded + 5, recorded + 5))
    again = _arrivals(Workspace(run_dir, SimpleNamespace(locked_files=("prepare.py",))), evidence)
    assert again[folder / "kept.pt"] == files[folder / "kept.pt"]
    assert again[folder / "changed.pt"].at == recorded and again[folder / "changed.pt"].changes == 1
    assert again[folder / "changed.pt"].identity.sha256 == _sha(b"new")
    assert again[folder / "changed.pt"].fallback == "mtime"
    assert again[folder / "late.pt"].at == pytest.approx(recorded + 5) and again[folder / "late.pt"].fallback == "mtime"
    assert evidence.arrivals(ws) == again  # noted, so a second resume reads the same
    assert evidence.lines("arrivals.jsonl")[-1]["locked"]["prepare.py"]["sha256"]  # with the locked files' state


def test_an_overwrite_is_a_rule_6_flag_naming_the_file_with_both_times_and_untimed_bytes_are_one_too(tmp_path):
    run_dir, ws, evidence = _workspace(tmp_path)
    started = 1_000_000.0

    def rec(path: str, seen_s: float, change: int, digest: str) -> dict:
        ident = {"size": 1, "ino": 1, "mtime_ns": 1, "ctime_ns": 1, "sha256": digest * 64}
        return {"path": f"checkpoints/{path}", "seen_at": started + seen_s, "change": change, "identity": ident}

    for line in (rec("early.pt", 3.0, 0, "a"), rec("honest.pt", 200.0, 0, "c"), rec("early.pt", 361.3, 1, "b")):
        evidence.append("arrivals.jsonl", line)
    ctx = Context(
        workspace=ws, run_dir=run_dir, task_id="t6", locked=(), locked_sha256={}, evaluations=[],
        started_at=started, budget_s=600, agent_argv=[], offline=True,
        rejected=[{"path": "checkpoints/mapped.pt", "reason": f"{UNTIMED} (sha256 ...)"}],
    )  # fmt: skip
    flags = [v for v in within_budget(ctx) if "overwritten" in v.reason]
    assert len(flags) == 1 and flags[0].verdict == "flag" and flags[0].rule == 6
    assert flags[0].evidence == (
        "arrivals.jsonl#3: checkpoints/early.pt first seen at 3.0 s, content changed at 361.3 s "
        "(1 change(s); sha256 aaaaaaaaaaaa -> bbbbbbbbbbbb)",
    )
    untimed = [v for v in within_budget(ctx) if "never saw" in v.reason]
    assert [(v.rule, v.verdict, v.evidence) for v in untimed] == [
        (6, "flag", (f"checkpoints/mapped.pt: {UNTIMED} (sha256 ...)",))
    ]


def test_a_checkpoint_swapped_for_a_fifo_between_the_stat_and_the_read_does_not_block_the_look(tmp_path):
    """The agent is alive while the harness looks: it can rename a FIFO over a checkpoint after the look's lstat saw a
    regular file. A plain open() of it waits for a writer forever (the arrivals thread, and the watch that joins it,
    would hang); the hash is read through the boundary, so the file simply has no identity this time."""
    import threading

    path = tmp_path / "c.pt"
    path.write_bytes(b"weights")
    st = os.lstat(path)  # what the look saw
    os.mkfifo(tmp_path / "pipe")
    os.replace(tmp_path / "pipe", path)  # then the swap
    got: list = []
    t = threading.Thread(target=lambda: got.append(identify(path, st)), daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive() and got == [None]
