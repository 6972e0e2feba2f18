"""Task T1 (TinyShakespeare): preparation, the val_bpb metric, the feed order, the baseline, prepare.py --eval and
the official score through the harness's scorer (bench.scoring.scorer), causality check included.

Runs on a small fake input.txt with the real 65-character vocabulary (tests/tasks/smalldata.py); the tests marked
`mirror` use the real file from BENCH_DATA_MIRROR. What every task promises (the checkpoint payload, the --eval JSON,
strict loading, errors as JSON, val_score = the evaluator's score) is checked in test_conformance.py.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from bench.tasks import load_task
from tests.tasks.smalldata import REAL_VOCAB
from tests.tasks.taskfolder import PROBES, copy_task, last_json, run_prepare, run_scorer, stage_eval, task_modules

TASK_DIR = Path(__file__).resolve().parents[2] / "tasks" / "t1_language_modeling"
# 600 val ids of the fake text: 2 blocks of 257 and a tail of 86, each block predicting all but its first id
N_PREDICTED = 2 * 256 + 85


@pytest.fixture(scope="module")
def workspace(small) -> Path:
    """A copy of the task folder with data/ prepared from a fake input.txt (made once per session)."""
    return small.prepared(TASK_DIR.name)["ws"]


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


def hand_bpb(model: nn.Module, ids: np.ndarray, block: int = 257) -> tuple[float, int]:
    """The old evaluation's definition, written out: consecutive blocks of `block` ids (the tail a shorter one),
    model(block[:-1]) one block at a time, the cross-entropy of every next id by numpy in float64, in bits."""
    ids = ids.astype(np.int64)
    nats, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(ids) - 1, block):
            chunk = ids[start : start + block]
            if len(chunk) < 2:
                break
            out = model(torch.from_numpy(chunk[None, :-1]))
            z = (out[0] if isinstance(out, tuple) else out)[0].double().numpy()
            log_norm = np.log(np.exp(z - z.max(axis=1, keepdims=True)).sum(axis=1)) + z.max(axis=1)
            nats += float((log_norm - z[np.arange(len(chunk) - 1), chunk[1:]]).sum())
            count += len(chunk) - 1
    return nats / count / math.log(2), count


def old_evaluate_bpb(model: nn.Module, ids: np.ndarray, block_size: int, batch_size: int = 64) -> tuple[float, int]:
    """The evaluation before the harness's scorer (prepare.evaluate_bpb with the checkpoint's block_size), copied
    here: full blocks of block_size + 1 in batches of 64 in text order, then the tail alone; float32 cross-entropy
    summed in float64."""
    data = torch.from_numpy(ids.astype(np.int64))
    step = block_size + 1
    blocks = [(s, s + step) for s in range(0, len(data) - step + 1, step)]
    tail = blocks[-1][1] if blocks else 0
    batches = [
        torch.stack([data[s:e] for s, e in blocks[i : i + batch_size]]) for i in range(0, len(blocks), batch_size)
    ]
    if len(data) - tail >= 2:
        batches.append(data[tail:].unsqueeze(0))
    model.eval()
    total, n = torch.zeros((), dtype=torch.float64), 0
    with torch.no_grad():
        for batch in batches:
            x, y = batch[:, :-1], batch[:, 1:]
            logits = model(x)
            total += F.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum"
            ).double()
            n += y.numel()
    return total.item() / n / math.log(2), n


def rebuilt(workspace: Path, checkpoint: Path) -> nn.Module:
    payload = torch.load(checkpoint, weights_only=True)
    with task_modules(workspace) as (_, train):
        model = train.build_model(payload["config"])
    model.load_state_dict(payload["state_dict"])
    return model.eval()


def test_official_score_is_the_bpb_of_every_val_block_by_hand(small, workspace):
    """The --eval value of the trained baseline (block_size 16), recomputed here: the 600 val ids cut into 2 blocks
    of 257 and a tail of 86 whatever the model's block_size, each block predicting all but its first id; the mean
    cross-entropy over those 597 ids, in bits. The model runs a 256-id input in windows of its 16 positions."""
    run = small.official(TASK_DIR.name)
    result = last_json(run["proc"])
    assert result["n"] == N_PREDICTED
    model = rebuilt(workspace, run["checkpoint"])
    assert model.block_size == 16
    ids = np.fromfile(workspace / "data" / "val.bin", dtype=np.uint16)
    value, count = hand_bpb(model, ids)
    assert count == N_PREDICTED
    assert result["value"] == pytest.approx(value, rel=1e-6)  # float32 logits, ~8 ulps


# ---------------------------------------------------------------------------
# The feed: what the harness sends the predictor, in which order
# ---------------------------------------------------------------------------


def write_val(data_dir: Path, ids: np.ndarray) -> None:
    data_dir.mkdir(parents=True)
    ids.astype(np.uint16).tofile(data_dir / "val.bin")
    (data_dir / "meta.json").write_text(json.dumps({"vocab": list(REAL_VOCAB), "vocab_size": 65}), encoding="utf-8")


def fed_blocks(batches: list, ids: np.ndarray) -> list[list[int]]:
    """Which block (0, 1, ...: ids[257 k : 257 k + 257]) each fed row is, batch by batch; checks inputs/targets."""
    starts = {ids[s : min(s + 257, len(ids)) - 1].tobytes(): s for s in range(0, len(ids) - 1, 257)}  # by input
    order = []
    for inputs, targets in batches:
        assert set(inputs) == {"idx"} and inputs["idx"].dtype == np.int64 and targets.dtype == np.int64
        rows = []
        for x, y in zip(inputs["idx"], targets, strict=True):
            s = starts[x.astype(np.uint16).tobytes()]
            assert np.array_equal(x, ids[s : s + len(x)]) and np.array_equal(y, ids[s + 1 : s + 1 + len(y)])
            rows.append(s // 257)
        order.append(rows)
    return order


def test_feed_never_shows_a_block_before_or_with_the_block_before_it(workspace, tmp_path):
    """eval_batches(FEED_BATCH_SIZE), the harness's feed: every block after the one before it, none two at once.
    Other batch sizes (evaluate()'s): strided, so no batch holds two adjacent blocks; every block exactly once."""
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 65, 23 * 257 + 90).astype(np.uint16)  # 23 full blocks and a tail of 90 (89 predictions)
    write_val(tmp_path / "data", ids)
    with task_modules(workspace) as (prepare, _):
        assert (prepare.FEED_BATCH_SIZE, prepare.CAUSAL_INPUT, prepare.EVAL_BLOCK_SIZE) == (1, "idx", 256)
        feed = fed_blocks(prepare.eval_batches("val", str(tmp_path / "data"), prepare.FEED_BATCH_SIZE), ids)
        when = {block: i for i, rows in enumerate(feed) for block in rows}
        assert sorted(when) == list(range(24))
        assert all(when[b + 1] > when[b] for b in range(23)), feed  # strictly later: never before, never with
        for batch_size in (2, 5, 7, 23, 64):
            batches = prepare.eval_batches("val", str(tmp_path / "data"), batch_size)
            order = fed_blocks(batches, ids)
            assert sorted(b for rows in order for b in rows) == list(range(24)), batch_size  # each block once
            assert order[-1] == [23] and len(batches[-1][0]["idx"][0]) == 89  # the tail alone, last
            stride = len(order) - 1
            assert order[:-1] == [list(range(j, 23, stride)) for j in range(stride)], batch_size
            assert all(len(rows) <= batch_size for rows in order), batch_size
            for rows in order:
                assert not any(b + 1 in rows for b in rows), (batch_size, rows)  # no two adjacent blocks
        # the real val.bin: 111,540 ids -> 434 full blocks and a tail, fed one at a time in text order
        assert prepare.feed_order(434, prepare.FEED_BATCH_SIZE) == [[b] for b in range(434)]
        assert len(prepare.feed_order(434, 64)) == 7 and prepare.feed_order(2, 64) == [[0], [1]]


# ---------------------------------------------------------------------------
# The official score, by the harness's scorer
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def context_256(workspace, tmp_path_factory) -> dict:
    """A tiny baseline with block_size 256, the evaluation's context (two steps of training): its checkpoint."""
    ws = copy_task(TASK_DIR, tmp_path_factory.mktemp("t1-ctx256") / "ws")
    shutil.copytree(workspace / "data", ws / "data")
    config = {"block_size": 256, "n_layer": 1, "n_head": 2, "d_model": 32, "batch_size": 8, "epochs": 1}
    with task_modules(ws) as (_, train), pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.cuda, "is_available", lambda: False)
        train.main(dict(train.CONFIG, **config, warmup_steps=1, eval_every=10**9))
    (checkpoint,) = (ws / "checkpoints").glob("*.pt")
    return {"ws": ws, "checkpoint": checkpoint}


def test_scorer_value_is_the_hand_value_and_the_old_evaluations(context_256, tmp_path):
    """The official value of a block_size-256 model (the baseline's context) through the real scorer = the bpb by
    hand (numpy) = the old evaluation of the same checkpoint (its own block_size, 256) = the script's val_score."""
    ws = context_256["ws"]
    eval_dir = stage_eval(tmp_path / "eval", TASK_DIR, context_256["checkpoint"], {"train.py": ws / "train.py"})
    code, result = run_scorer(TASK_DIR, ws / "data", eval_dir)
    assert code == 0 and "error" not in result, result
    assert (result["task"], result["metric"], result["split"], result["n"]) == ("t1", "val_bpb", "val", N_PREDICTED)
    assert result["checks"] == [*PROBES, "causality"]
    model = rebuilt(ws, context_256["checkpoint"])
    ids = np.fromfile(ws / "data" / "val.bin", dtype=np.uint16)
    by_hand, count = hand_bpb(model, ids)
    old, old_count = old_evaluate_bpb(model, ids, torch.load(context_256["checkpoint"])["config"]["block_size"])
    assert count == old_count == N_PREDICTED
    assert result["value"] == pytest.approx(by_hand, rel=1e-6)
    assert result["value"] == pytest.approx(old, rel=1e-6)
    assert result["value"] == pytest.approx(torch.load(context_256["checkpoint"])["val_score"], rel=1e-6)
    assert 5.5 < result["value"] < 6.5  # two steps from log2(65) = 6.02: a real model, not a degenerate one


def test_scorer_passes_the_trained_baseline(small, workspace, tmp_path):
    """The honest baseline (block_size 16: windows of 16 inside each 256-id block) passes every check, and the
    scorer's value is prepare.py --eval's."""
    run = small.official(TASK_DIR.name)
    eval_dir = stage_eval(tmp_path / "eval", TASK_DIR, run["checkpoint"], {"train.py": workspace / "train.py"})
    code, result = run_scorer(TASK_DIR, workspace / "data", eval_dir)
    assert code == 0 and "error" not in result, result
    assert result["checks"] == [*PROBES, "causality"]
    assert result["value"] == pytest.approx(last_json(run["proc"])["value"], rel=1e-6)


PEEK = """
import torch
import torch.nn as nn


class Peek(nn.Module):
    \"\"\"Predicts the character at t from the one at t + 1: the target itself. Not causal.\"\"\"

    def __init__(self, config):
        super().__init__()
        self.sharpness = nn.Parameter(torch.tensor(20.0))
        self.vocab_size = config["vocab_size"]

    def forward(self, idx):
        following = torch.cat([idx[:, 1:], idx[:, -1:]], dim=1)
        return nn.functional.one_hot(following, self.vocab_size).float() * self.sharpness


def build_model(config):
    return Peek(config)


if __name__ == "__main__":
    pass
"""


def test_scorer_disqualifies_a_model_that_reads_the_next_character(workspace, tmp_path):
    """An agent script whose model reads position t + 1 to predict t: in one process it scores ~0 bpb (the
    exploit is real); the scorer answers with an error and a violation about causality, and no value."""
    script = tmp_path / "run_peek.py"
    script.write_text(PEEK, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("run_peek", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.build_model({"vocab_size": 65})
    with task_modules(workspace) as (prepare, _):
        cheat = prepare.evaluate(model, "val")["val_bpb"]
        assert cheat < 0.2  # 255 of every 256 targets read off the input
        checkpoint = Path(prepare.save_checkpoint(model, {"vocab_size": 65}, cheat, path=str(tmp_path / "peek.pt")))
    eval_dir = stage_eval(tmp_path / "eval", TASK_DIR, checkpoint, {"run_peek.py": script})
    code, result = run_scorer(TASK_DIR, workspace / "data", eval_dir, "run_peek.py")
    assert code == 1 and "value" not in result, result
    assert "causal" in result["error"] and result["violation"] == result["error"], result


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
