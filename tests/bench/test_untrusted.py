"""The hostile-input boundary (bench/untrusted/): each promise against the file an agent would plant to break it."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from bench import untrusted
from bench.untrusted import Finding, Limits


def _within(seconds: float, fn, *args, **kwargs):
    """fn's result, or a failed test if it blocks longer than ``seconds`` (a FIFO open without O_NONBLOCK does)."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn(*args, **kwargs)), daemon=True)
    t.start()
    t.join(seconds)
    assert out, f"{fn.__name__} blocked for {seconds} s"
    return out[0]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    base = tmp_path / "ws"
    (base / "sub").mkdir(parents=True)
    (base / "a.py").write_text("print('a')\n")
    (base / "sub" / "b.txt").write_text("b\n")
    return base


def test_a_fifo_is_refused_at_once_by_every_reader(tree):
    os.mkfifo(tree / "spool.jsonl")  # no writer ever opens it: a blocking open would wait forever
    for fn, args in (
        (untrusted.read_bytes, ("spool.jsonl", tree)),
        (untrusted.read_text_tail, ("spool.jsonl", tree, 100)),
        (untrusted.open_regular, ("spool.jsonl", tree)),
        (untrusted.sha256_of, ("spool.jsonl", tree)),
        (untrusted.copy_into, ("spool.jsonl", tree, tree.parent / "out" / "x")),
        (lambda *a: list(untrusted.iter_lines(*a)), ("spool.jsonl", tree)),
    ):
        got = _within(5, fn, *args)
        got = got[0] if isinstance(got, list) else got
        assert isinstance(got, Finding) and got.what == untrusted.NOT_REGULAR, (fn, got)
        assert "FIFO" in got.detail
    assert not (tree.parent / "out" / "x").exists()


def test_a_directory_named_like_a_file_is_a_finding_not_an_error(tree):
    (tree / "x.jsonl").mkdir()
    got = untrusted.read_bytes("x.jsonl", tree)
    assert got == Finding("x.jsonl", untrusted.NOT_REGULAR, "a directory")
    assert untrusted.loads_json(b"{}") == {}  # and a regular read still works beside it
    assert untrusted.read_bytes("a.py", tree) == b"print('a')\n"


def test_links_are_never_followed_whether_they_lead_out_or_stay_inside(tree, tmp_path):
    secret = tmp_path / "shadow"
    secret.write_text("root:SECRET-HASH\n")
    os.symlink(secret, tree / "out.py")  # out of the tree
    os.symlink("a.py", tree / "in.py")  # inside: refused too, nothing the harness reads needs a link
    os.symlink(tmp_path, tree / "up")  # a folder link on the way
    for name in ("out.py", "in.py", "up/shadow"):
        got = untrusted.read_bytes(name, tree)
        assert isinstance(got, Finding) and got.what == untrusted.LINK, (name, got)
    assert untrusted.read_bytes("../shadow", tree).what == untrusted.OUTSIDE
    assert untrusted.read_bytes(secret, tree).what == untrusted.OUTSIDE  # an absolute path elsewhere
    assert untrusted.read_bytes(tree / "sub" / "b.txt", tree) == b"b\n"  # an absolute path inside is fine


def test_a_sparse_file_is_refused_by_its_allocated_size_and_never_read(tree):
    with open(tree / "tail.txt", "wb") as f:
        f.truncate(1 << 30)  # 1 GiB apparent, no block allocated
    # the cap on apparent size alone would allow it: the allocated size is what refuses it
    big = Limits(max_bytes=2 << 30)
    for got in (
        untrusted.read_bytes("tail.txt", tree, limits=big, limit=2 << 30),
        untrusted.read_text_tail("tail.txt", tree, 1000),
        untrusted.sha256_of("tail.txt", tree, big),
    ):
        assert isinstance(got, Finding) and got.what == untrusted.SPARSE, got
    files, findings = untrusted.walk(tree)
    assert tree / "tail.txt" not in files
    assert [f.what for f in findings] == [untrusted.SPARSE]


def test_a_file_over_the_cap_is_refused_or_cut_and_a_tail_is_its_end(tree):
    (tree / "log.txt").write_bytes(b"x" * 5000 + b"END\n")
    assert untrusted.read_bytes("log.txt", tree, 1000).what == untrusted.TOO_BIG
    assert untrusted.read_bytes("log.txt", tree, 1000, truncate=True) == b"x" * 1000
    assert untrusted.read_text_tail("log.txt", tree, 10) == "xxxxxxEND\n"


def test_a_json_depth_bomb_is_a_finding_not_a_recursion_error():
    bomb = "[" * 100_000
    got = untrusted.loads_json(bomb, max_depth=64, max_len=1 << 20)
    assert isinstance(got, Finding) and got.what == untrusted.TOO_DEEP
    assert untrusted.loads_json('{"a": [[1]]}', max_depth=3) == {"a": [[1]]}
    assert untrusted.loads_json('{"a": "[[[[[[["}', max_depth=2) == {"a": "[[[[[[["}  # brackets in strings
    assert untrusted.loads_json("[" * 10, max_depth=20).what == untrusted.BAD_JSON
    assert untrusted.loads_json("1" * 100, max_len=50).what == untrusted.TOO_LONG


def test_an_over_long_line_is_one_finding_and_the_next_lines_still_come(tree):
    (tree / "s.jsonl").write_bytes(b"first\n" + b"[" * 100_000 + b"\nlast\n")
    got = list(untrusted.iter_lines("s.jsonl", tree, max_line=1000, max_lines=10))
    assert got[0] == "first" and got[2] == "last"
    assert isinstance(got[1], Finding) and got[1].what == untrusted.TOO_LONG
    (tree / "many.txt").write_text("x\n" * 50)
    got = list(untrusted.iter_lines("many.txt", tree, max_line=10, max_lines=5))
    assert got[:5] == ["x"] * 5 and got[5].what == untrusted.TOO_MANY and len(got) == 6


def test_a_walk_stops_at_its_entry_cap_and_follows_no_link(tree, tmp_path):
    flood = tree / "checkpoints"
    flood.mkdir()
    for i in range(300):
        (flood / f"c{i}.pt").write_bytes(b"")
    os.symlink(tmp_path, tree / "loop")  # a link to a folder above: followed, it would list the tree again
    files, findings = untrusted.walk(tree, Limits(max_entries=100))
    assert 50 < len(files) <= 100  # what was listed before the cap is kept
    assert [f.what for f in findings][-1] == untrusted.TOO_MANY
    files, findings = untrusted.walk(tree, Limits(max_entries=1000))
    assert len(files) == 302 and not any("loop" in str(p) for p in files)
    assert [(Path(f.path).name, f.what) for f in findings] == [("loop", untrusted.LINK)]


def test_a_walk_of_folders_nested_deeper_than_python_recursion_does_not_crash(tmp_path):
    base = tmp_path / "deep"
    base.mkdir()
    fd = os.open(base, os.O_RDONLY)
    try:
        for _ in range(1100):  # os.walk and Path.rglob raise RecursionError here (Python 3.11)
            os.mkdir("d", dir_fd=fd)
            fd, parent = os.open("d", os.O_RDONLY, dir_fd=fd), fd
            os.close(parent)
        os.close(os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
        files, findings = untrusted.walk(base, Limits(max_depth=2000))
        assert len(files) == 1 and files[0].name == "leaf.txt"
        files, findings = untrusted.walk(base, Limits(max_depth=10))
        assert files == [] and [f.what for f in findings] == [untrusted.TOO_DEEP]
    finally:  # pytest's own clean-up (shutil.rmtree) recurses too and would fail on this tree
        os.close(fd)
        subprocess.run(["rm", "-rf", str(base)], check=True)


def test_copies_of_hard_links_of_one_file_are_made_once_and_bounded_in_total(tree, tmp_path):
    (tree / "w.bin").write_bytes(os.urandom(4000))
    for i in range(5):
        os.link(tree / "w.bin", tree / f"h{i}.bin")
    (tree / "other.bin").write_bytes(os.urandom(4000))
    budget = untrusted.CopyBudget(6000)
    dest = tmp_path / "staged"
    got = [untrusted.copy_into(n, tree, dest / n, budget=budget) for n in ("w.bin", "h0.bin", "h1.bin", "other.bin")]
    assert got[0] == dest / "w.bin" and (dest / "w.bin").read_bytes() == (tree / "w.bin").read_bytes()
    assert [g.what for g in got[1:3]] == [untrusted.DUPLICATE] * 2
    assert got[3].what == untrusted.TOO_BIG  # 4000 + 4000 > 6000
    assert budget.used == 4000 and sorted(p.name for p in dest.iterdir()) == ["w.bin"]


def test_a_tally_counts_findings_by_kind_and_keeps_agent_text_on_one_line():
    tally = untrusted.Tally(keep=2)
    for i in range(5):
        tally.add(Finding(f"evil\nname{i}.py", untrusted.LINK, "-> /etc/shadow"))
    tally.add(Finding("f", untrusted.NOT_REGULAR, "a FIFO"))
    d = tally.to_dict()
    assert d["total"] == 6 and d["counts"] == {"link": 5, "not-regular": 1}
    assert len(d["examples"]) == 2 and d["examples"][0]["path"] == "evil\\nname0.py"
