# =============================================================================
# prepare.py for the example pack's task "spirals" (two interleaved spirals): LOCKED.
# Do not modify: the harness evaluates with the original copy of this file.
#
# A task written for docs/extending.md, not one of the paper's seven: small enough that its baseline trains in
# seconds on a CPU, with the task folder contract of the seven (task.toml, program.md, this locked file with the
# shared helper block, the baseline train.py, a held-out test split).
#
# What is here, in order:
#   1. constants (task, sizes, the generator's parameters and seed)
#   2. preparation: the data are GENERATED here (no download, no raw file): train and val from a fixed seed,
#      the held-out test split from fresh OS entropy (so that this file cannot regenerate the scored points)
#   3. loaders the training scripts import (load_split, load_meta)
#   4. the evaluation: the inputs the harness feeds, the forward contract, the metric (test accuracy)
#   5. checkpoint + logging helpers (shared by every task)
#   6. main(): the command line
#
#   python prepare.py --prepare --raw-dir RAW --data-dir OUT      (RAW is accepted and unused: nothing to read)
#   python prepare.py --eval checkpoints/<file>.pt [--script PATH] [--data-dir DIR] [--device cpu|cuda]
#                     [--split train|val|test] [--batch-size N]   (your own check; the harness scores officially)
# =============================================================================

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import secrets
import sys
import time

import numpy as np
import torch
import torch.nn as nn

# ---------------------------------------------------------------------------
# 1. Constants
# ---------------------------------------------------------------------------

TASK_ID = "spirals"
METRIC = "accuracy"  # fraction of points whose highest logit is their label
DIRECTION = "max"  # higher is better
EVAL_SPLIT = "test"
DATA_DIR = "data"
CHECKPOINT_DIR = "checkpoints"

N_FEATURES = 2  # a point (x, y) in the plane
N_CLASSES = 2  # which of the two spirals it was drawn from
SIZES = {"train": 4000, "val": 1000, "test": 5000}
SEED = 20261126  # train and val: the same points on every machine
TURNS = 2.0  # turns of each spiral arm around the origin
NOISE = 0.03  # standard deviation of the Gaussian jitter added to each coordinate
LABEL_NOISE = 0.05  # share of labels flipped at random: no classifier beats ~0.95 in expectation
SPLITS = ("train", "val", "test")
# The test points and their labels stay with the harness, out of your workspace (paper rule 9).
HELD_OUT = ("test_x.npy", "test_y.npy")


# ---------------------------------------------------------------------------
# 2. Preparation: generated points -> data/{train,val,test}_{x,y}.npy + data/meta.json
# ---------------------------------------------------------------------------


def make_split(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """n points of two interleaved spirals: x float32 [n, 2], y int64 [n] (0 or 1), LABEL_NOISE of them flipped."""
    y = rng.integers(0, N_CLASSES, n)
    r = np.sqrt(rng.uniform(0.02, 1.0, n))  # radius: uniform over the disc's area, away from the centre
    angle = 2 * np.pi * TURNS * r + np.pi * y  # the second arm is the first turned by half a turn
    x = np.stack([r * np.cos(angle), r * np.sin(angle)], axis=1) + NOISE * rng.standard_normal((n, 2))
    flipped = rng.random(n) < LABEL_NOISE
    return x.astype(np.float32), np.where(flipped, 1 - y, y).astype(np.int64)


def prepare(raw_dir: str | None, data_dir: str) -> None:
    """Generate the three splits and save them.

    Train and val come from one generator seeded with SEED, in that order: the same points on every machine. The
    test split comes from a generator seeded by the operating system's entropy, drawn once when the harness prepares
    the data and written nowhere else: this file is in every agent's workspace, and a seed written here would let an
    agent regenerate the very points (and flipped labels) it is scored on (rule 9). So the test points differ between
    machines but not their distribution: 5,000 of them put a score within about +-0.013 (2 standard errors) of the
    model's expected accuracy, which task.toml's baseline and references are.
    """
    start = time.time()
    rng = np.random.default_rng(SEED)
    os.makedirs(data_dir, exist_ok=True)
    counts, class_counts = {}, {}
    for split in SPLITS:
        x, y = make_split(SIZES[split], rng if split != "test" else np.random.default_rng(secrets.randbits(128)))
        np.save(os.path.join(data_dir, f"{split}_x.npy"), x)
        np.save(os.path.join(data_dir, f"{split}_y.npy"), y)
        counts[split] = len(y)
        if split != "test":  # the test classes stay with the harness (rule 9), their counts included
            class_counts[split] = np.bincount(y, minlength=N_CLASSES).tolist()
    meta = {
        "features": ["x", "y"],
        "classes": ["spiral 0", "spiral 1"],
        "counts": counts,
        "class_counts": class_counts,  # train and val
        "generator": {"seed": SEED, "turns": TURNS, "noise": NOISE, "label_noise": LABEL_NOISE},  # train, val
        "held_out": list(HELD_OUT),  # not in a workspace: only the harness's scorer reads the test points and labels
        "partial_data": [],  # generated in full: nothing is missing
    }
    with open(os.path.join(data_dir, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)
    print(f"prepared {', '.join(f'{s}: {n:,} points' for s, n in counts.items())} in {time.time() - start:.2f} s "
          f"into {data_dir}")  # fmt: skip


# ---------------------------------------------------------------------------
# 3. Loaders (import these in your training script)
# ---------------------------------------------------------------------------


def load_meta(data_dir: str = DATA_DIR) -> dict:
    """Class names, split sizes, the generator's parameters, as written by prepare()."""
    with open(os.path.join(data_dir, "meta.json"), encoding="utf-8") as f:
        return json.load(f)


def load_split(split: str, data_dir: str = DATA_DIR) -> tuple[torch.Tensor, torch.Tensor]:
    """All points of one split: x float32 [N, 2] and y int64 [N] (0 or 1).

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
            "run `python prepare.py --prepare --raw-dir . --data-dir data` first or pass --data-dir"
        )
    return np.load(paths[0]), np.load(paths[1])


def has_test_split(data_dir: str = DATA_DIR) -> bool:
    """Whether the test points and labels are in data_dir: in the harness's copy, never in your workspace (rule 9)."""
    return all(os.path.isfile(os.path.join(data_dir, f"test_{part}.npy")) for part in ("x", "y"))


# ---------------------------------------------------------------------------
# 4. Evaluation: the official metric
# The harness scores a checkpoint in two processes: a sandboxed predictor runs
# the model through forward() on the inputs of eval_batches(), and a scorer
# that never runs your code compares its outputs with the labels in score().
# evaluate() does all three in one process: call it for your validation score.
# ---------------------------------------------------------------------------

# The points are independent samples: a point's logits depend on its own two coordinates only, so any batch size is
# safe and gives the same predictions up to float rounding. 500 points a batch: 10 batches for the 5,000 test points.
FEED_BATCH_SIZE = 500


def eval_batches(split: str = EVAL_SPLIT, data_dir: str = DATA_DIR, batch_size: int = FEED_BATCH_SIZE) -> list:
    """[(inputs, labels)] in file order: inputs {"x": float32 [b, 2]}, labels int64 [b] (numpy)."""
    x, y = _arrays(split, data_dir)
    return [({"x": x[i : i + batch_size]}, y[i : i + batch_size]) for i in range(0, len(x), batch_size)]


def forward(model: nn.Module, inputs: dict) -> torch.Tensor:
    """The forward contract: model(x), x [b, 2] float32 -> logits [b, 2] (the class is their argmax), in float32."""
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
    """Accuracy: the fraction of points whose highest logit is their label, {"accuracy": float, "n": points}."""
    correct, count = 0, 0
    for logits, y in zip(outputs, targets, strict=True):
        if logits.shape != (len(y), N_CLASSES):
            raise ValueError(
                f"the model returned logits of shape {tuple(logits.shape)} for {len(y)} points; expected "
                f"{(len(y), N_CLASSES)} = [batch, N_CLASSES={N_CLASSES}]"
            )
        if not np.isfinite(logits).all():
            raise ValueError("the model produced non-finite logits")
        correct += int((logits.argmax(axis=1) == y).sum())
        count += len(y)
    return {METRIC: correct / count, "n": count}


@torch.no_grad()
def evaluate(
    model: nn.Module,
    split: str = EVAL_SPLIT,
    data_dir: str = DATA_DIR,
    device: str = "cpu",
    batch_size: int = FEED_BATCH_SIZE,
) -> dict:
    """score(forward(model, inputs)) over every point of `split` in this process: {"accuracy": float, "n": points}.

    Call it with split="val" for the validation score your script reports: it is then exactly the official
    metric on the validation split, under model.eval() in plain float32, in a fixed order and fixed batches.
    """
    was_training = model.training
    model.eval()
    outputs, targets = [], []
    try:
        for inputs, y in eval_batches(split, data_dir, batch_size):
            logits = forward(model, {k: torch.from_numpy(v).to(device) for k, v in inputs.items()})
            outputs.append(logits.float().cpu().numpy())
            targets.append(y)
    finally:
        model.train(was_training)
    return score(outputs, targets)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=f"{TASK_ID}: data preparation and your own check of a checkpoint")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--prepare", action="store_true", help="build the prepared data from the raw files")
    mode.add_argument("--eval", metavar="CHECKPOINT", help="score a checkpoint on a split (your own check)")
    parser.add_argument("--raw-dir", help="accepted with --prepare and unused: the data are generated")
    parser.add_argument("--data-dir", default=DATA_DIR, help="prepared data folder (default: data)")
    parser.add_argument("--script", help="training script with build_model (default: the checkpoint's)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--split", choices=list(SPLITS), help="default: test if present in --data-dir, else val")
    parser.add_argument("--batch-size", type=int, default=FEED_BATCH_SIZE)
    args = parser.parse_args()

    if args.prepare:
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
