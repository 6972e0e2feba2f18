"""Task T1 (TinyShakespeare): preparation, the val_bpb metric, the baseline and prepare.py --eval.

Runs on a small fake input.txt with the real 65-character vocabulary; the tests marked
`mirror` use the real file from BENCH_DATA_MIRROR.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import random
import string
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

from bench.tasks import load_task
from tests.tasks.taskfolder import copy_task, last_json, run_prepare, task_modules

TASK_DIR = Path(__file__).resolve().parents[2] / "tasks" / "t1_language_modeling"
REAL_VOCAB = "\n !$&',-.3:;?" + string.ascii_uppercase + string.ascii_lowercase  # the 65 characters of input.txt
TINY = {
    "block_size": 16,
    "n_layer": 1,
    "n_head": 2,
    "d_model": 32,
    "batch_size": 8,
    "epochs": 2,
    "warmup_steps": 5,
    "eval_every": 10**9,
}  # validation + checkpoint at the end of each epoch only
N_FAKE = 6000  # characters: 5400 train, 600 val


def fake_shakespeare(n_chars: int = N_FAKE, seed: int = 0) -> str:
    """Play-like text that uses every character of the real vocabulary (first line) and nothing else."""
    rng = random.Random(seed)
    lines = [REAL_VOCAB.replace("\n", "")]
    while sum(len(line) + 1 for line in lines) < n_chars:
        speaker = rng.choice(["FIRST CITIZEN", "MENENIUS", "ROMEO", "JULIET", "KING RICHARD III"])
        words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(1, 8))) for _ in range(rng.randint(3, 12))]
        lines += [f"{speaker}:", " ".join(words) + rng.choice([".", ",", "!", "?", ";", ":", "'", " - &3$"]), ""]
    return ("\n".join(lines) + "\n")[:n_chars]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A copy of the task folder with data/ prepared from a fake input.txt."""
    root = tmp_path_factory.mktemp("t1")
    ws = root / "ws"
    copy_task(TASK_DIR, ws)
    (root / "raw").mkdir()
    (root / "raw" / "input.txt").write_text(fake_shakespeare(), encoding="utf-8")
    proc = run_prepare(ws, "--prepare", "--raw-dir", str(root / "raw"), "--data-dir", "data")
    assert proc.returncode == 0, proc.stderr
    return ws


@pytest.fixture(scope="module")
def trained(workspace) -> dict:
    """Train the baseline with a tiny config for two epochs; returns its log and checkpoint paths."""
    out = io.StringIO()
    with task_modules(workspace) as (_, train), contextlib.redirect_stdout(out):
        train.main(dict(train.CONFIG, **TINY))
    return {"log": out.getvalue(), "checkpoints": sorted((workspace / "checkpoints").glob("*.pt"))}


def test_task_toml_loads():
    task = load_task(TASK_DIR)
    assert (task.id, task.metric, task.direction, task.eval_split) == ("t1", "val_bpb", "min", "val")
    assert (task.budget_minutes, task.baseline_score, task.reference_score) == (40, 3.438, 2.120)
    (src,) = task.data
    assert (src.file, src.mirror, src.size) == ("input.txt", "tinyshakespeare/input.txt", 1115394)
    assert src.sha256 == "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"


def test_prepare_writes_uint16_splits(workspace):
    text = fake_shakespeare()
    meta = json.loads((workspace / "data" / "meta.json").read_text(encoding="utf-8"))
    assert "".join(meta["vocab"]) == REAL_VOCAB and meta["vocab_size"] == 65
    train = np.fromfile(workspace / "data" / "train.bin", dtype=np.uint16)
    val = np.fromfile(workspace / "data" / "val.bin", dtype=np.uint16)
    assert (len(train), len(val)) == (5400, 600)  # first 90 % / last 10 %
    decoded = "".join(meta["vocab"][i] for i in np.concatenate([train, val]))
    assert decoded == text


class BigramTable(nn.Module):
    """logits[b, t] = table[idx[b, t]]: its cross-entropy is easy to compute by hand."""

    def __init__(self, table: torch.Tensor, as_tuple: bool = False):
        super().__init__()
        self.table = nn.Parameter(table)
        self.as_tuple = as_tuple

    def forward(self, idx):
        logits = self.table[idx]
        return (logits, None) if self.as_tuple else logits


def test_metric_matches_hand_computation(workspace):
    with task_modules(workspace) as (prepare, _):
        ids = np.array([0, 1, 2, 0, 1, 1, 2, 0, 2, 1], dtype=np.uint16)
        # block_size 3 -> blocks of 4: [0 1 2 0] [1 1 2 0] and the tail [2 1]; the first id of a block is not predicted
        assert prepare.eval_blocks(len(ids), 3) == [(0, 4), (4, 8), (8, 10)]
        pairs = [(0, 1), (1, 2), (2, 0), (1, 1), (1, 2), (2, 0), (2, 1)]
        table = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 3.0], [1.0, -2.0, 0.0]])
        expected_nats = [-(table[a][b] - math.log(sum(math.exp(v) for v in table[a].tolist()))) for a, b in pairs]
        expected = sum(float(n) for n in expected_nats) / len(pairs) / math.log(2)

        for batch_size in (1, 64):
            bpb, n = prepare.evaluate_bpb(BigramTable(table), ids, block_size=3, batch_size=batch_size)
            assert n == 7 and bpb == pytest.approx(expected, rel=1e-6)
        bpb, _ = prepare.evaluate_bpb(BigramTable(table, as_tuple=True), ids, block_size=3)
        assert bpb == pytest.approx(expected, rel=1e-6)
        uniform, _ = prepare.evaluate_bpb(BigramTable(torch.zeros(65, 65)), ids, block_size=256)
        assert uniform == pytest.approx(math.log2(65), rel=1e-6)


def test_metric_rejects_wrong_output_shape(workspace):
    class LastPositionOnly(nn.Module):
        def forward(self, idx):
            return torch.zeros(idx.shape[0], 1, 65)

    with task_modules(workspace) as (prepare, _):
        with pytest.raises(ValueError, match="prediction at every position"):
            prepare.evaluate_bpb(LastPositionOnly(), np.zeros(50, dtype=np.uint16), block_size=8)
        with pytest.raises(ValueError, match="vocabulary has 65"):
            prepare.evaluate_bpb(BigramTable(torch.zeros(10, 10)), np.zeros(50, dtype=np.uint16), 8, vocab_size=65)


def test_baseline_trains_logs_and_checkpoints(trained):
    log = trained["log"]
    assert "step 10 | loss " in log
    assert log.count("val_bpb") >= 2  # one validation line per epoch
    assert len(trained["checkpoints"]) == 2  # one checkpoint per epoch
    assert all(p.name.startswith("train_step") for p in trained["checkpoints"])


def test_eval_cli_scores_checkpoint(workspace, trained):
    ckpt = trained["checkpoints"][-1]
    proc = run_prepare(workspace, "--eval", str(ckpt.relative_to(workspace)), "--device", "cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = last_json(proc)
    assert {k: result[k] for k in ("task", "metric", "direction", "split")} == {
        "task": "t1",
        "metric": "val_bpb",
        "direction": "min",
        "split": "val",
    }
    assert math.isfinite(result["value"]) and 0 < result["value"] < math.log2(65) + 1
    assert result["n"] == 35 * 16 + 4  # 600 val ids: 35 blocks of 17, then a tail of 5
    assert os.path.basename(result["script"]) == "train.py" and result["seconds"] >= 0
    payload = torch.load(ckpt, weights_only=True)
    assert result["value"] == pytest.approx(payload["val_score"], abs=1e-5)  # same function as train.py's


def test_eval_rejects_compiled_state_dict(workspace, trained):
    payload = torch.load(trained["checkpoints"][-1], weights_only=True)
    payload["state_dict"] = {"_orig_mod." + k: v for k, v in payload["state_dict"].items()}
    bad = workspace / "compiled.ckpt"
    torch.save(payload, bad)
    proc = run_prepare(workspace, "--eval", str(bad), "--device", "cpu")
    assert proc.returncode == 1
    result = last_json(proc)
    assert result["task"] == "t1" and "_orig_mod." in result["error"] and "value" not in result


def test_script_without_build_model_is_rejected(workspace):
    (workspace / "run_nobuild.py").write_text("CONFIG = {}\n", encoding="utf-8")
    with task_modules(workspace) as (prepare, _):
        with pytest.raises(AttributeError, match="build_model"):
            prepare.load_build_model(str(workspace / "run_nobuild.py"))


def mirror_file() -> Path:
    mirror = os.environ.get("BENCH_DATA_MIRROR")
    if not mirror:
        pytest.skip("set BENCH_DATA_MIRROR=... to run against the real data")
    return Path(mirror) / "tinyshakespeare" / "input.txt"


@pytest.mark.mirror
def test_real_data_prepares_and_untrained_model_scores_log2_65(tmp_path):
    raw = mirror_file()
    assert hashlib.sha256(raw.read_bytes()).hexdigest() == load_task(TASK_DIR).data[0].sha256
    ws = tmp_path / "ws"
    copy_task(TASK_DIR, ws)
    proc = run_prepare(ws, "--prepare", "--raw-dir", str(raw.parent), "--data-dir", "data")
    assert proc.returncode == 0, proc.stderr
    with task_modules(ws) as (prepare, train):
        meta = prepare.load_meta()
        assert meta["vocab_size"] == 65 and "".join(meta["vocab"]) == REAL_VOCAB
        assert (len(prepare.load_ids("train")), len(prepare.load_ids("val"))) == (1003854, 111540)
        torch.manual_seed(0)
        model = train.build_model(dict(train.CONFIG, n_layer=1, d_model=32, n_head=2))  # untrained, block_size 256
        bpb, n = prepare.evaluate_bpb(model, prepare.load_ids("val"), 256, vocab_size=65)
    assert n == 434 * 256 + 1  # 111,540 ids: 434 blocks of 257, then a tail of 2
    assert bpb == pytest.approx(math.log2(65), abs=0.2)
