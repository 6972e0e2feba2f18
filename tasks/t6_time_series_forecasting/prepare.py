# =============================================================================
# prepare.py for T6 (time series forecasting, ETTh1): LOCKED.
# Do not modify: the harness evaluates with the original copy of this file.
#
# What is here, in order:
#   1. constants (task, split borders, window lengths)
#   2. preparation: ETTh1.csv -> normalised float32 arrays in data/
#   3. loaders the training scripts import (load_split, load_series, load_meta)
#   4. the evaluation function (test MSE in normalised space)
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

TASK_ID = "t6"
METRIC = "mse"  # mean squared error over all windows, steps and channels, in normalised units
DIRECTION = "min"  # lower is better
EVAL_SPLIT = "test"
DATA_DIR = "data"

RAW_FILE = "ETTh1.csv"
COLUMNS = ["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"]  # the 7 channels, in file order
N_ROWS = 17420  # hourly rows, 2016-07-01 00:00 to 2018-06-26 19:00
N_CHANNELS = len(COLUMNS)
SEQ_LEN = 336  # look-back: the model sees 336 hours (14 days) ...
PRED_LEN = 96  # ... and predicts the next 96 hours (4 days)

# The standard LTSF split (Informer, DLinear, PatchTST): 12 months train, 4 months val, 4 months test,
# months of 30 days. Val and test start SEQ_LEN rows early, so that their first window has a full
# look-back; only the rows after the border are ever predicted. The last 3,020 rows are unused.
MONTH = 30 * 24
TRAIN_END = 12 * MONTH  # 8640
VAL_END = TRAIN_END + 4 * MONTH  # 11520
TEST_END = VAL_END + 4 * MONTH  # 14400
BORDERS = {
    "train": (0, TRAIN_END),
    "val": (TRAIN_END - SEQ_LEN, VAL_END),
    "test": (VAL_END - SEQ_LEN, TEST_END),
}
# Windows at stride 1: rows - (SEQ_LEN + PRED_LEN) + 1 -> 8,209 train, 2,785 val, 2,785 test.
N_WINDOWS = {split: (end - start) - (SEQ_LEN + PRED_LEN) + 1 for split, (start, end) in BORDERS.items()}


# ---------------------------------------------------------------------------
# 2. Preparation: raw CSV -> data/{train,val,test}.npy + data/meta.json
# ---------------------------------------------------------------------------


def read_raw(raw_dir: str) -> tuple[list[str], np.ndarray]:
    """Read ETTh1.csv and check its shape: (dates, values [N_ROWS, 7] float64)."""
    path = os.path.join(raw_dir, RAW_FILE)
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    header, rows = rows[0], [r for r in rows[1:] if r]
    if header != ["date"] + COLUMNS:
        raise ValueError(f"{path}: expected columns {['date'] + COLUMNS}, found {header}")
    if len(rows) != N_ROWS:
        raise ValueError(f"{path}: expected {N_ROWS} data rows, found {len(rows)}")
    dates = [r[0] for r in rows]
    values = np.array([[float(v) for v in r[1:]] for r in rows], dtype=np.float64)
    if not np.isfinite(values).all():
        raise ValueError(f"{path}: contains missing or non-finite values")
    return dates, values


def prepare(raw_dir: str, data_dir: str) -> None:
    """Split, normalise with the TRAIN statistics only, and save one float32 array per split."""
    dates, values = read_raw(raw_dir)
    start, end = BORDERS["train"]
    mean = values[start:end].mean(axis=0)
    std = values[start:end].std(axis=0)  # population std (ddof=0), as sklearn's StandardScaler
    os.makedirs(data_dir, exist_ok=True)
    meta = {
        "columns": COLUMNS,
        "mean": mean.tolist(),  # original units = normalised * std + mean
        "std": std.tolist(),
        "seq_len": SEQ_LEN,
        "pred_len": PRED_LEN,
        "borders": {split: list(b) for split, b in BORDERS.items()},  # rows of ETTh1.csv, end exclusive
        "windows": N_WINDOWS,
        "first_timestamp": {split: dates[b[0]] for split, b in BORDERS.items()},  # rows are hourly, no gaps
    }
    for split, (start, end) in BORDERS.items():
        segment = ((values[start:end] - mean) / std).astype(np.float32)  # [rows, 7]
        np.save(os.path.join(data_dir, f"{split}.npy"), segment)
    with open(os.path.join(data_dir, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)
    print(f"prepared {', '.join(f'{s}: {n} windows' for s, n in N_WINDOWS.items())} in {data_dir}")


# ---------------------------------------------------------------------------
# 3. Loaders (import these in your training script)
# ---------------------------------------------------------------------------


def load_meta(data_dir: str = DATA_DIR) -> dict:
    """Column names, train mean/std, borders and window counts, as written by prepare()."""
    with open(os.path.join(data_dir, "meta.json"), encoding="utf-8") as f:
        return json.load(f)


def load_series(split: str, data_dir: str = DATA_DIR) -> torch.Tensor:
    """The normalised rows of one split segment, float32 [rows, 7] (val/test include their look-back)."""
    if split not in BORDERS:
        raise ValueError(f"unknown split {split!r}; use one of {list(BORDERS)}")
    return torch.from_numpy(np.load(os.path.join(data_dir, f"{split}.npy")))


def load_split(split: str, data_dir: str = DATA_DIR) -> tuple[torch.Tensor, torch.Tensor]:
    """All windows of one split at stride 1: x [N, SEQ_LEN, 7] and y [N, PRED_LEN, 7], float32.

    Window i is x = rows i .. i+335 and y = rows i+336 .. i+431 of the segment.
    """
    series = load_series(split, data_dir)
    windows = series.unfold(0, SEQ_LEN + PRED_LEN, 1).transpose(1, 2)  # [N, SEQ_LEN + PRED_LEN, 7], a view
    x = windows[:, :SEQ_LEN].contiguous()
    y = windows[:, SEQ_LEN:].contiguous()
    return x, y


# ---------------------------------------------------------------------------
# 4. Evaluation: the official metric
# The harness scores a checkpoint in two processes: a sandboxed predictor runs
# the model through forward() on the inputs of eval_batches(), and a scorer
# that never runs your code compares its outputs with the targets in score().
# evaluate() does all three in one process: call it for your validation score.
# ---------------------------------------------------------------------------

# The windows overlap: the input of window i+j holds the first j target rows of
# window i. So the harness sends the test windows one at a time, in time order,
# each only after the outputs for the one before came back: no input reveals a
# target before it has been predicted. (Any batch size gives the same MSE.)
FEED_BATCH_SIZE = 1


def eval_batches(split: str = EVAL_SPLIT, data_dir: str = DATA_DIR, batch_size: int = 256) -> list:
    """[(inputs, targets)] in time order: inputs {"x": [b, SEQ_LEN, 7]}, targets [b, PRED_LEN, 7] (numpy)."""
    x, y = load_split(split, data_dir)
    x, y = x.numpy(), y.numpy()
    return [({"x": x[i : i + batch_size]}, y[i : i + batch_size]) for i in range(0, len(x), batch_size)]


def forward(model: nn.Module, inputs: dict) -> torch.Tensor:
    """The forward contract: model(x), x [batch, SEQ_LEN, 7] -> predictions [batch, PRED_LEN, 7].

    Float32 on every device (no bf16 autocast): the split is small, and the score then
    depends neither on bf16 rounding nor on bf16 support of the model's ops.
    """
    return model(inputs["x"])


def score(outputs: list, targets: list) -> dict:
    """MSE over every window, step and channel (normalised units): {"mse": float, "n": windows}."""
    total, count = 0.0, 0
    for pred, y in zip(outputs, targets, strict=True):
        if pred.shape != y.shape:
            raise ValueError(
                f"model(x) returned {tuple(pred.shape)} for {len(y)} windows; expected a tensor "
                f"of shape {tuple(y.shape)} = [batch, PRED_LEN={PRED_LEN}, channels={N_CHANNELS}]"
            )
        total += float(np.square((pred - y).astype(np.float64)).sum())
        count += y.size
    mse = total / count
    if not math.isfinite(mse):
        raise ValueError(f"the MSE is {mse}: the model produced non-finite predictions")
    return {METRIC: mse, "n": sum(len(y) for y in targets)}


@torch.no_grad()
def evaluate(
    model: nn.Module, split: str = EVAL_SPLIT, data_dir: str = DATA_DIR, device: str = "cpu", batch_size: int = 256
) -> dict:
    """score(forward(model, inputs)) over `split` in this process: {"mse": float, "n": windows}.

    Call it with split="val" for the validation score your script reports: it is then
    exactly the official metric on the validation split.
    """
    was_training = model.training
    model.eval()
    outputs, targets = [], []
    for inputs, y in eval_batches(split, data_dir, batch_size):  # fixed order, fixed batches: deterministic
        pred = forward(model, {k: torch.from_numpy(v).to(device) for k, v in inputs.items()})
        if not isinstance(pred, torch.Tensor):
            raise ValueError(f"model(x) returned {type(pred).__name__}; expected a tensor [batch, PRED_LEN, 7]")
        outputs.append(pred.float().cpu().numpy())
        targets.append(y)
    model.train(was_training)
    return score(outputs, targets)


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
    parser = argparse.ArgumentParser(description=f"{TASK_ID}: data preparation and official evaluation")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--prepare", action="store_true", help="build the prepared data from the raw files")
    mode.add_argument("--eval", metavar="CHECKPOINT", help="score a checkpoint on the eval split")
    parser.add_argument("--raw-dir", help="folder holding ETTh1.csv (with --prepare)")
    parser.add_argument("--data-dir", default=DATA_DIR, help="prepared data folder (default: data)")
    parser.add_argument("--script", help="training script with build_model (default: the checkpoint's)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--split", choices=sorted(BORDERS), help="default: test if present, else val")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()

    if args.prepare:
        if not args.raw_dir:
            parser.error("--prepare needs --raw-dir")
        prepare(args.raw_dir, args.data_dir)
        return
    split = args.split or (EVAL_SPLIT if os.path.isfile(os.path.join(args.data_dir, f"{EVAL_SPLIT}.npy")) else "val")
    try:
        result = self_check(
            args.eval, args.script, split, data_dir=args.data_dir, device=args.device, batch_size=args.batch_size
        )
    except Exception as e:  # any failure: one JSON line saying what to fix, exit 1
        print(json.dumps({"task": TASK_ID, "error": f"{type(e).__name__}: {e}"}))
        sys.exit(1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
