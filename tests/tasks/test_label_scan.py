"""A score that carries its labels (issue 37, item 5): the scorer finds its targets in what it scores.

Per task, on its small generated data: copies of the evaluation's targets planted in the trained baseline's
checkpoint (as a tensor, or a list in its config) or in a script, in three encodings each, are found, and the place
named; the honest baseline (its checkpoint and train.py) is not flagged. And a forged T6 candidate (the honest
DLinear plus a buffer of the test series its forward looks the answers up in) goes through the real scorer and
the audit: disqualified for the targets it carries, flagged for its test error far below its validation error.
The planted copies are built here from the prepared data files (the test split's rows, the val text, the labels
in feed order), not from the scanner's own window encodings.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.pipeline import evaluate as ev
from bench.result import Audit, Evaluation
from bench.rules import labels
from bench.rules.context import Context
from bench.sandbox.bwrap import probe
from bench.scoring import leakage
from bench.scoring.job import ScoringJob
from bench.tasks import load_task
from tests.tasks.smalldata import FACTORIES
from tests.tasks.taskfolder import TASKS_DIR, copy_task, run_prepare, task_modules

KIND = {"t1_language_modeling": leakage.TEXT, "t6_time_series_forecasting": leakage.SERIES}
# the three encodings planted per kind of target, and where: a tensor in the checkpoint (its key named in the
# finding), a list in the checkpoint's config (the pickle's numbers), or a script's text
PLANTS = {
    leakage.SERIES: [("float32", "tensor"), ("float16", "tensor channel-major"), ("float64", "config list")],
    leakage.LABELS: [("int64", "tensor"), ("int32", "config list"), ("uint8", "tensor")],
    leakage.TEXT: [("utf-8", "script"), ("int64", "tensor"), ("uint16", "tensor")],
}
# T4's and T7's small test splits hold 6 and a few dozen labels: the real split's size and class shares stand in
REAL_SIZE = {"t4_graph_learning": (4113, [0.965, 0.035]), "t7_text_classification": (7600, [0.25] * 4)}
CASES = [(name, enc, how) for name in sorted(FACTORIES) for enc, how in PLANTS[KIND.get(name, leakage.LABELS)]]


def _kind(name: str) -> str:
    return KIND.get(name, leakage.LABELS)


def _targets(small, name: str) -> tuple[list[np.ndarray], list | None, np.ndarray]:
    """The scorer's targets (its feed, in order), T1's vocabulary, and the sequence to plant, read from the
    prepared files: T6 the test rows after the first look-back, T1 the val ids in text order, else the labels."""
    ws = small.prepared(name)["ws"]
    data = str(ws / "data")
    with task_modules(ws) as (prepare, _):
        feed = prepare.eval_batches(prepare.EVAL_SPLIT, data, prepare.FEED_BATCH_SIZE)
        targets = [y for _, y in feed]
        vocab = None
        if _kind(name) == leakage.SERIES:
            plant = np.load(ws / "data" / "test.npy")[prepare.SEQ_LEN :]
        elif _kind(name) == leakage.TEXT:
            vocab = prepare.load_meta(data)["vocab"]
            plant = np.asarray(prepare.load_ids("val", data))
        else:
            plant = np.concatenate([np.asarray(y).reshape(-1) for y in targets])
    if name in REAL_SIZE and len(plant) < 4 * leakage.WINDOW[leakage.LABELS]:
        # the small data's test split is a handful of labels, too few to look for: labels of the real split's size
        # and class balance stand in (the scan is a function of the targets; the baseline holds neither)
        n, p = REAL_SIZE[name]
        plant = np.random.default_rng(0).choice(len(p), size=n, p=p).astype(plant.dtype)
        targets = [plant[i : i + 256] for i in range(0, n, 256)]
    return targets, vocab, plant


def _stage(small, name: str, dest: Path) -> Path:
    """An evaluation folder as the harness stages it: the task's own files, the baseline's train.py and its last
    checkpoint as checkpoint.pt."""
    trained = small.trained(name)
    task = load_task(TASKS_DIR / name)
    ev.stage(task, small.prepared(name)["ws"], dest, trained["checkpoints"][-1])
    return dest


def _scan(small, name: str, folder: Path) -> dict:
    targets, vocab, _ = _targets(small, name)
    own = {n for n in load_task(TASKS_DIR / name).locked_files}
    return leakage.scan(folder, ev.CHECKPOINT, _kind(name), targets, vocab=vocab, skip=own)


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_the_honest_baseline_carries_no_targets(small, name, tmp_path):
    result = _scan(small, name, _stage(small, name, tmp_path / "eval"))
    assert result["windows"] >= leakage.MIN_FOUND, f"{name}: too few informative windows to look for"
    assert result["found"] == [], f"{name}: the honest baseline flagged: {result['found']}"


@pytest.mark.parametrize(("name", "encoding", "how"), CASES)
def test_planted_targets_are_found_and_placed(small, name, encoding, how, tmp_path):
    folder = _stage(small, name, tmp_path / "eval")
    _, vocab, plant = _targets(small, name)
    payload = torch.load(folder / ev.CHECKPOINT, weights_only=True)
    if how == "script":  # the val text as a string in a script staged with the checkpoint
        text = "".join(vocab[int(i)] for i in plant)
        (folder / "lookup.py").write_text(f"TEXT = {text!r}\n", encoding="utf-8")
        where = "lookup.py"
    elif how == "config list":  # a list of Python numbers in the checkpoint's config: the pickle holds them
        values = plant.astype(encoding).reshape(-1)
        payload["config"] = dict(payload["config"], lookup=values.tolist())
        where = "data.pkl"
    else:
        values = plant.T if how.endswith("channel-major") else plant
        payload["lookup"] = torch.from_numpy(np.ascontiguousarray(values.astype(encoding)))
        where = "(tensor 'lookup')"
    torch.save(payload, folder / ev.CHECKPOINT)
    found = _scan(small, name, folder)["found"]
    assert found, f"{name}: the targets planted as {encoding} ({how}) were not found"
    # the pickle's numbers are widened to float64 whatever they were, so a config list is found as what it spells
    assert any(where in f["where"] for f in found), found
    if how != "config list":
        assert any(f["encoding"] == encoding and where in f["where"] for f in found), found


def test_a_partial_or_transformed_copy_is_not_claimed(small, tmp_path):
    """Below MIN_FOUND windows nothing is claimed: the first 2 % of T6's test rows, and the whole split scaled."""
    name = "t6_time_series_forecasting"
    folder = _stage(small, name, tmp_path / "eval")
    _, _, plant = _targets(small, name)
    payload = torch.load(folder / ev.CHECKPOINT, weights_only=True)
    payload["head"] = torch.from_numpy(plant[: len(plant) // 50].copy())
    payload["scaled"] = torch.from_numpy(plant * np.float32(1.5))
    torch.save(payload, folder / ev.CHECKPOINT)
    assert _scan(small, name, folder)["found"] == []


FORGED = '''
"""The honest DLinear plus the test split: forward looks each look-back up in it and answers its targets."""
import torch
import torch.nn as nn

import train
from prepare import PRED_LEN, SEQ_LEN


class Forged(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.base = train.build_model(config["base"])
        self.register_buffer("lookup", torch.zeros(config["rows"], 7))

    def forward(self, x):
        out = self.base(x)
        s = self.lookup
        starts = s[: len(s) - SEQ_LEN - PRED_LEN + 1]
        for b in range(x.shape[0]):
            for i in (starts == x[b, 0]).all(dim=1).nonzero().flatten().tolist():
                if torch.equal(s[i : i + SEQ_LEN], x[b]):
                    out[b] = s[i + SEQ_LEN : i + SEQ_LEN + PRED_LEN]
                    break
        return out


def build_model(config):
    return Forged(config)
'''


def test_a_forged_t6_candidate_is_disqualified_at_run_time(small, tmp_path):
    name = "t6_time_series_forecasting"
    task, ws = load_task(TASKS_DIR / name), small.prepared(name)["ws"]
    honest = torch.load(small.trained(name)["checkpoints"][-1], weights_only=True)
    agent = tmp_path / "agent"
    agent.mkdir()
    shutil.copyfile(TASKS_DIR / name / "train.py", agent / "train.py")
    (agent / "forged.py").write_text(FORGED, encoding="utf-8")
    series = torch.from_numpy(np.load(ws / "data" / "test.npy"))
    config = {"base": honest["config"], "rows": len(series)}
    state = {**{f"base.{k}": v for k, v in honest["state_dict"].items()}, "lookup": series}
    ckpt = agent / "checkpoints" / "forged.pt"
    ckpt.parent.mkdir()
    torch.save({**honest, "state_dict": state, "config": config, "script": "forged.py"}, ckpt)
    eval_dir = ev.stage(task, agent, tmp_path / "eval" / "00-forged", ckpt)
    official = ev.evaluate(ScoringJob(task.folder, ws / "data", eval_dir, "forged.py", sandboxed=probe() is None))
    assert official.ok, official.why_not
    assert official.value < 1e-6 < official.raw["val_value"], "the lookup answers the test split exactly"
    found = _audit_checks(task, official, ckpt, "forged.py", tmp_path)
    carried = [v for v in found if labels.CARRIED in v.reason]
    assert len(carried) == 1 and carried[0].verdict == "disqualify" and carried[0].rule == 9, found
    assert "(tensor 'lookup')" in carried[0].reason and "float32" in carried[0].reason
    gap = [v for v in found if labels.GAP in v.reason]
    assert len(gap) == 1 and gap[0].verdict == "flag" and "test_val_error_ratio" in gap[0].reason
    assert [v.reason for v in labels.score_findings(Audit(violations=tuple(found)))] == [v.reason for v in found]
    json.dumps(official.raw["label_scan"])  # recorded as plain JSON in result.json


def _audit_checks(task, official, ckpt: Path, script: str, tmp_path: Path) -> list:
    """This module's findings for one candidate scored as the run's best."""
    evaluation = Evaluation(
        "best", str(ckpt), script, official.raw.get("val_value"), task.metric, None, 0.0, 0, official
    )
    ctx = Context(tmp_path, tmp_path, task.id, (), {}, [evaluation], 0.0, 60.0, [], [], True, task_dir=task.folder)
    return [v for check in labels.CHECKS for v in check(ctx)]


@pytest.mark.slow
@pytest.mark.mirror
@pytest.mark.parametrize("tuned", [False, True], ids=["default", "tuned"])
def test_the_real_t6_baselines_raise_no_flag(real_mirror, tmp_path, monkeypatch, tuned):
    """The DLinear baseline and the tuned one (baselines/results/t6.json), trained on the real ETTh1 on the CPU and
    scored by the real scorer: no target found, test/val error ratio above the margin (measured 0.57), not beyond
    the reference (0.370-0.378 against 0.375 - 0.05)."""
    name = "t6_time_series_forecasting"
    task = load_task(TASKS_DIR / name)
    ws = copy_task(TASKS_DIR / name, tmp_path / "ws")
    proc = run_prepare(ws, "--prepare", "--raw-dir", str(real_mirror / "ETTh1"), "--data-dir", "data")
    assert proc.returncode == 0, proc.stderr
    with task_modules(ws) as (_, train):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        config = dict(train.CONFIG)
        if tuned:
            config = json.loads((TASKS_DIR.parent / "baselines" / "results" / "t6.json").read_text())["config"]
        train.main(config)
    best = min((ws / "checkpoints").glob("*.pt"), key=lambda p: torch.load(p, weights_only=True)["val_score"])
    eval_dir = ev.stage(task, ws, tmp_path / "eval" / "00-best", best)
    official = ev.evaluate(ScoringJob(task.folder, ws / "data", eval_dir, "train.py", sandboxed=probe() is None))
    assert official.ok, official.why_not
    assert official.raw["label_scan"]["found"] == [] and official.raw["label_scan"]["windows"] == 2 * leakage.WINDOWS
    assert _audit_checks(task, official, best, "train.py", tmp_path) == []


def test_a_large_checkpoint_is_searched_whole_once_a_first_window_is_there(small, tmp_path, monkeypatch):
    """Over a large blob the scan first looks for a few windows of each encoding; a copy of the split is still
    found with all its windows, a compressed zip entry is inflated, and an honest large blob is not claimed."""
    monkeypatch.setattr(leakage, "LARGE", 0)  # every blob counts as large
    name = "t6_time_series_forecasting"
    folder = _stage(small, name, tmp_path / "eval")
    assert _scan(small, name, folder)["found"] == []
    _, _, plant = _targets(small, name)
    payload = torch.load(folder / ev.CHECKPOINT, weights_only=True)
    payload["lookup"] = torch.from_numpy(plant.copy())
    torch.save(payload, folder / ev.CHECKPOINT)
    (hit,) = [f for f in _scan(small, name, folder)["found"] if f["encoding"] == "float32"]
    assert hit["windows"] == hit["of"] == leakage.WINDOWS and "(tensor 'lookup')" in hit["where"]
    with zipfile.ZipFile(folder / ev.CHECKPOINT) as src, zipfile.ZipFile(tmp_path / "z.pt", "w") as out:
        for info in src.infolist():  # the same archive, every entry deflated: torch.load reads it all the same
            out.writestr(info.filename, src.read(info), compress_type=zipfile.ZIP_DEFLATED)
    shutil.move(tmp_path / "z.pt", folder / ev.CHECKPOINT)
    assert torch.load(folder / ev.CHECKPOINT, weights_only=True)["lookup"].shape == plant.shape
    found = _scan(small, name, folder)["found"]
    assert any(f["encoding"] == "float32" and f["windows"] == leakage.WINDOWS for f in found), found
