# =============================================================================
# prepare.py for T7 (text classification, AG News, character level): LOCKED.
# Do not modify: the harness evaluates with the original copy of this file.
#
# What is here, in order:
#   1. constants (task, classes, sample counts, the validation carve, the character encoding)
#   2. preparation: train.csv + test.csv -> uint8 character codes + labels in data/
#   3. loaders the training scripts import (load_split, load_meta, encode)
#   4. the evaluation (accuracy; officially on the 7,600 test.csv samples)
#   5. checkpoint + logging helpers (task_helpers.py, shared by all seven tasks)
#   6. main(): the command line
#
#   python prepare.py --prepare --raw-dir RAW --data-dir OUT
#   python prepare.py --eval checkpoints/<file>.pt [--script PATH] [--data-dir DIR] [--device cpu|cuda]
#                     [--split val|test] [--batch-size N]      (your own check; the harness scores officially)
# =============================================================================

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import sys
import time

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

TASK_ID = "t7"
METRIC = "accuracy"  # fraction of the samples whose highest logit is the true class
DIRECTION = "max"  # higher is better
# The official score is on AG News's test.csv (7,600 samples; the paper's Table 2 calls it the validation split),
# so that it stays comparable with the paper. test.csv is held out: the harness copies data/ into the workspace
# without test_x.npy and test_y.npy, and only its scorer reads them. The validation split is carved from
# train.csv instead (below).
EVAL_SPLIT = "test"
DATA_DIR = "data"

URL = "https://raw.githubusercontent.com/mhjabreel/CharCnn_Keras/master/data/ag_news_csv/"
CLASSES = ["World", "Sports", "Business", "Sci/Tech"]  # the CSV's labels 1..4, stored as 0..3
N_CLASSES = len(CLASSES)
RAW_SAMPLES = {"train": 120000, "test": 7600}  # the official files: 30,000 and 1,900 per class
RAW_FILES = tuple(RAW_SAMPLES)  # ("train", "test"); raw file <name>.csv

# The validation split: 5 % of train.csv's rows, stratified by class (5 % of each class, at least one sample of
# a class with two or more), drawn with a fixed seed: 6,000 of the 120,000 rows (1,500 per class). The other
# 114,000 rows are the train split. data/val_rows.npy lists the val rows' 0-based line numbers in train.csv.
VAL_FRACTION = 0.05
VAL_SEED = 0
N_SAMPLES = {"train": 114000, "val": 6000, "test": 7600}  # the prepared splits, from the official files
SPLITS = tuple(N_SAMPLES)  # ("train", "val", "test"): data/<split>_x.npy and data/<split>_y.npy
HELD_OUT = ("test_x.npy", "test_y.npy")  # not in the workspace (task.toml's held_out)

# The character encoding (paper section 3.2: ASCII 0-127, max length 1,014, zero-padded). A sample's text is
# title + " " + description, exactly as the CSV holds them once its quoting is undone ("" -> "): nothing else
# is unescaped, so the file's backslashes (where the source had line breaks, e.g. "second\team", "\\" between
# paragraphs, and "\$" for "$") stay the character "\" (92), and HTML leftovers such as " #36;" stay as they
# are. Each character becomes its ASCII code 1..127; any other character (non-ASCII, bytes that are not
# UTF-8, NUL) becomes 26, ASCII SUB ("substitute"). Code 0 is only padding. Texts longer than 1,014
# characters are cut at 1,014 (no real test.csv sample is: the longest has 892).
MAX_LEN = 1014
VOCAB_SIZE = 128  # codes 0..127
PAD = 0
SUB = 26
_NOT_ASCII = re.compile(r"[^\x01-\x7f]")


# ---------------------------------------------------------------------------
# 2. Preparation: raw CSVs -> data/{train,val,test}_{x,y}.npy + data/val_rows.npy + data/meta.json
# ---------------------------------------------------------------------------


def encode(text: str) -> np.ndarray:
    """One text -> uint8 [MAX_LEN]: ASCII codes 1..127, SUB (26) for any other character, zero-padded."""
    codes = _NOT_ASCII.sub(chr(SUB), text[:MAX_LEN]).encode("ascii")
    out = np.zeros(MAX_LEN, dtype=np.uint8)
    out[: len(codes)] = np.frombuffer(codes, dtype=np.uint8)
    return out


def read_csv(path: str) -> tuple[list[str], np.ndarray]:
    """Read one AG News CSV (no header; class, title, description): texts and labels 0..3."""
    if not os.path.isfile(path):
        name = os.path.basename(path)
        raise FileNotFoundError(
            f"{path} does not exist: download {URL}{name} into {os.path.dirname(path)} (or let the harness fetch it)"
        )
    texts, labels = [], []
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        for n, row in enumerate(csv.reader(f), 1):
            if len(row) != 3:
                raise ValueError(f"{path}: line {n} has {len(row)} fields; expected 3 (class, title, description)")
            if row[0] not in ("1", "2", "3", "4"):
                raise ValueError(f"{path}: line {n}: the class must be 1..4, found {row[0]!r}")
            texts.append(row[1] + " " + row[2])
            labels.append(int(row[0]) - 1)
    if not texts:
        raise ValueError(f"{path} holds no samples")
    return texts, np.array(labels, dtype=np.int64)


def carve_val(labels: np.ndarray) -> np.ndarray:
    """The train.csv rows (0-based, ascending) that form the val split: VAL_FRACTION of each class, seeded."""
    rng = np.random.default_rng(VAL_SEED)
    picked = []
    for c in range(N_CLASSES):
        rows = np.flatnonzero(labels == c)
        k = max(1, round(len(rows) * VAL_FRACTION)) if len(rows) >= 2 else 0
        picked.append(rng.permutation(rows)[:k])
    return np.sort(np.concatenate(picked)).astype(np.int64)


def prepare(raw_dir: str, data_dir: str) -> None:
    """Encode both files, carve val from train, save codes, labels and meta.json; describe any shortfall."""
    start = time.time()
    raw = {name: read_csv(os.path.join(raw_dir, f"{name}.csv")) for name in RAW_FILES}  # check both first
    notes = [
        f"{name}.csv: {len(labels):,} of {RAW_SAMPLES[name]:,} samples (not the official file)"
        for name, (_, labels) in raw.items()
        if len(labels) != RAW_SAMPLES[name]
    ]
    texts, labels = raw["train"]
    val_rows = carve_val(labels)
    is_val = np.zeros(len(labels), dtype=bool)
    is_val[val_rows] = True
    splits = {  # file order within each split
        "train": ([t for t, v in zip(texts, is_val, strict=True) if not v], labels[~is_val]),
        "val": ([texts[i] for i in val_rows], labels[val_rows]),
        "test": raw["test"],
    }
    os.makedirs(data_dir, exist_ok=True)
    counts, class_counts, truncated = {}, {}, {}
    for split, (texts, labels) in splits.items():
        x = np.stack([encode(t) for t in texts]) if texts else np.zeros((0, MAX_LEN), dtype=np.uint8)
        np.save(os.path.join(data_dir, f"{split}_x.npy"), x)  # [N, MAX_LEN] uint8
        np.save(os.path.join(data_dir, f"{split}_y.npy"), labels)
        counts[split] = len(labels)
        class_counts[split] = np.bincount(labels, minlength=N_CLASSES).tolist()
        truncated[split] = sum(len(t) > MAX_LEN for t in texts)
    np.save(os.path.join(data_dir, "val_rows.npy"), val_rows)
    meta = {
        "classes": CLASSES,  # y = i means CLASSES[i]
        "counts": counts,
        "class_counts": class_counts,
        "val": {"from": "train.csv", "fraction": VAL_FRACTION, "seed": VAL_SEED, "stratified_by": "class"},
        "held_out": list(HELD_OUT),  # the test split: read by the harness's scorer only, not in the workspace
        "max_len": MAX_LEN,
        "truncated": truncated,  # samples longer than MAX_LEN characters, cut
        "encoding": 'title + " " + description; ASCII code 1..127 per character, 26 (SUB) for others, 0 = padding',
        "partial_data": notes,
    }
    with open(os.path.join(data_dir, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)
    print(
        f"prepared {', '.join(f'{s}: {n:,} samples' for s, n in counts.items())} in {time.time() - start:.1f} s "
        f"into {data_dir}" + "".join(f"\n  partial data: {n}" for n in notes)
    )


# ---------------------------------------------------------------------------
# 3. Loaders (import these in your training script)
# ---------------------------------------------------------------------------


def load_meta(data_dir: str = DATA_DIR) -> dict:
    """Class names, sample and class counts, the val carve, the encoding and partial_data notes (prepare())."""
    with open(os.path.join(data_dir, "meta.json"), encoding="utf-8") as f:
        return json.load(f)


def load_split(split: str, data_dir: str = DATA_DIR) -> tuple[torch.Tensor, torch.Tensor]:
    """All samples of one split: x uint8 [N, 1014] (character codes, 0 = padding) and y int64 [N] (0..3)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use one of {list(SPLITS)}")
    path = os.path.join(data_dir, f"{split}_x.npy")
    if split == "test" and not os.path.isfile(path) and os.path.isfile(os.path.join(data_dir, "val_x.npy")):
        raise FileNotFoundError(
            f"{path} does not exist: the test split (test.csv) is held out, only the harness scores on it; "
            'measure your models on "val"'
        )
    x = np.load(path)
    y = np.load(os.path.join(data_dir, f"{split}_y.npy"))
    return torch.from_numpy(x), torch.from_numpy(y)


# ---------------------------------------------------------------------------
# 4. Evaluation: the official metric
# The harness scores a checkpoint in two processes: a sandboxed predictor runs
# the model through forward() on the inputs of eval_batches(), and a scorer
# that never runs your code compares its outputs with the labels in score().
# evaluate() does all three in one process: call it for your validation score.
# ---------------------------------------------------------------------------

# The samples are independent: an input reveals no label but its own, so any batch size is safe.
FEED_BATCH_SIZE = 256


def eval_batches(split: str = EVAL_SPLIT, data_dir: str = DATA_DIR, batch_size: int = 256) -> list:
    """[(inputs, targets)] in file order: inputs {"x": uint8 [b, 1014]}, targets int64 [b] (numpy)."""
    x, y = load_split(split, data_dir)
    x, y = x.numpy(), y.numpy()
    return [({"x": x[i : i + batch_size]}, y[i : i + batch_size]) for i in range(0, len(x), batch_size)]


def forward(model: nn.Module, inputs: dict) -> torch.Tensor:
    """The forward contract: model(x), x int64 [B, 1014] character codes -> logits [B, 4] (float32 here).

    Plain float32 (no autocast; the harness also turns TF32 off): the class is the argmax of these logits.
    """
    x = inputs["x"].long()
    with torch.autocast(device_type=x.device.type, enabled=False):
        logits = model(x)
    if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (len(x), N_CLASSES):
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(
            f"model(x) returned {shape} for x of shape {tuple(x.shape)}; expected logits of shape "
            f"{(len(x), N_CLASSES)} = [batch, N_CLASSES={N_CLASSES}]"
        )
    return logits.float()


def score(outputs: list, targets: list) -> dict:
    """Accuracy of the argmax of the logits: {"accuracy": correct / samples, "n": samples}."""
    correct, count = 0, 0
    for logits, y in zip(outputs, targets, strict=True):
        if logits.shape != (len(y), N_CLASSES):
            raise ValueError(
                f"the model returned {tuple(logits.shape)} for {len(y)} samples; expected logits of shape "
                f"{(len(y), N_CLASSES)} = [batch, N_CLASSES={N_CLASSES}]"
            )
        if not np.isfinite(logits).all():
            raise ValueError("the model produced non-finite logits")
        correct += int((logits.argmax(axis=1) == y).sum())  # ties: the first largest logit, as torch.argmax
        count += len(y)
    if count == 0:
        raise ValueError("no samples to score")
    return {METRIC: correct / count, "n": count}


@torch.no_grad()
def _outputs(model: nn.Module, batches: list, device: str) -> list:
    """forward() on every batch under model.eval(), TF32 off (as in the harness): the logits, numpy float32."""
    was_training = model.training
    model.eval()
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        return [
            forward(model, {k: torch.from_numpy(v).to(device) for k, v in inputs.items()}).cpu().numpy()
            for inputs, _ in batches
        ]
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
        model.train(was_training)


def predict(
    model: nn.Module, split: str = EVAL_SPLIT, data_dir: str = DATA_DIR, device: str = "cpu", batch_size: int = 256
) -> torch.Tensor:
    """The predicted class (argmax of the logits) of every sample of `split`, int64 [N] on the CPU."""
    logits = _outputs(model, eval_batches(split, data_dir, batch_size), device)
    return torch.from_numpy(np.concatenate(logits).argmax(axis=1))


def evaluate(
    model: nn.Module, split: str = EVAL_SPLIT, data_dir: str = DATA_DIR, device: str = "cpu", batch_size: int = 256
) -> dict:
    """score(forward(model, inputs)) over `split` in this process: {"accuracy": float, "n": number of samples}.

    Call it with split="val" for the validation score your script reports: it is then exactly the official
    metric on the validation split. Same value as sklearn's accuracy_score(y, predict()).
    """
    batches = eval_batches(split, data_dir, batch_size)
    return score(_outputs(model, batches, device), [y for _, y in batches])


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
    parser = argparse.ArgumentParser(description=f"{TASK_ID}: data preparation and your own evaluation")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--prepare", action="store_true", help="build the prepared data from the raw files")
    mode.add_argument("--eval", metavar="CHECKPOINT", help="score a checkpoint (your own check)")
    parser.add_argument("--raw-dir", help="folder holding train.csv and test.csv (with --prepare)")
    parser.add_argument("--data-dir", default=DATA_DIR, help="prepared data folder (default: data)")
    parser.add_argument("--script", help="training script with build_model (default: the checkpoint's)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--split", choices=SPLITS, help="default: test if present, else val")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()

    if args.prepare:
        if not args.raw_dir:
            parser.error("--prepare needs --raw-dir")
        prepare(args.raw_dir, args.data_dir)
        return
    split = args.split or (EVAL_SPLIT if os.path.isfile(os.path.join(args.data_dir, f"{EVAL_SPLIT}_x.npy")) else "val")
    try:
        if not os.path.isfile(os.path.join(args.data_dir, f"{split}_x.npy")):
            held_out = " (the test split is held out of the workspace: use --split val)" if split == "test" else ""
            raise FileNotFoundError(
                f"no prepared {split} split in {args.data_dir!r}: run `python prepare.py --prepare` first or pass "
                f"--data-dir{held_out}"
            )
        if args.device == "cuda":
            torch.backends.cudnn.benchmark = False
            torch.backends.cudnn.deterministic = True
        result = self_check(args.eval, args.script, split, data_dir=args.data_dir, device=args.device,
                            batch_size=args.batch_size)  # fmt: skip
    except Exception as e:  # any failure: one JSON line saying what to fix, exit 1
        print(json.dumps({"task": TASK_ID, "error": f"{type(e).__name__}: {e}"}))
        sys.exit(1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
