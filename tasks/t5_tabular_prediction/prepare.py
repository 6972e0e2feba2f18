# =============================================================================
# prepare.py for T5 (tabular prediction, Forest Cover Type): LOCKED.
# Do not modify: the harness evaluates with the original copy of this file.
#
# What is here, in order:
#   1. constants (task, columns, split seed and fractions)
#   2. preparation: covtype.data.gz -> stratified 80/10/10 split, standardised float32 arrays in data/
#   3. loaders the training scripts import (load_split, load_meta)
#   4. the evaluation: the inputs the harness feeds, the forward contract, the metric (test accuracy)
#   5. checkpoint + logging helpers (task_helpers.py, shared by all seven tasks)
#   6. main(): the command line
#
#   python prepare.py --prepare --raw-dir RAW --data-dir OUT
#   python prepare.py --eval checkpoints/<file>.pt [--script PATH] [--data-dir DIR] [--device cpu|cuda]
#                     [--split train|val|test] [--batch-size N]   (your own check; the harness scores officially)
# =============================================================================

from __future__ import annotations

import argparse
import json
import os
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

TASK_ID = "t5"
METRIC = "accuracy"  # fraction of rows whose highest logit is the true cover type
DIRECTION = "max"  # higher is better
EVAL_SPLIT = "test"
DATA_DIR = "data"

RAW_FILE = "covtype.data.gz"  # UCI covtype.data, gzip: no header, 55 comma-separated integers a row
URL = "https://archive.ics.uci.edu/ml/machine-learning-databases/covtype/covtype.data.gz"
N_ROWS = 581012  # the official file
CONTINUOUS = [
    "Elevation",  # metres
    "Aspect",  # degrees azimuth
    "Slope",  # degrees
    "Horizontal_Distance_To_Hydrology",  # metres
    "Vertical_Distance_To_Hydrology",
    "Horizontal_Distance_To_Roadways",
    "Hillshade_9am",  # 0..255
    "Hillshade_Noon",
    "Hillshade_3pm",
    "Horizontal_Distance_To_Fire_Points",
]
WILDERNESS = [f"Wilderness_Area{i}" for i in range(1, 5)]  # one-hot: exactly one 1 per row
SOIL = [f"Soil_Type{i}" for i in range(1, 41)]  # one-hot: exactly one 1 per row
FEATURES = CONTINUOUS + WILDERNESS + SOIL  # the 54 columns of x, in file order
N_CONTINUOUS = len(CONTINUOUS)  # 10: only these are standardised
N_FEATURES = len(FEATURES)  # 54
CLASSES = [  # the last column of the file holds 1..7; stored here as 0..6 (class i = CLASSES[i])
    "Spruce/Fir",
    "Lodgepole Pine",
    "Ponderosa Pine",
    "Cottonwood/Willow",
    "Aspen",
    "Douglas-fir",
    "Krummholz",
]
N_CLASSES = len(CLASSES)

# Stratified 80/10/10 split: scikit-learn's train_test_split(stratify=label, random_state=SPLIT_SEED) twice,
# first 20% of all rows off the training set, then that 20% halved into val and test. On the official file:
# train 464,809 rows, val 58,101, test 58,102.
SPLIT_SEED = 42
HOLDOUT_FRACTION = 0.2
SPLITS = ("train", "val", "test")
# The test rows and their labels stay with the harness, out of your workspace (paper rule 9).
HELD_OUT = ("test_x.npy", "test_y.npy")


# ---------------------------------------------------------------------------
# 2. Preparation: covtype.data.gz -> data/{train,val,test}_{x,y}.npy + data/meta.json
# ---------------------------------------------------------------------------


def read_raw(raw_dir: str) -> np.ndarray:
    """Read covtype.data.gz and check its schema; returns the int64 table [rows, 55]."""
    import pandas as pd

    path = os.path.join(raw_dir, RAW_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} does not exist: download {URL} into {raw_dir} (or let the harness fetch it)")
    try:
        table = pd.read_csv(path, header=None, compression="gzip").to_numpy()
    except Exception as e:  # not gzip, ragged rows, ...
        raise ValueError(f"{path}: cannot be read as a gzip CSV of integers: {e}") from e
    if table.ndim != 2 or table.shape[1] != N_FEATURES + 1:
        raise ValueError(f"{path}: expected {N_FEATURES + 1} columns (54 features + class), found {table.shape[1]}")
    if table.dtype.kind not in "iu":
        raise ValueError(f"{path}: every value must be an integer (found {table.dtype}: missing or decimal values?)")
    table = table.astype(np.int64)
    labels = table[:, -1]
    if not np.isin(labels, np.arange(1, N_CLASSES + 1)).all():
        raise ValueError(f"{path}: the class column must hold 1..{N_CLASSES}; found {sorted(set(labels.tolist()))}")
    for name, cols in (("wilderness", slice(10, 14)), ("soil", slice(14, 54))):
        group = table[:, cols]
        if not np.isin(group, (0, 1)).all() or not (group.sum(axis=1) == 1).all():
            bad = int(np.flatnonzero(~np.isin(group, (0, 1)).all(axis=1) | (group.sum(axis=1) != 1))[0])
            raise ValueError(f"{path}: row {bad + 1}: the {name} columns must be one-hot (one 1, all others 0)")
    return table


def split_rows(labels: np.ndarray) -> dict[str, np.ndarray]:
    """The row numbers (into the file) of each split: stratified 80/10/10, fixed seed, deterministic."""
    from sklearn.model_selection import train_test_split

    rows = np.arange(len(labels))
    try:
        train, rest = train_test_split(rows, test_size=HOLDOUT_FRACTION, stratify=labels, random_state=SPLIT_SEED)
        val, test = train_test_split(rest, test_size=0.5, stratify=labels[rest], random_state=SPLIT_SEED)
    except ValueError as e:  # a class too rare to appear in every split
        raise ValueError(f"cannot split the rows into train/val/test stratified by class: {e}") from e
    return {"train": train, "val": val, "test": test}


def prepare(raw_dir: str, data_dir: str) -> None:
    """Split, standardise the 10 continuous columns with TRAIN statistics, save float32 x and int64 y per split."""
    from sklearn.preprocessing import StandardScaler

    start = time.time()
    table = read_raw(raw_dir)
    x_all = table[:, :N_FEATURES].astype(np.float64)
    y_all = table[:, -1] - 1  # classes 1..7 -> 0..6
    rows = split_rows(y_all)
    scaler = StandardScaler().fit(x_all[rows["train"], :N_CONTINUOUS])  # mean and population std of TRAIN rows
    os.makedirs(data_dir, exist_ok=True)
    counts, class_counts = {}, {}
    for split in SPLITS:
        x = x_all[rows[split]]
        x[:, :N_CONTINUOUS] = scaler.transform(x[:, :N_CONTINUOUS])  # the 44 binary columns stay 0/1
        y = y_all[rows[split]]
        np.save(os.path.join(data_dir, f"{split}_x.npy"), x.astype(np.float32))
        np.save(os.path.join(data_dir, f"{split}_y.npy"), y)
        counts[split] = len(y)
        if split != "test":  # the test classes stay with the harness (rule 9), their counts included
            class_counts[split] = np.bincount(y, minlength=N_CLASSES).tolist()
    notes = []  # one line per way these data fall short of the official file
    if len(table) != N_ROWS:
        notes.append(f"{RAW_FILE}: {len(table):,} of {N_ROWS:,} rows (not the official file; splits are smaller)")
    meta = {
        "features": FEATURES,  # x column j = FEATURES[j]
        "n_continuous": N_CONTINUOUS,  # columns 0..9 are standardised, 10..53 are 0/1 indicators
        "classes": CLASSES,  # y = i means CLASSES[i]
        "mean": scaler.mean_.tolist(),  # original units = x[:, :10] * std + mean
        "std": scaler.scale_.tolist(),
        "counts": counts,
        "class_counts": class_counts,  # train and val
        "held_out": list(HELD_OUT),  # not in a workspace: only the harness's scorer reads the test rows and labels
        "split": f"train_test_split(stratify=y, random_state={SPLIT_SEED}): 80% train, then the rest halved",
        "partial_data": notes,
    }
    with open(os.path.join(data_dir, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)
    print(
        f"prepared {', '.join(f'{s}: {n:,} rows' for s, n in counts.items())} in {time.time() - start:.1f} s "
        f"into {data_dir}" + "".join(f"\n  partial data: {n}" for n in notes)
    )


# ---------------------------------------------------------------------------
# 3. Loaders (import these in your training script)
# ---------------------------------------------------------------------------


def load_meta(data_dir: str = DATA_DIR) -> dict:
    """Feature and class names, the train mean/std, split sizes and partial_data notes, as written by prepare()."""
    with open(os.path.join(data_dir, "meta.json"), encoding="utf-8") as f:
        return json.load(f)


def load_split(split: str, data_dir: str = DATA_DIR) -> tuple[torch.Tensor, torch.Tensor]:
    """All rows of one split: x float32 [N, 54] (columns 0..9 standardised, 10..53 are 0/1) and y int64 [N] (0..6).

    The test split is held out of your workspace (rule 9): load_split("test") raises FileNotFoundError there.
    """
    x, y = _arrays(split, data_dir)
    return torch.from_numpy(x), torch.from_numpy(y)


def _arrays(split: str, data_dir: str) -> tuple[np.ndarray, np.ndarray]:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use one of {list(SPLITS)}")
    paths = [os.path.join(data_dir, f"{split}_{part}.npy") for part in ("x", "y")]
    if not all(os.path.isfile(p) for p in paths):
        if split == "test" and os.path.isfile(os.path.join(data_dir, "val_y.npy")):  # a workspace: held out
            raise FileNotFoundError(
                f"{paths[1]} is not here: the test split is held out (paper rule 9), only the harness's scorer "
                "reads it; use the 'val' split for your own scores"
            )
        raise FileNotFoundError(
            f"no prepared data in {data_dir!r} ({[p for p in paths if not os.path.isfile(p)][0]} is missing): "
            "run `python prepare.py --prepare` first or pass --data-dir"
        )
    return np.load(paths[0]), np.load(paths[1])


def has_test_split(data_dir: str = DATA_DIR) -> bool:
    """Whether the test rows and labels are in data_dir: in the harness's copy, never in your workspace (rule 9)."""
    return all(os.path.isfile(os.path.join(data_dir, f"test_{part}.npy")) for part in ("x", "y"))


# ---------------------------------------------------------------------------
# 4. Evaluation: the official metric
# The harness scores a checkpoint in two processes: a sandboxed predictor runs
# the model through forward() on the inputs of eval_batches(), and a scorer
# that never runs your code compares its outputs with the labels in score().
# evaluate() does all three in one process: call it for your validation score.
# ---------------------------------------------------------------------------

# The rows are independent samples: a row's logits depend on its own 54 features only, so any batch size is safe
# (no input reveals another row's class) and gives the same predictions up to float rounding. 4,096 rows (0.9 MB of
# float32 a batch) keep a GPU busy with 15 batches for the 58,102 test rows, and are the batches of the evaluation
# before the harness fed them: the official accuracy is the same number as then.
FEED_BATCH_SIZE = 4096


def eval_batches(split: str = EVAL_SPLIT, data_dir: str = DATA_DIR, batch_size: int = 4096) -> list:
    """[(inputs, labels)] in file order: inputs {"x": float32 [b, 54]}, labels int64 [b] (numpy)."""
    x, y = _arrays(split, data_dir)
    return [({"x": x[i : i + batch_size]}, y[i : i + batch_size]) for i in range(0, len(x), batch_size)]


def forward(model: nn.Module, inputs: dict) -> torch.Tensor:
    """The forward contract: model(x), x [b, 54] float32 -> logits [b, 7] (the class is their argmax).

    Float32 on every device (no autocast; the harness also turns TF32 off): the predictions depend neither on bf16
    rounding nor on bf16 support of the model's ops.
    """
    x = inputs["x"]
    with torch.autocast(device_type=x.device.type, enabled=False):
        logits = model(x)
    if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (len(x), N_CLASSES):
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(
            f"model(x) returned {shape} for x of shape {tuple(x.shape)}; expected logits of shape "
            f"{(len(x), N_CLASSES)} = [batch, N_CLASSES={N_CLASSES}]"
        )
    return logits


def score(outputs: list, targets: list) -> dict:
    """Accuracy: the fraction of rows whose highest logit is the true class, {"accuracy": float, "n": rows}.
    Same value as sklearn's accuracy_score(y, logits.argmax(1))."""
    correct, count = 0, 0
    for logits, y in zip(outputs, targets, strict=True):
        if logits.shape != (len(y), N_CLASSES):
            raise ValueError(
                f"the model returned logits of shape {tuple(logits.shape)} for {len(y)} rows; expected "
                f"{(len(y), N_CLASSES)} = [batch, N_CLASSES={N_CLASSES}]"
            )
        if not np.isfinite(logits).all():
            raise ValueError("the model produced non-finite logits")
        correct += int((logits.argmax(axis=1) == y).sum())
        count += len(y)
    return {METRIC: correct / count, "n": count}


@torch.no_grad()
def evaluate(
    model: nn.Module, split: str = EVAL_SPLIT, data_dir: str = DATA_DIR, device: str = "cpu", batch_size: int = 4096
) -> dict:
    """score(forward(model, inputs)) over every row of `split` in this process: {"accuracy": float, "n": rows}.

    Call it with split="val" for the validation score your script reports: it is then exactly the official
    metric on the validation split. Runs under model.eval() in plain float32 (no autocast, no TF32), in a fixed
    order and fixed batches.
    """
    was_training = model.training
    model.eval()
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    outputs, targets = [], []
    try:
        for inputs, y in eval_batches(split, data_dir, batch_size):
            logits = forward(model, {k: torch.from_numpy(v).to(device) for k, v in inputs.items()})
            outputs.append(logits.float().cpu().numpy())
            targets.append(y)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
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
    parser = argparse.ArgumentParser(description=f"{TASK_ID}: data preparation and your own check of a checkpoint")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--prepare", action="store_true", help="build the prepared data from the raw files")
    mode.add_argument("--eval", metavar="CHECKPOINT", help="score a checkpoint on a split (your own check)")
    parser.add_argument("--raw-dir", help=f"folder holding {RAW_FILE} (with --prepare)")
    parser.add_argument("--data-dir", default=DATA_DIR, help="prepared data folder (default: data)")
    parser.add_argument("--script", help="training script with build_model (default: the checkpoint's)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--split", choices=list(SPLITS), help="default: test if present in --data-dir, else val")
    parser.add_argument("--batch-size", type=int, default=4096)
    args = parser.parse_args()

    if args.prepare:
        if not args.raw_dir:
            parser.error("--prepare needs --raw-dir")
        prepare(args.raw_dir, args.data_dir)
        return
    split = args.split or (EVAL_SPLIT if has_test_split(args.data_dir) else "val")
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
