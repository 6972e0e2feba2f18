"""The code that travels with its checkpoint (bench/pipeline/codetime.py): snapshots, their bounds, the lookup that
collect makes, the placement of a checkpoint that has none, and the staging of a snapshot."""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from bench.evidence import Arrival
from bench.pipeline import codetime, evaluate
from bench.pipeline.arrivals import look
from bench.pipeline.collect import Checkpoint, Selection, scan
from bench.result import Evaluation, Official
from bench.rules.context import Context
from bench.rules.scoring import code_of_its_time


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _workspace(tmp_path: Path) -> tuple[Path, Path]:
    ws = tmp_path / "run" / "workspace"
    (ws / "checkpoints").mkdir(parents=True)
    return ws, tmp_path / "run" / "evidence"


def _save(path: Path, score: float = 0.4) -> None:
    payload = {"state_dict": {"w": torch.zeros(2)}, "config": {}, "script": "a.py", "val_score": score}
    torch.save({**payload, "metric": "mse", "step": 1, "time": time.time()}, path)


def test_a_snapshot_holds_the_top_level_scripts_as_they_were_and_nothing_else(tmp_path):
    ws, evidence = _workspace(tmp_path)
    (ws / "a.py").write_text("A = 1\n")
    (ws / "b.py").write_text("B = 1\n")
    (ws / "prepare.py").write_text("# the workspace copy of a locked file: the task's original is staged\n")
    (ws / "notes.txt").write_text("not a script\n")
    secret = tmp_path / "host-secret.py"
    secret.write_text("SECRET = 'never copied'\n")
    (ws / "link.py").symlink_to(secret)
    os.mkfifo(ws / "fifo.py")
    (ws / "sub").mkdir()
    (ws / "sub" / "deep.py").write_text("# below the top level: never staged\n")
    snaps = codetime.Snapshots(ws, evidence, locked=("prepare.py",))

    first = snaps.take()  # the FIFO does not block it, the link is not followed
    assert first.files == {"a.py": _sha(b"A = 1\n"), "b.py": _sha(b"B = 1\n")} and first.incomplete is None
    (ws / "b.py").write_text("B = 2  # written later\n")
    second = snaps.take()
    assert second.files["b.py"] == _sha(b"B = 2  # written later\n") and second.digest != first.digest

    dest = tmp_path / "eval"
    dest.mkdir()
    codetime.stage_snapshot(evidence / codetime.CODE_DIR, first, dest)
    assert sorted(p.name for p in dest.iterdir()) == ["a.py", "b.py"]
    assert (dest / "b.py").read_text() == "B = 1\n"  # the code of the first snapshot's time
    stored = [p.read_bytes() for p in (evidence / codetime.CODE_DIR).iterdir()]
    assert not any(b"never copied" in data for data in stored)


def test_an_unchanged_script_is_not_read_again_and_each_content_is_kept_once(tmp_path, monkeypatch):
    ws, evidence = _workspace(tmp_path)
    (ws / "a.py").write_text("A = 1\n")
    (ws / "b.py").write_text("B = 1\n")
    reads = []
    real = codetime.untrusted.read_bytes
    monkeypatch.setattr(
        codetime.untrusted, "read_bytes", lambda name, *a, **k: reads.append(name) or real(name, *a, **k)
    )
    snaps = codetime.Snapshots(ws, evidence)
    snaps.take()
    snaps.take()
    (ws / "a.py").write_text("A = 2\n")
    snaps.take()
    assert reads == ["a.py", "b.py", "a.py"]
    blobs = [p for p in (evidence / codetime.CODE_DIR).iterdir() if not p.name.endswith(".json")]
    assert len(blobs) == 3  # a.py twice (two contents), b.py once


def test_a_sparse_or_oversized_script_is_left_out_and_named(tmp_path, monkeypatch):
    ws, evidence = _workspace(tmp_path)
    monkeypatch.setattr(codetime, "MAX_FILE_BYTES", 1000)
    (ws / "a.py").write_text("A = 1\n")
    (ws / "big.py").write_text("#" * 2000 + "\n")
    with open(ws / "sparse.py", "wb") as f:
        f.truncate(1 << 30)  # 1 GiB apparent, nothing allocated
    snap = codetime.Snapshots(ws, evidence).take()
    assert set(snap.files) == {"a.py"} and snap.incomplete is None
    assert snap.left_out["big.py"].startswith("too-big") and snap.left_out["sparse.py"].startswith("sparse")
    assert sum(p.stat().st_size for p in (evidence / codetime.CODE_DIR).iterdir()) < 10_000


@pytest.mark.parametrize(
    ("bound", "value", "why"),
    [
        ("MAX_FILES", 2, "more than 2 scripts"),
        ("MAX_SNAPSHOT_BYTES", 10, "the scripts pass"),
        ("MAX_STORE_BYTES", 10, "the run's code store passed"),
        ("MAX_ENTRIES", 2, "more than 2 entries"),
    ],
)
def test_a_snapshot_over_a_bound_is_incomplete(tmp_path, monkeypatch, bound, value, why):
    ws, evidence = _workspace(tmp_path)
    for name in ("a.py", "b.py", "c.py"):
        (ws / name).write_text(f"# {name}: some code\n")
    monkeypatch.setattr(codetime, bound, value)
    snap = codetime.Snapshots(ws, evidence).take()
    assert snap.incomplete and snap.incomplete.startswith(why), snap


def test_collect_gives_each_checkpoint_the_code_of_its_content_and_places_one_without_it_after_the_code(tmp_path):
    ws, evidence = _workspace(tmp_path)
    started = time.time() - 5
    (ws / "a.py").write_text("def build_model(config): ...  # early\n")
    snaps = codetime.Snapshots(ws, evidence)
    early = ws / "checkpoints" / "early.pt"
    _save(early, 0.2)
    files: dict[Path, Arrival] = {}
    look(ws / "checkpoints", files, code=snaps)  # the live look: a snapshot with the new content
    record = json.loads((evidence / codetime.RECORDS).read_text().splitlines()[0])
    assert record["seen_at"] == files[early].at and record["path"] == "checkpoints/early.pt"

    time.sleep(0.05)
    (ws / "a.py").write_text("def build_model(config): ...  # written later\n")
    late = ws / "checkpoints" / "late.pt"
    _save(late, 0.3)
    os.utime(late, (started + 1, started + 1))  # back-dated: its mtime says 1 s
    # as --resume looks at what appeared after the harness died: at the mtime, with no snapshot
    look(ws / "checkpoints", files, clock=lambda st, _known: st.st_mtime, fallback="mtime")
    assert files[late].at == pytest.approx(started + 1)

    found, rejected = scan(ws / "checkpoints", started, "mse", 600, files, {"a.py"}, codetime.Index(ws, evidence))
    assert not rejected
    by_name = {c.path.name: c for c in found}
    assert by_name["early.pt"].code.files == {"a.py": _sha(b"def build_model(config): ...  # early\n")}
    assert by_name["early.pt"].saved_s == pytest.approx(files[early].at - started) and not by_name["early.pt"].code_note
    a_changed = os.stat(ws / "a.py").st_ctime - started  # the newest script's ctime, which no one can set back
    assert by_name["late.pt"].code is None and by_name["late.pt"].saved_s == pytest.approx(a_changed)
    assert "no snapshot" in by_name["late.pt"].code_note and "a.py last changed" in by_name["late.pt"].code_note

    dest = tmp_path / "eval"
    task = SimpleNamespace(locked_files=(), file=lambda name: None)
    evaluate.stage(task, ws, dest, early, code=by_name["early.pt"].code, store=evidence / codetime.CODE_DIR)
    assert (dest / "a.py").read_text().endswith("# early\n")
    assert (dest / evaluate.CHECKPOINT).read_bytes() == early.read_bytes()
    evaluate.stage(task, ws, tmp_path / "eval-late", late)  # no snapshot: the scripts as the run left them
    assert (tmp_path / "eval-late" / "a.py").read_text().endswith("# written later\n")


def test_a_checkpoint_link_is_not_staged(tmp_path):
    ws, _ = _workspace(tmp_path)
    outside = tmp_path / "shadow"
    outside.write_text("root:secret\n")
    (ws / "checkpoints" / "x.pt").symlink_to(outside)
    task = SimpleNamespace(locked_files=(), file=lambda name: None)
    with pytest.raises(OSError, match="link"):
        evaluate.stage(task, ws, tmp_path / "eval", ws / "checkpoints" / "x.pt")
    assert not (tmp_path / "eval" / evaluate.CHECKPOINT).exists()


def _ck(name: str, saved_s: float) -> Checkpoint:
    return Checkpoint(Path(name), "run_1.py", 0.1, "mse", None, saved_s)


def test_a_candidate_that_is_best_and_its_windows_best_is_scored_once_and_counted_once(tmp_path, monkeypatch):
    """Budget 15 s: the shared candidate takes 12 s (a fake clock), so the next window's is not started. Its 12 s
    count once (not 24) and the one candidate cut is one."""
    now = [0.0]
    scored = []

    def fake_evaluate(job):
        scored.append(job.eval_dir.name)
        now[0] += 12.0
        return Official.from_dict({"value": 0.5, "eval_wall_s": 12.0})

    monkeypatch.setattr(evaluate.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(evaluate, "evaluate", fake_evaluate)
    monkeypatch.setattr(evaluate.data, "verify_prepared", lambda task: None)
    monkeypatch.setattr(evaluate, "stage", lambda *a, **k: None)
    monkeypatch.setattr(evaluate, "verify_copy", lambda ckpt, copy: "0" * 64)
    shared, other = _ck("shared.pt", 10.0), _ck("other.pt", 400.0)
    selection = Selection(shared, {0: shared, 1: other}, (shared, other))
    task = SimpleNamespace(folder=tmp_path)
    ws = SimpleNamespace(task=task, path=tmp_path, run_dir=tmp_path, eval_dir=tmp_path / "eval")
    given = evaluate.EvaluationInput(ws, selection, tmp_path, console=False, budget_s=15)
    evaluations = evaluate.evaluate_candidates(given)

    assert [(e.candidate, Path(e.path).name) for e in evaluations] == [
        ("best", "shared.pt"),
        ("window-0", "shared.pt"),
        ("window-1", "other.pt"),
    ]
    assert scored == ["00-shared"]
    assert evaluations[2].official.raw.get(evaluate.BUDGET_SPENT)
    assert evaluate.budget_hit(evaluations, 15) == {
        "limit": "evaluation",
        "value": 15,
        "candidates_cut": 1,
        "spent_s": 12.0,
    }
    # the same from result.json: evaluations read back are distinct objects, the checkpoint is still one
    again = [Evaluation.from_dict(e.to_dict()) for e in evaluations]
    assert evaluate.budget_hit(again, 15)["spent_s"] == 12.0
    # a budget too small for any: the shared candidate is one candidate cut, not two
    nothing = evaluate.evaluate_candidates(replace(given, budget_s=5))
    assert scored == ["00-shared"] and all(e.official.raw.get(evaluate.BUDGET_SPENT) for e in nothing)
    assert evaluate.budget_hit(nothing, 5)["candidates_cut"] == 2


def test_a_candidate_scored_with_the_end_state_is_a_rule_6_flag_once(tmp_path):
    note = "no snapshot of the workspace's code was taken when its content was seen: staged ..."
    official = Official.from_dict({"value": 0.4, "code_fallback": note})
    fields = {"path": "/ws/checkpoints/late.pt", "script": "a.py", "val_score": 0.4, "metric": "mse", "step": 1}
    evaluations = [
        Evaluation(candidate="best", saved_s=50.0, window=0, official=official, **fields),
        Evaluation(candidate="window-0", saved_s=50.0, window=0, official=official, **fields),
    ]
    ctx = Context(tmp_path, tmp_path, "t6", (), {}, evaluations, 0.0, 600.0, [], [], True)
    found = code_of_its_time(ctx)
    assert len(found) == 1 and found[0].rule == 6 and found[0].verdict == "flag"
    assert found[0].evidence == (f"late.pt: {note}",)
    ctx.evaluations = [Evaluation(candidate="best", saved_s=5.0, window=0, official=Official.from_dict({}), **fields)]
    assert code_of_its_time(ctx) == []
