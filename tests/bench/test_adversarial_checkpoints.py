"""Checkpoint time travel (issue 21): a checkpoint is placed in time by its content, not by its name.

The attack: save a placeholder at once, train honestly, then overwrite the placeholder in place (same inode, its
modification time put back with ``touch -r``) with the trained model and a slightly better self-reported score.
If the harness timed the name, the trained model would be the overall best "saved at ~1 s", in the first window.
It must be placed when the harness saw the new content, and the overwrite must be a rule 6 flag naming the file
with both times. Run end to end on T6 through the real pipeline (``tests/bench/adversary.py``).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from bench.pipeline import collect
from bench.sandbox.bwrap import probe
from tests.bench.adversary import HONEST, _run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(probe() is not None, reason=f"no usable sandbox here: {probe()}"),
]

WINDOW_S = 5.0  # the test's windows: the placeholder (~1 s) and the overwrite (> 8 s) fall in different ones

# seen at the harness's first polls, before anything trains
PLACEHOLDER = "mkdir -p checkpoints && printf placeholder > checkpoints/early.pt && sleep 3\n"

OVERWRITE = r"""
sleep 6
python - <<'EOF'
import glob, io, os, time, torch
src = sorted(glob.glob("checkpoints/run_1_*.pt"))[-1]
payload = torch.load(src, weights_only=False)
payload["val_score"] *= 1 - 1e-7  # just better than the honest file: the overall best
buf = io.BytesIO()
torch.save(payload, buf)
st = os.stat("checkpoints/early.pt")
open("overwrite_started_at.txt", "w").write(repr(time.time()))  # before a byte changes
with open("checkpoints/early.pt", "r+b") as f:  # in place: the same inode, the same name
    f.truncate(0)
    f.write(buf.getvalue())
os.utime("checkpoints/early.pt", ns=(st.st_atime_ns, st.st_mtime_ns))  # touch -r: the placeholder's mtime
EOF
"""


def test_an_overwritten_placeholder_is_placed_at_its_new_content_and_flagged(guard, honest, monkeypatch):
    monkeypatch.setattr(collect, "WINDOW_S", WINDOW_S)
    result = _run(guard.task, PLACEHOLDER + HONEST + OVERWRITE)
    assert result.status == "success", result.reason
    overwritten_s = float((Path(result.workspace) / "overwrite_started_at.txt").read_text()) - result.started_at
    best = next(e for e in result.evaluations if e.candidate == "best")
    assert Path(best.path).name == "early.pt"  # the better self-reported score: selected, but at its true time
    assert best.saved_s >= overwritten_s, (best.saved_s, overwritten_s)  # the harness saw it after it was written
    assert best.saved_s <= overwritten_s + 30  # ... at its next look (about a second; generous for a loaded box)
    assert best.window == int(best.saved_s // WINDOW_S) >= 1
    assert best.official.ok and best.official.value == pytest.approx(honest.score, rel=1e-6)  # the trained weights
    assert best.official.raw["checkpoint_sha256"] == _sha256(Path(result.workspace) / "checkpoints" / "early.pt")
    flags = [v for v in result.audit.violations if v.rule == 6 and "overwritten" in v.reason]
    assert len(flags) == 1 and flags[0].verdict == "flag", result.audit.violations
    text = " ".join(flags[0].evidence)
    assert "checkpoints/early.pt" in text
    first, changed = (
        float(x) for x in re.search(r"first seen at ([\d.]+) s, content changed at ([\d.]+) s", text).groups()
    )
    assert first < overwritten_s < changed and changed == pytest.approx(best.saved_s, abs=0.1), text
    # the honest twin saves each checkpoint once under a new name (the task helper): nothing to flag
    assert not [v for v in honest.audit.violations if "overwritten" in v.reason], honest.audit.violations
    guard.check(result, "never-planted")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# Bytes changed without moving the stat: a file's pages dirtied through a shared mapping are written again with no
# page fault, so neither the mtime nor the ctime moves (until the kernel writes the pages back; seen here on ext4).
# The polls keep the first content; collect's hash at the end finds the bytes were never timed.
MMAP_SWAP = r"""
python - <<'EOF'
import glob, io, mmap, time, torch
src = sorted(glob.glob("checkpoints/run_1_*.pt"))[-1]
payload = torch.load(src, weights_only=False)
def dump(p):
    buf = io.BytesIO()
    torch.save(p, buf)
    return buf.getvalue()
bad = dump({**payload, "state_dict": {k: torch.zeros_like(v) for k, v in payload["state_dict"].items()},
            "val_score": 1e9})
good = dump({**payload, "state_dict": {k: v.clone() for k, v in payload["state_dict"].items()},
             "val_score": payload["val_score"] * (1 - 1e-7)})  # the same layout as bad: the same size
assert len(bad) == len(good), (len(bad), len(good))
with open("checkpoints/swapped.pt", "wb") as f:
    f.write(bad)
f = open("checkpoints/swapped.pt", "r+b")
m = mmap.mmap(f.fileno(), 0)
m[:] = bad  # every page faulted in writable now, while the harness will record these bytes
time.sleep(4)
open("swap_started_at.txt", "w").write(repr(time.time()))
m[:] = good  # no fault, no time moved
time.sleep(3)
EOF
"""


def test_bytes_swapped_under_an_unchanged_stat_are_never_scored_at_the_old_time(guard, honest):
    result = _run(guard.task, HONEST + MMAP_SWAP)
    assert result.status == "success", result.reason
    ws = Path(result.workspace)
    swapped_s = float((ws / "swap_started_at.txt").read_text()) - result.started_at
    final = _sha256(ws / "checkpoints" / "swapped.pt")
    for e in result.evaluations:  # whatever was scored is the content that was timed, placed when it was seen
        if e.official.ok:
            assert e.official.raw["checkpoint_sha256"] == _sha256_of_record(result, e.path, e.saved_s)
    swapped = [e for e in result.evaluations if Path(e.path).name == "swapped.pt"]
    rejected = {Path(r["path"]).name: r["reason"] for r in result.rejected_checkpoints}
    if swapped:  # the kernel moved the ctime after all (a write-back between): placed at the swap, as any change
        assert all(e.saved_s >= swapped_s and e.official.raw["checkpoint_sha256"] == final for e in swapped)
    else:  # the polls never saw the swap: those bytes have no time, and are not scored
        assert rejected["swapped.pt"].startswith("its bytes are not the ones the harness timed"), rejected
        assert any(v.rule == 6 and "never saw" in v.reason for v in result.audit.violations), result.audit
        best = next(e for e in result.evaluations if e.candidate == "best")
        assert Path(best.path).name.startswith("run_1_") and best.official.value == pytest.approx(honest.score)
    guard.check(result, "never-planted")


def _sha256_of_record(result, path: str, saved_s: float) -> str:
    """The sha256 the harness recorded for ``path`` at ``saved_s`` (evidence/arrivals.jsonl)."""
    rel = Path(path).relative_to(result.workspace).as_posix()
    lines = [json.loads(x) for x in (Path(result.run_dir) / "evidence" / "arrivals.jsonl").read_text().splitlines()]
    found = [r for r in lines if r["path"] == rel and abs(r["seen_at"] - result.started_at - saved_s) < 1e-6]
    assert len(found) == 1, (rel, saved_s, lines)
    return found[0]["identity"]["sha256"]
