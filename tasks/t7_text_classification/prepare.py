# =============================================================================
# prepare.py for T7 (text classification, AG News, character level): LOCKED.
# Do not modify: the harness evaluates with the original copy of this file.
#
# What is here, in order:
#   1. constants (task, classes, sample counts, the character encoding)
#   2. preparation: train.csv + test.csv -> uint8 character codes + labels in data/
#   3. loaders the training scripts import (load_split, load_meta, encode)
#   4. the evaluation function (accuracy on the 7,600 test.csv samples)
#   5. checkpoint + logging helpers (shared by all seven tasks)
#   6. main(): the command line
#
#   python prepare.py --prepare --raw-dir RAW --data-dir OUT
#   python prepare.py --eval checkpoints/<file>.pt [--script PATH] [--data-dir DIR] [--device cpu|cuda]
#                     [--batch-size N]
# =============================================================================

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import re
import sys
import time

import numpy as np
import torch
import torch.nn as nn

# ---------------------------------------------------------------------------
# 1. Constants
# ---------------------------------------------------------------------------

TASK_ID = "t7"
METRIC = "accuracy"  # fraction of test.csv samples whose highest logit is the true class
DIRECTION = "max"  # higher is better
# AG News has a train and a test file only. The scored set is test.csv (the paper's Table 2 calls it the
# validation split, and its harness reported the agents' own val scores on it too).
EVAL_SPLIT = "test"
DATA_DIR = "data"
CHECKPOINT_DIR = "checkpoints"

URL = "https://raw.githubusercontent.com/mhjabreel/CharCnn_Keras/master/data/ag_news_csv/"
CLASSES = ["World", "Sports", "Business", "Sci/Tech"]  # the CSV's labels 1..4, stored as 0..3
N_CLASSES = len(CLASSES)
N_SAMPLES = {"train": 120000, "test": 7600}  # the official files: 30,000 and 1,900 per class
SPLITS = tuple(N_SAMPLES)  # ("train", "test"); raw file <split>.csv

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
# 2. Preparation: raw CSVs -> data/{train,test}_{x,y}.npy + data/meta.json
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


def prepare(raw_dir: str, data_dir: str) -> None:
    """Encode both files and save codes, labels and meta.json; describe any shortfall in partial_data."""
    start = time.time()
    splits = {split: read_csv(os.path.join(raw_dir, f"{split}.csv")) for split in SPLITS}  # check both first
    os.makedirs(data_dir, exist_ok=True)
    notes, counts, class_counts, truncated = [], {}, {}, {}
    for split, (texts, labels) in splits.items():
        x = np.stack([encode(t) for t in texts])  # [N, MAX_LEN] uint8
        np.save(os.path.join(data_dir, f"{split}_x.npy"), x)
        np.save(os.path.join(data_dir, f"{split}_y.npy"), labels)
        counts[split] = len(labels)
        class_counts[split] = np.bincount(labels, minlength=N_CLASSES).tolist()
        truncated[split] = sum(len(t) > MAX_LEN for t in texts)
        if len(labels) != N_SAMPLES[split]:
            notes.append(f"{split}.csv: {len(labels):,} of {N_SAMPLES[split]:,} samples (not the official file)")
    meta = {
        "classes": CLASSES,  # y = i means CLASSES[i]
        "counts": counts,
        "class_counts": class_counts,
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
    """Class names, sample and class counts, the encoding and partial_data notes, as written by prepare()."""
    with open(os.path.join(data_dir, "meta.json"), encoding="utf-8") as f:
        return json.load(f)


def load_split(split: str, data_dir: str = DATA_DIR) -> tuple[torch.Tensor, torch.Tensor]:
    """All samples of one split: x uint8 [N, 1014] (character codes, 0 = padding) and y int64 [N] (0..3)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use one of {list(SPLITS)}")
    x = np.load(os.path.join(data_dir, f"{split}_x.npy"))
    y = np.load(os.path.join(data_dir, f"{split}_y.npy"))
    return torch.from_numpy(x), torch.from_numpy(y)


# ---------------------------------------------------------------------------
# 4. Evaluation: the official metric
# ---------------------------------------------------------------------------


@torch.no_grad()
def predict(
    model: nn.Module, split: str = EVAL_SPLIT, data_dir: str = DATA_DIR, device: str = "cpu", batch_size: int = 256
) -> torch.Tensor:
    """The predicted class (argmax of the logits) of every sample of `split`, int64 [N] on the CPU.

    Runs model(x) on the int64 codes under model.eval() in plain float32 (no autocast, no TF32), in a fixed order.
    """
    x, _ = load_split(split, data_dir)
    was_training = model.training
    model.eval()
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    preds = []
    try:
        with torch.autocast(device_type=torch.device(device).type, enabled=False):
            for i in range(0, len(x), batch_size):  # fixed order, fixed batches: deterministic
                xb = x[i : i + batch_size].to(device).long()
                logits = model(xb)
                if not isinstance(logits, torch.Tensor) or logits.shape != (len(xb), N_CLASSES):
                    shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
                    raise ValueError(
                        f"model(x) returned {shape} for x of shape {tuple(xb.shape)}; expected logits of shape "
                        f"{(len(xb), N_CLASSES)} = [batch, N_CLASSES={N_CLASSES}]"
                    )
                if not torch.isfinite(logits).all():
                    raise ValueError(f"the model produced non-finite logits on the {split} samples")
                preds.append(logits.argmax(dim=1).cpu())
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
        model.train(was_training)
    return torch.cat(preds)


def evaluate(
    model: nn.Module, split: str = EVAL_SPLIT, data_dir: str = DATA_DIR, device: str = "cpu", batch_size: int = 256
) -> dict:
    """Accuracy of the model on every sample of `split`: {"accuracy": float, "n": number of samples}.

    The official metric is evaluate(model, "test"); it is also the validation score your script reports (the
    paper's harness did the same). Same value as sklearn's accuracy_score(y, predict()).
    """
    pred = predict(model, split, data_dir, device, batch_size)
    _, y = load_split(split, data_dir)
    correct = int((pred == y).sum())
    return {METRIC: correct / len(y), "n": len(y)}


# 5. The helper block below is shared verbatim by all seven tasks (hence kept out of the formatter).
# fmt: off
# ---------------------------------------------------------------------------
# Checkpoint + logging helpers (the output contract, paper rule 7).
# Every training script saves its models through save_checkpoint() so that the
# harness can find them, rank them by the validation score the script
# reports, and rebuild them for the official evaluation:
#     model = build_model(payload["config"]); model.load_state_dict(sd, strict=True)
# ---------------------------------------------------------------------------

CHECKPOINT_FORMAT = "1gc-7rc/checkpoint-v1"


_spool = None  # the open spool file (one line-buffered append per event: microseconds, no MLflow)


def _trace(event: dict) -> None:
    """Append one event to the harness's spool file, if the harness set one.

    Standard library only and a no-op outside the harness, so it costs nothing
    when you run a script by hand. The harness relays these lines to MLflow.
    """
    global _spool
    path = os.environ.get("BENCH_SPOOL_FILE")
    if not path:
        return
    try:
        if _spool is None or _spool.name != path:
            _spool = open(path, "a", buffering=1, encoding="utf-8")
        _spool.write(json.dumps(event, default=str) + "\n")
    except OSError:
        pass  # tracing must never break training


def log_metrics(step: int, **metrics: float) -> None:
    """Trace one set of metrics at full precision, then print it (`step 100 | loss 1.2300 | val_bpb 2.3100`)."""
    values = {k: float(v) for k, v in metrics.items()}
    _trace({"ev": "metrics", "t": time.time(), "step": int(step), "metrics": values})
    print(f"step {step} | " + " | ".join(f"{k} {v:.4f}" for k, v in values.items()), flush=True)


def save_checkpoint(model: nn.Module, config: dict, val_score: float, *, step: int | None = None,
                    path: str | None = None) -> str:
    """Save a scored checkpoint into checkpoints/ and return its path.

    `config` must be plain Python values (numbers, strings, lists, dicts): it is
    stored beside the weights and passed back to your script's build_model().
    `val_score` is your own measurement of METRIC on the validation split.
    The state dict is saved as is: evaluation loads it with strict=True, so a
    torch.compile()d model must be saved via model._orig_mod.
    """
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "unknown"
    if path is None:
        os.makedirs(CHECKPOINT_DIR, exist_ok=True)
        stem = os.path.splitext(script)[0]
        tag = f"step{step}_" if step is not None else ""
        path = os.path.join(CHECKPOINT_DIR, f"{stem}_{tag}{METRIC}{float(val_score):.4f}_{time.time_ns()}.pt")
    payload = {
        "format": CHECKPOINT_FORMAT,
        "state_dict": model.state_dict(),
        "config": config,
        "script": script,
        "val_score": float(val_score),
        "metric": METRIC,
        "step": step,
        "time": time.time(),
    }
    tmp = path + ".tmp"
    torch.save(payload, tmp)
    os.replace(tmp, path)  # atomic: the harness never sees half a file
    _trace({"ev": "checkpoint", "t": time.time(), "path": os.path.abspath(path), "val_score": float(val_score),
            "metric": METRIC, "step": step, "config": config,
            "n_params": sum(p.numel() for p in model.parameters()),
            "device": str(next(model.parameters()).device) if any(True for _ in model.parameters()) else "cpu"})
    return path


def load_checkpoint(path: str) -> dict:
    """Load a checkpoint payload (weights_only: a checkpoint cannot run code)."""
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(payload, dict) or "state_dict" not in payload or "config" not in payload:
        raise ValueError(f"{path} is not a checkpoint saved by save_checkpoint(): it needs 'state_dict' and 'config'")
    return payload


def load_build_model(script_path: str):
    """Import build_model from a training script without running its training."""
    spec = importlib.util.spec_from_file_location("_scored_script", script_path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script_path)))
    spec.loader.exec_module(module)  # scripts must guard training with `if __name__ == "__main__":`
    if not hasattr(module, "build_model"):
        raise AttributeError(f"{script_path} has no build_model(config) function (rule 7)")
    return module.build_model


def rebuild_model(payload: dict, script_path: str) -> nn.Module:
    """build_model(config) + load_state_dict(strict=True): exactly what the official evaluation does."""
    model = load_build_model(script_path)(payload["config"])
    try:
        model.load_state_dict(payload["state_dict"], strict=True)
    except RuntimeError as e:
        hint = ""
        if any(str(k).startswith("_orig_mod.") for k in payload["state_dict"]):
            hint = (" The keys start with '_orig_mod.': the model was saved after torch.compile();"
                    " save the original module, save_checkpoint(model._orig_mod, ...).")
        raise ValueError(f"the saved state_dict does not fit build_model(config) from {script_path} "
                         f"under strict=True.{hint} Details: {e}") from e
    return model


def self_check(checkpoint: str, script: str | None = None, split: str = EVAL_SPLIT, **eval_options) -> dict:
    """Your own check of one checkpoint: rebuilt as the harness rebuilds it, scored by evaluate() in this process.

    The official score comes from the harness, not from here: a sandboxed process runs the model and a
    separate scorer, which never runs your code, holds the labels (of a test split: outside your workspace).
    """
    start = time.time()
    if not os.path.isfile(checkpoint):
        raise FileNotFoundError(f"checkpoint {checkpoint} does not exist")
    try:
        payload = load_checkpoint(checkpoint)
    except Exception as e:
        raise ValueError(f"cannot read checkpoint {checkpoint}: {e} (save it with prepare.save_checkpoint())") from e
    given, script = script, script or payload.get("script")
    if not script or not os.path.isfile(script):
        named = f"--script names {given!r}" if given else f"the checkpoint names {payload.get('script')!r}"
        raise FileNotFoundError(f"training script not found: {named}; pass --script PATH to the script that saved it")
    model = rebuild_model(payload, script)
    result = evaluate(model.to(eval_options.get("device", "cpu")), split, **eval_options)
    return {"task": TASK_ID, "metric": METRIC, "value": result[METRIC], "direction": DIRECTION, "split": split,
            "checkpoint": checkpoint, "script": script, "seconds": round(time.time() - start, 3), "n": result["n"]}
# fmt: on


# ---------------------------------------------------------------------------
# 6. Command line
# ---------------------------------------------------------------------------


def run_eval(args: argparse.Namespace) -> dict:
    """The official evaluation of one checkpoint; raises with a clear message on any problem."""
    start = time.time()
    if not os.path.isfile(args.eval):
        raise FileNotFoundError(f"checkpoint {args.eval} does not exist")
    try:
        payload = load_checkpoint(args.eval)
    except Exception as e:
        raise ValueError(f"cannot read checkpoint {args.eval}: {e} (save it with prepare.save_checkpoint())") from e
    script = args.script or payload.get("script")
    if not script or not os.path.isfile(script):
        named = f"--script names {args.script!r}" if args.script else f"the checkpoint names {payload.get('script')!r}"
        raise FileNotFoundError(f"training script not found: {named}; pass --script PATH to the script that saved it")
    if not os.path.isfile(os.path.join(args.data_dir, f"{EVAL_SPLIT}_x.npy")):
        raise FileNotFoundError(
            f"no prepared data in {args.data_dir!r}: run `python prepare.py --prepare` first or pass --data-dir"
        )
    model = load_build_model(script)(payload["config"])
    try:
        model.load_state_dict(payload["state_dict"], strict=True)
    except RuntimeError as e:
        hint = ""
        if any(str(k).startswith("_orig_mod.") for k in payload["state_dict"]):
            hint = " The keys start with '_orig_mod.': the model was saved after torch.compile(); save model._orig_mod."
        raise ValueError(
            f"the saved state_dict does not fit build_model(config) from {script} under strict=True.{hint} Details: {e}"
        ) from e
    if args.device == "cuda":
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
    model = model.to(args.device)
    result = evaluate(model, EVAL_SPLIT, args.data_dir, args.device, args.batch_size)
    return {
        "task": TASK_ID,
        "metric": METRIC,
        "value": result[METRIC],
        "direction": DIRECTION,
        "split": EVAL_SPLIT,
        "checkpoint": args.eval,
        "script": script,
        "seconds": round(time.time() - start, 3),
        "n": result["n"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=f"{TASK_ID}: data preparation and official evaluation")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--prepare", action="store_true", help="build the prepared data from the raw files")
    mode.add_argument("--eval", metavar="CHECKPOINT", help="score a checkpoint on the eval split")
    parser.add_argument("--raw-dir", help="folder holding train.csv and test.csv (with --prepare)")
    parser.add_argument("--data-dir", default=DATA_DIR, help="prepared data folder (default: data)")
    parser.add_argument("--script", help="training script with build_model (default: the checkpoint's)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()

    if args.prepare:
        if not args.raw_dir:
            parser.error("--prepare needs --raw-dir")
        prepare(args.raw_dir, args.data_dir)
        return
    try:
        result = run_eval(args)
    except Exception as e:  # any failure: one JSON line saying what to fix, exit 1
        print(json.dumps({"task": TASK_ID, "error": f"{type(e).__name__}: {e}"}))
        sys.exit(1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
