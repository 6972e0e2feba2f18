"""Task T1 (TinyShakespeare): preparation, the val_bpb metric, the baseline and prepare.py --eval.

Runs on a small fake input.txt with the real 65-character vocabulary (tests/tasks/smalldata.py); the tests marked
`mirror` use the real file from BENCH_DATA_MIRROR. What every task promises (the checkpoint payload, the --eval JSON,
strict loading, errors as JSON, val_score = the evaluator's score) is checked in test_conformance.py.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from bench.tasks import load_task
from tests.tasks.smalldata import REAL_VOCAB
from tests.tasks.taskfolder import copy_task, last_json, run_prepare, task_modules

TASK_DIR = Path(__file__).resolve().parents[2] / "tasks" / "t1_language_modeling"


@pytest.fixture(scope="module")
def workspace(small) -> Path:
    """A copy of the task folder with data/ prepared from a fake input.txt (made once per session)."""
    return small.prepared(TASK_DIR.name)["ws"]


@pytest.fixture(scope="module")
def trained(small) -> dict:
    """The baseline trained with a tiny config for two epochs (once per session): its log and checkpoint paths."""
    return small.trained(TASK_DIR.name)


def test_task_toml_loads():
    task = load_task(TASK_DIR)
    assert (task.id, task.metric, task.direction, task.eval_split) == ("t1", "val_bpb", "min", "val")
    assert (task.budget_minutes, task.baseline_score, task.reference_score) == (40, 3.438, 2.120)
    (src,) = task.data
    assert (src.file, src.mirror, src.size) == ("input.txt", "tinyshakespeare/input.txt", 1115394)
    assert src.sha256 == "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"


def test_prepare_writes_uint16_splits(small, workspace):
    text = small.prepared(TASK_DIR.name)["text"]
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
    assert log.count(" | val_bpb ") == 2  # one validation line per epoch (log_metrics), and no other
    assert len(trained["checkpoints"]) == 2  # one checkpoint per epoch
    assert all(p.name.startswith("train_step") for p in trained["checkpoints"])


def test_official_score_is_the_bpb_of_every_val_block_by_hand(small, workspace):
    """The --eval value of the trained baseline, recomputed here: the 600 val ids cut into 35 blocks of 17 and a
    tail of 5, each block predicting all but its first id; the mean cross-entropy over those 564 ids, in bits."""
    run = small.official(TASK_DIR.name)
    result = last_json(run["proc"])
    assert result["n"] == 35 * 16 + 4
    payload = torch.load(run["checkpoint"], weights_only=True)
    with task_modules(workspace) as (_, train):
        model = train.build_model(payload["config"])
    model.load_state_dict(payload["state_dict"])
    model.eval()
    ids = torch.from_numpy(np.fromfile(workspace / "data" / "val.bin", dtype=np.uint16).astype(np.int64))
    nats, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(ids), 17):
            block = ids[start : start + 17]
            logits = model(block[None, :-1])[0]
            nats += F.cross_entropy(logits.double(), block[1:], reduction="sum").item()
            count += len(block) - 1
    assert (count, len(block)) == (564, 5)
    assert result["value"] == pytest.approx(nats / count / math.log(2), rel=1e-6)  # float32 logits, ~8 ulps


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
