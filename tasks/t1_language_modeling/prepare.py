"""Task T1, character-level language modelling on TinyShakespeare: data, evaluation, checkpoints.

LOCKED: do not modify this file; the harness evaluates with the original.

Read it top to bottom, like a tutorial:
  1. constants
  2. preparation: raw input.txt -> data/train.bin, data/val.bin, data/meta.json
  3. loaders that your training script imports
  4. the evaluation (the official metric, val_bpb, on fixed 256-character blocks)
  5. checkpoint + logging helpers (the output contract: task_helpers.py, shared by all seven tasks)
  6. the command line:
       python prepare.py --prepare --raw-dir RAW --data-dir OUT    # build data/ (the harness does this)
       python prepare.py --eval checkpoints/<file>.pt              # your own check: one JSON line with val_bpb
                                                                   # (the harness scores officially)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn

# The checkpoint and logging helpers every task shares live in task_helpers.py beside this file (locked too);
# section 5 gives two of them this task's metric. Training scripts import them all from here:
# `from prepare import log_metrics, save_checkpoint`.
from task_helpers import CHECKPOINT_DIR, load_build_model, load_checkpoint, log_metrics, rebuild_model  # noqa: F401
from task_helpers import save_checkpoint as helpers_save_checkpoint
from task_helpers import self_check as helpers_self_check

# ---------------------------------------------------------------------------
# 1. Constants
# ---------------------------------------------------------------------------

TASK_ID = "t1"
METRIC = "val_bpb"  # bits per character on the validation split: mean cross-entropy (nats) / ln 2
DIRECTION = "min"  # lower is better
EVAL_SPLIT = "val"
DATA_DIR = "data"

RAW_FILE = "input.txt"  # TinyShakespeare, 1,115,394 characters
TRAIN_FRACTION = 0.9  # the first 90 % of the characters train, the last 10 % validate
# The evaluation context, the same for every model (the baseline's block_size): models are scored on blocks of
# 256 characters whatever their own config says, so a model must accept inputs of up to 256 positions.
EVAL_BLOCK_SIZE = 256
DEFAULT_BLOCK_SIZE = EVAL_BLOCK_SIZE  # the older name (evaluate_bpb's default)
EVAL_BATCH_SIZE = 64  # blocks per forward pass in evaluate() (changes the score only by float rounding)


# ---------------------------------------------------------------------------
# 2. Preparation: one text file -> character ids
# The vocabulary is the sorted set of characters of the whole file (65 for
# TinyShakespeare). Every character becomes its index in that list, stored as
# uint16 in a flat binary file (read it back with np.fromfile(..., np.uint16)).
# ---------------------------------------------------------------------------


def prepare_data(raw_dir: str, data_dir: str) -> dict:
    """Build train.bin, val.bin and meta.json in data_dir from raw_dir/input.txt."""
    with open(os.path.join(raw_dir, RAW_FILE), encoding="utf-8", newline="") as f:  # keep the text byte for byte
        text = f.read()
    vocab = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(vocab)}
    ids = np.array([stoi[ch] for ch in text], dtype=np.uint16)

    n_train = int(len(ids) * TRAIN_FRACTION)  # 1,003,854 of 1,115,394 for the real file
    os.makedirs(data_dir, exist_ok=True)
    ids[:n_train].tofile(os.path.join(data_dir, "train.bin"))
    ids[n_train:].tofile(os.path.join(data_dir, "val.bin"))
    meta = {"vocab": vocab, "vocab_size": len(vocab), "train_chars": n_train, "val_chars": len(ids) - n_train}
    with open(os.path.join(data_dir, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1)
    return meta


# ---------------------------------------------------------------------------
# 3. Loaders for training scripts
# ---------------------------------------------------------------------------


def load_ids(split: str, data_dir: str = DATA_DIR) -> np.ndarray:
    """The character ids of one split ("train" or "val") as a 1-D uint16 array."""
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', not {split!r}")
    return np.fromfile(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16)


def load_meta(data_dir: str = DATA_DIR) -> dict:
    """The vocabulary: {"vocab": [65 characters], "vocab_size": 65, "train_chars": ..., "val_chars": ...}."""
    with open(os.path.join(data_dir, "meta.json"), encoding="utf-8") as f:
        return json.load(f)


def encode(text: str, meta: dict) -> list[int]:
    """Characters -> ids (for sampling prompts)."""
    stoi = {ch: i for i, ch in enumerate(meta["vocab"])}
    return [stoi[ch] for ch in text]


def decode(ids, meta: dict) -> str:
    """Ids -> characters (for printing samples)."""
    return "".join(meta["vocab"][int(i)] for i in ids)


# ---------------------------------------------------------------------------
# 4. Evaluation: bits per character on a split
# The ids are cut into consecutive, non-overlapping blocks of EVAL_BLOCK_SIZE + 1
# = 257 characters. Inside a block the model reads the first 256 characters and
# predicts each next one, so a block of L characters scores L - 1 predictions
# (the first character of every block is context only). The tail that is
# shorter than a full block is scored as one last, shorter block. The blocks
# are the same for every model, whatever block_size its config names: a model
# with a shorter context must still accept 256 positions (the baseline runs
# longer inputs in windows of its block_size), and one with a longer context
# sees 256 characters. The score is the mean cross-entropy over all predicted
# characters, in bits.
#
# The harness scores a checkpoint in two processes: a sandboxed predictor runs
# the model through forward() on the inputs of eval_batches(), and a scorer
# that never runs your code compares its outputs with the targets in score().
# evaluate() does all three in one process: call it for your validation score.
# ---------------------------------------------------------------------------

# The targets of a block are its own input shifted by one, so the model must be
# causal: its logits at position t may depend on positions <= t only. The harness
# checks this (CAUSAL_INPUT: positions after a cut are replaced, the logits up to
# the cut must not change). Blocks do not overlap, but block b + 1 starts with the
# character right after block b's last target, so the harness feeds the blocks one
# at a time, in text order, each only after the outputs of the one before came
# back: no input ever shows text that follows a target not yet predicted. (Any
# batch size gives the same bpb up to float rounding; one block of 256 characters
# is a small forward pass, 435 of them for the real val.bin.)
FEED_BATCH_SIZE = 1
CAUSAL_INPUT = "idx"


def eval_blocks(n_ids: int, block_size: int = EVAL_BLOCK_SIZE) -> list[tuple[int, int]]:
    """(start, end) of every evaluation block over n_ids characters (end exclusive)."""
    step = block_size + 1
    blocks = [(s, s + step) for s in range(0, n_ids - step + 1, step)]
    tail_start = blocks[-1][1] if blocks else 0
    if n_ids - tail_start >= 2:  # a tail of one character has nothing to predict
        blocks.append((tail_start, n_ids))
    return blocks


def feed_order(n_blocks: int, batch_size: int) -> list[list[int]]:
    """Which full blocks go into which batch: strided, batch j = blocks j, j + S, j + 2S, ... for j = 0 .. S - 1.

    S, the number of batches, is at least 2 (for 2 blocks or more), so no batch holds two adjacent blocks; with
    batch_size 1 (the harness's feed) batch j is block j, so every block comes after the block before it.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, not {batch_size}")
    if n_blocks == 0:
        return []
    stride = max(-(-n_blocks // batch_size), min(n_blocks, 2))
    return [list(range(j, n_blocks, stride)) for j in range(stride)]


def block_batches(ids: np.ndarray, block_size: int = EVAL_BLOCK_SIZE, batch_size: int = EVAL_BATCH_SIZE) -> list:
    """[(inputs, targets)] over `ids`: inputs {"idx": int64 [b, T]}, targets int64 [b, T] (the inputs shifted by one).

    Full blocks in the strided order of feed_order(), then the shorter tail block alone.
    """
    block_size = int(block_size)
    if block_size < 1:
        raise ValueError(f"block_size must be a positive integer, not {block_size}")
    data = np.asarray(ids).astype(np.int64)
    blocks = eval_blocks(len(data), block_size)
    full = [b for b in blocks if b[1] - b[0] == block_size + 1]
    batches = [np.stack([data[full[i][0] : full[i][1]] for i in rows]) for rows in feed_order(len(full), batch_size)]
    if len(full) < len(blocks):  # the shorter tail block goes alone, last
        s, e = blocks[-1]
        batches.append(data[s:e][None])
    return [({"idx": np.ascontiguousarray(b[:, :-1])}, np.ascontiguousarray(b[:, 1:])) for b in batches]


def eval_batches(split: str = EVAL_SPLIT, data_dir: str = DATA_DIR, batch_size: int = EVAL_BATCH_SIZE) -> list:
    """[(inputs, targets)] of `split` in the order the harness feeds them: block_batches() of its ids, 256 a block."""
    return block_batches(load_ids(split, data_dir), EVAL_BLOCK_SIZE, batch_size)


def forward(model: nn.Module, inputs: dict) -> torch.Tensor:
    """The forward contract: model(idx), idx int64 [B, T] (T <= 256) -> logits [B, T, vocab_size] (float32 here).

    A tuple whose first element is the logits is accepted. bf16 autocast on CUDA, none on a CPU.
    """
    idx = inputs["idx"].long()
    with torch.autocast(device_type=idx.device.type, dtype=torch.bfloat16, enabled=idx.device.type == "cuda"):
        out = model(idx)
    logits = out[0] if isinstance(out, (tuple, list)) else out
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or tuple(logits.shape[:2]) != tuple(idx.shape):
        got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(
            f"model(idx) with idx of shape {tuple(idx.shape)} must return logits of shape "
            f"[{idx.shape[0]}, {idx.shape[1]}, vocab_size] (a prediction at every position), got {got}"
        )
    return logits.float()


def score(outputs: list, targets: list) -> dict:
    """Bits per character from the logits: {"val_bpb": mean cross-entropy / ln 2, "n": predicted characters}.

    The cross-entropy of each prediction is log-sum-exp(logits) - logits[target], in float64.
    """
    total, count, classes = 0.0, 0, None
    for logits, y in zip(outputs, targets, strict=True):
        if logits.ndim != 3 or tuple(logits.shape[:2]) != tuple(y.shape):
            raise ValueError(
                f"the model returned logits of shape {tuple(logits.shape)} for idx of shape {tuple(y.shape)}; "
                f"expected [{y.shape[0]}, {y.shape[1]}, vocab_size] (a prediction at every position)"
            )
        classes = logits.shape[-1] if classes is None else classes
        if logits.shape[-1] != classes or classes <= int(y.max(initial=0)):
            raise ValueError(f"logits have {logits.shape[-1]} classes; the text has ids up to {int(y.max())}")
        z = logits.astype(np.float64)
        top = z.max(axis=-1, keepdims=True)
        log_norm = top[..., 0] + np.log(np.exp(z - top).sum(axis=-1))
        total += float((log_norm - np.take_along_axis(z, y[..., None], axis=-1)[..., 0]).sum())
        count += y.size
    if count == 0:
        raise ValueError("no characters to predict")
    bpb = total / count / math.log(2)
    if not math.isfinite(bpb):
        raise ValueError(f"{METRIC} is {bpb}: the model produced non-finite logits")
    return {METRIC: bpb, "n": count}


@torch.no_grad()
def _evaluate(model: nn.Module, batches: list, device, vocab_size: int | None) -> dict:
    """score(forward(model, inputs)) over `batches`, in this process."""
    was_training = model.training
    model.eval()
    outputs = []
    try:
        for inputs, _ in batches:
            logits = forward(model, {k: torch.from_numpy(v).to(device) for k, v in inputs.items()})
            if vocab_size is not None and logits.shape[-1] != vocab_size:
                raise ValueError(f"logits have {logits.shape[-1]} classes, the vocabulary has {vocab_size}")
            outputs.append(logits.cpu().numpy())
    finally:
        model.train(was_training)
    return score(outputs, [y for _, y in batches])


def evaluate(
    model: nn.Module,
    split: str = EVAL_SPLIT,
    data_dir: str = DATA_DIR,
    device: str | torch.device = "cpu",
    batch_size: int = EVAL_BATCH_SIZE,
) -> dict:
    """score(forward(model, inputs)) over `split` in this process: {"val_bpb": float, "n": predicted characters}.

    evaluate(model, "val", device=...) is exactly the official metric: use it for the val_score you save.
    """
    return _evaluate(model, eval_batches(split, data_dir, batch_size), device, load_meta(data_dir)["vocab_size"])


def evaluate_bpb(
    model: nn.Module,
    ids: np.ndarray,
    block_size: int = EVAL_BLOCK_SIZE,
    batch_size: int = EVAL_BATCH_SIZE,
    device: str | torch.device = "cpu",
    vocab_size: int | None = None,
) -> tuple[float, int]:
    """(bits per character, number of predicted characters) of `model` on any `ids`, cut into blocks of block_size.

    With the validation ids and block_size 256 (the default) this is the official metric; another block_size
    gives another number (the official evaluation always uses 256).
    """
    result = _evaluate(model, block_batches(ids, block_size, batch_size), device, vocab_size)
    return result[METRIC], result["n"]


# ---------------------------------------------------------------------------
# 5. Checkpoint + logging helpers (the output contract, paper rule 7)
# They are the same for every task, so they live in task_helpers.py beside
# this file (locked too) and are imported at the top: log_metrics,
# load_checkpoint, rebuild_model. The two below give the shared ones this
# task's metric and evaluation.
# ---------------------------------------------------------------------------


def save_checkpoint(
    model: nn.Module, config: dict, val_score: float, *, step: int | None = None, path: str | None = None
) -> str:
    """Save a scored checkpoint into checkpoints/ and return its path (task_helpers.save_checkpoint).

    `config`: plain Python values, passed back to your script's build_model(config).
    `val_score`: your own measurement of METRIC on the validation split.
    """
    return helpers_save_checkpoint(model, config, val_score, METRIC, step=step, path=path)


def self_check(checkpoint: str, script: str | None = None, split: str = EVAL_SPLIT, **eval_options) -> dict:
    """Your own check of one checkpoint: rebuilt as the harness rebuilds it, scored by evaluate() here."""
    return helpers_self_check(
        checkpoint,
        script,
        split,
        evaluate=evaluate,
        task_id=TASK_ID,
        metric=METRIC,
        direction=DIRECTION,
        **eval_options,
    )


# ---------------------------------------------------------------------------
# 6. Command line
# ---------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prepare", action="store_true", help="build the prepared data from --raw-dir")
    parser.add_argument("--raw-dir", help="directory holding the verified raw input.txt")
    parser.add_argument("--eval", metavar="CHECKPOINT", help="score a checkpoint on the validation split")
    parser.add_argument("--script", help="training script with build_model (default: the checkpoint's, in cwd)")
    parser.add_argument("--data-dir", default=DATA_DIR, help=f"prepared data directory (default {DATA_DIR})")
    parser.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda when available")
    parser.add_argument("--batch-size", type=int, default=EVAL_BATCH_SIZE, help="blocks per evaluation batch")
    args = parser.parse_args()

    if args.prepare:
        if not args.raw_dir:
            parser.error("--prepare needs --raw-dir")
        meta = prepare_data(args.raw_dir, args.data_dir)
        print(
            f"prepared {args.data_dir}: vocab {meta['vocab_size']}, train {meta['train_chars']:,} chars, "
            f"val {meta['val_chars']:,} chars"
        )
    elif args.eval:
        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        try:
            result = self_check(
                args.eval, args.script, EVAL_SPLIT, data_dir=args.data_dir, device=device, batch_size=args.batch_size
            )
        except Exception as e:  # any failure becomes one JSON line saying what to fix
            print(json.dumps({"task": TASK_ID, "error": f"{type(e).__name__}: {e}"}))
            sys.exit(1)
        print(json.dumps(result))
    else:
        parser.error("give --prepare or --eval")


if __name__ == "__main__":
    main()
