# =============================================================================
# prepare.py for T2 (image classification, TinyImageNet): LOCKED.
# Do not modify: the harness evaluates with the original copy of this file.
#
# What is here, in order:
#   1. constants (task, image size, class and image counts, normalisation)
#   2. preparation: tiny-imagenet-200.zip -> uint8 image arrays + labels in data/
#   3. loaders the training scripts import (load_split, load_meta, normalize)
#   4. the evaluation: eval_batches, forward, score, evaluate (top-1 accuracy on the validation images)
#   5. checkpoint + logging helpers (task_helpers.py, shared by all seven tasks)
#   6. main(): the command line
#
#   python prepare.py --prepare --raw-dir RAW --data-dir OUT
#   python prepare.py --eval checkpoints/<file>.pt [--script PATH] [--data-dir DIR] [--device cpu|cuda]
#                     [--batch-size N]      (your own check; the harness scores officially)
# =============================================================================

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
import time
import zipfile

import numpy as np
import torch
import torch.nn as nn
from PIL import Image

# The checkpoint and logging helpers every task shares live in task_helpers.py beside this file (locked too);
# section 5 gives two of them this task's metric. Training scripts import them all from here:
# `from prepare import log_metrics, save_checkpoint`.
from task_helpers import CHECKPOINT_DIR, load_build_model, load_checkpoint, log_metrics, rebuild_model  # noqa: F401
from task_helpers import save_checkpoint as helpers_save_checkpoint
from task_helpers import self_check as helpers_self_check

# ---------------------------------------------------------------------------
# 1. Constants
# ---------------------------------------------------------------------------

TASK_ID = "t2"
METRIC = "top1_acc"  # fraction of validation images whose highest logit is the true class
DIRECTION = "max"  # higher is better
EVAL_SPLIT = "val"  # TinyImageNet's test labels were never published: the 10,000 val images are the benchmark
DATA_DIR = "data"

FULL_ZIP = "tiny-imagenet-200.zip"  # the official archive (cs231n.stanford.edu), 100,000 train + 10,000 val
SUBSET_ZIP = "tiny-imagenet-200-subset.zip"  # the data mirror's partial copy: 100 train images per class, all val
ROOT = "tiny-imagenet-200/"  # every member of both archives lies under this folder
N_CLASSES = 200
IMAGE_SIZE = 64  # every image is 64 x 64 RGB
TRAIN_PER_CLASS = 500  # official counts: 500 x 200 = 100,000 training images ...
VAL_PER_CLASS = 50  # ... and 50 x 200 = 10,000 validation images
N_TRAIN = N_CLASSES * TRAIN_PER_CLASS
N_VAL = N_CLASSES * VAL_PER_CLASS
MEAN = (0.485, 0.456, 0.406)  # ImageNet channel statistics (RGB, on pixel values / 255): the inputs
STD = (0.229, 0.224, 0.225)  # the model sees are (x / 255 - MEAN) / STD

SPLITS = ("train", "val")
WNID = re.compile(r"n\d{8}")  # WordNet ids name the classes, e.g. n01443537 (goldfish)


# ---------------------------------------------------------------------------
# 2. Preparation: the zip -> data/{train,val}_{x,y}.npy + data/meta.json
# Images are decoded straight from the zip (no extraction) with Pillow and converted to RGB: a few
# TinyImageNet JPEGs are greyscale. Class i is the i-th wnid in SORTED order (the order of
# torchvision's ImageFolder over train/, which most TinyImageNet loaders use), not the order of the lines
# of wnids.txt. Training images are stored class by class, in the order of their number (<wnid>_0,
# <wnid>_1, ...); validation images in the order of val/val_annotations.txt (val_0, val_1, ...).
# ---------------------------------------------------------------------------


def _natural_key(name: str) -> tuple:
    """Sort n01443537_10.JPEG after n01443537_9.JPEG."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def find_zip(raw_dir: str) -> str:
    """The archive to prepare from: the official zip if present, else the mirror's partial subset."""
    for name in (FULL_ZIP, SUBSET_ZIP):
        path = os.path.join(raw_dir, name)
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(
        f"{raw_dir} holds neither {FULL_ZIP} nor {SUBSET_ZIP}: download {FULL_ZIP} from "
        f"http://cs231n.stanford.edu/{FULL_ZIP} into it (or let the harness fetch it)"
    )


def read_index(zf: zipfile.ZipFile, path: str) -> dict:
    """List the classes and the images of each split from the archive, checking the layout and the counts.

    Returns {"wnids": sorted wnids, "words": their names, "train": [(member, label)], "val": [(member, label)]}.
    The official archive must hold exactly the official counts; a partial copy (any other file name) must
    hold all 200 classes, at least one training image of each, and its own val_annotations.txt entries.
    """
    names = set(zf.namelist())

    def text(member: str) -> list[str]:
        if ROOT + member not in names:
            raise ValueError(f"{path}: no {ROOT}{member}; is this the TinyImageNet zip (tiny-imagenet-200/...)?")
        return zf.read(ROOT + member).decode("utf-8").splitlines()

    listed = [w.strip() for w in text("wnids.txt") if w.strip()]
    wnids = sorted(set(listed))
    bad = [w for w in wnids if not WNID.fullmatch(w)]
    if len(listed) != N_CLASSES or len(wnids) != N_CLASSES or bad:
        raise ValueError(
            f"{path}: wnids.txt must list {N_CLASSES} distinct wnids (n + 8 digits); found {len(listed)} lines, "
            f"{len(wnids)} distinct{', malformed: ' + ', '.join(bad[:3]) if bad else ''}"
        )
    label = {w: i for i, w in enumerate(wnids)}
    words_of = dict(line.split("\t", 1) for line in text("words.txt") if "\t" in line)
    words = [words_of.get(w, w).strip() for w in wnids]

    per_class: dict[str, list[str]] = {w: [] for w in wnids}
    for member in names:
        parts = member[len(ROOT) :].split("/")  # train/<wnid>/images/<file>.JPEG
        jpeg = parts[-1].lower().endswith((".jpeg", ".jpg"))
        if member.startswith(ROOT + "train/") and len(parts) == 4 and parts[2] == "images" and jpeg:
            if parts[1] not in label:
                raise ValueError(f"{path}: {member} is in a class folder that wnids.txt does not list")
            per_class[parts[1]].append(member)
    train = [(m, label[w]) for w in wnids for m in sorted(per_class[w], key=_natural_key)]

    val, seen = [], set()
    for n, line in enumerate(text("val/val_annotations.txt"), 1):
        fields = line.split("\t")
        if not line.strip():
            continue
        if len(fields) < 2 or fields[1] not in label:
            raise ValueError(f"{path}: val_annotations.txt line {n} names no wnid of wnids.txt: {line!r}")
        member = f"{ROOT}val/images/{fields[0]}"
        if member not in names or member in seen:
            raise ValueError(f"{path}: val_annotations.txt line {n}: {member} is missing or listed twice")
        seen.add(member)
        val.append((member, label[fields[1]]))

    if not val:
        raise ValueError(f"{path}: val/val_annotations.txt lists no validation images")
    train_counts = [len(per_class[w]) for w in wnids]
    val_counts = np.bincount([y for _, y in val], minlength=N_CLASSES)
    empty = [w for w, c in zip(wnids, train_counts, strict=True) if c == 0]
    if empty:
        raise ValueError(f"{path}: {len(empty)} classes have no training images (e.g. train/{empty[0]}/images/)")
    official = os.path.basename(path) == FULL_ZIP
    if official and set(train_counts) != {TRAIN_PER_CLASS}:
        raise ValueError(
            f"{path}: expected {TRAIN_PER_CLASS} training images per class in the official archive, found "
            f"{min(train_counts)} to {max(train_counts)}; the download is incomplete: fetch it again"
        )
    if (official or len(val) == N_VAL) and (len(val) != N_VAL or set(val_counts.tolist()) != {VAL_PER_CLASS}):
        raise ValueError(
            f"{path}: expected {N_VAL:,} validation images, {VAL_PER_CLASS} per class; found {len(val):,}, "
            f"{val_counts.min()} to {val_counts.max()} per class"
        )
    return {"wnids": wnids, "words": words, "train": train, "val": val}


def decode_images(zf: zipfile.ZipFile, members: list[str]) -> np.ndarray:
    """Decode JPEGs from the zip into one uint8 array [N, 3, 64, 64] (RGB, channels first)."""
    out = np.empty((len(members), 3, IMAGE_SIZE, IMAGE_SIZE), dtype=np.uint8)
    for i, member in enumerate(members):
        with Image.open(io.BytesIO(zf.read(member))) as img:
            if img.size != (IMAGE_SIZE, IMAGE_SIZE):
                raise ValueError(f"{member} is {img.size[0]}x{img.size[1]}, not {IMAGE_SIZE}x{IMAGE_SIZE}")
            out[i] = np.asarray(img.convert("RGB")).transpose(2, 0, 1)  # HWC -> CHW; greyscale -> 3 equal channels
    return out


def prepare(raw_dir: str, data_dir: str) -> None:
    """Decode both splits and save images, labels and meta.json; describe any shortfall in partial_data."""
    start = time.time()
    path = find_zip(raw_dir)
    with zipfile.ZipFile(path) as zf:
        index = read_index(zf, path)
        os.makedirs(data_dir, exist_ok=True)
        counts = {}
        for split in SPLITS:
            members = [m for m, _ in index[split]]
            labels = np.array([y for _, y in index[split]], dtype=np.int64)
            np.save(os.path.join(data_dir, f"{split}_x.npy"), decode_images(zf, members))
            np.save(os.path.join(data_dir, f"{split}_y.npy"), labels)
            counts[split] = len(members)
    per_class = np.bincount([y for _, y in index["train"]], minlength=N_CLASSES)
    notes = []  # one line per way these data fall short of the official TinyImageNet
    if counts["train"] != N_TRAIN:
        each = f"{per_class[0]}" if per_class.min() == per_class.max() else f"{per_class.min()}-{per_class.max()}"
        notes.append(
            f"train: {counts['train']:,} of {N_TRAIN:,} images ({each} of {TRAIN_PER_CLASS} per class, "
            f"from {os.path.basename(path)})"
        )
    if counts["val"] != N_VAL:
        notes.append(f"val: {counts['val']:,} of {N_VAL:,} images (from {os.path.basename(path)})")
    meta = {
        "classes": index["wnids"],  # class i = classes[i] (sorted wnids)
        "words": index["words"],  # the WordNet names of each class, from words.txt
        "counts": counts,
        "train_per_class": per_class.tolist(),
        "layout": "x: uint8 [N, 3, 64, 64] RGB (channels first); y: int64 class index",
        "mean": list(MEAN),
        "std": list(STD),
        "source": os.path.basename(path),
        "partial_data": notes,
    }
    with open(os.path.join(data_dir, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)
    print(
        f"prepared {counts['train']:,} train and {counts['val']:,} val images from {os.path.basename(path)} "
        f"in {time.time() - start:.1f} s into {data_dir}" + "".join(f"\n  partial data: {n}" for n in notes)
    )


# ---------------------------------------------------------------------------
# 3. Loaders (import these in your training script)
# ---------------------------------------------------------------------------


def load_meta(data_dir: str = DATA_DIR) -> dict:
    """Class wnids and names, counts, normalisation and partial_data notes, as written by prepare()."""
    with open(os.path.join(data_dir, "meta.json"), encoding="utf-8") as f:
        return json.load(f)


def load_split(split: str, data_dir: str = DATA_DIR) -> tuple[torch.Tensor, torch.Tensor]:
    """All images and labels of one split: x uint8 [N, 3, 64, 64] (RGB, 0..255) and y int64 [N].

    The images are raw pixels: pass them (or augmented copies) through normalize() before the model.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use one of {list(SPLITS)}")
    x = np.load(os.path.join(data_dir, f"{split}_x.npy"))
    y = np.load(os.path.join(data_dir, f"{split}_y.npy"))
    return torch.from_numpy(x), torch.from_numpy(y)


def normalize(x: torch.Tensor) -> torch.Tensor:
    """Images -> model inputs on x's device: float32 (x / 255 - MEAN) / STD, per RGB channel.

    x is [B, 3, H, W], either uint8 (0..255, as load_split gives it) or floating point already scaled to 0..1.
    """
    x = x.float() / 255.0 if x.dtype == torch.uint8 else x.float()
    if x.device not in _STATS:  # made once per device: a copy to the GPU at every step would wait for the GPU
        _STATS[x.device] = tuple(torch.tensor(v, device=x.device).view(1, 3, 1, 1) for v in (MEAN, STD))
    mean, std = _STATS[x.device]
    return (x - mean) / std


_STATS: dict = {}  # device -> (mean, std) tensors for normalize()


# ---------------------------------------------------------------------------
# 4. Evaluation: the official metric
# The harness scores a checkpoint in two processes: a sandboxed predictor runs
# the model through forward() on the inputs of eval_batches(), and a scorer
# that never runs your code compares its outputs with the labels in score().
# evaluate() does all three in one process: call it for your validation score.
# ---------------------------------------------------------------------------

# The images are independent samples and an input (the pixels) reveals no label, so any batch size gives the
# same predictions. 256 images are 3 MB of uint8 pixels in and 200 KB of logits out per batch, and a model's
# float32 activations at 64 x 64 fit a GPU with room to spare at that size.
FEED_BATCH_SIZE = 256


def eval_batches(split: str = EVAL_SPLIT, data_dir: str = DATA_DIR, batch_size: int = 256) -> list:
    """[(inputs, labels)] in the stored order: inputs {"x": uint8 [b, 3, 64, 64]}, labels int64 [b] (numpy)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use one of {list(SPLITS)}")
    if not os.path.isfile(os.path.join(data_dir, f"{split}_x.npy")):
        raise FileNotFoundError(
            f"no prepared data in {data_dir!r}: run `python prepare.py --prepare` first or pass --data-dir"
        )
    x, y = (t.numpy() for t in load_split(split, data_dir))
    return [({"x": x[i : i + batch_size]}, y[i : i + batch_size]) for i in range(0, len(x), batch_size)]


def forward(model: nn.Module, inputs: dict) -> torch.Tensor:
    """The forward contract: model(normalize(x)), x uint8 [batch, 3, 64, 64] -> logits [batch, N_CLASSES].

    Plain float32: no autocast (and no TF32: the harness turns it off, evaluate() too), so the score depends
    neither on reduced-precision rounding nor on which ops support it.
    """
    x = inputs["x"]
    with torch.autocast(device_type=x.device.type, enabled=False):
        xb = normalize(x)
        logits = model(xb)
    if not isinstance(logits, torch.Tensor) or logits.shape != (len(xb), N_CLASSES):
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(
            f"model(x) returned {shape} for x of shape {tuple(xb.shape)}; expected logits of shape "
            f"{(len(xb), N_CLASSES)} = [batch, N_CLASSES={N_CLASSES}]"
        )
    return logits


def score(outputs: list, targets: list) -> dict:
    """Top-1 accuracy: the fraction of images whose highest logit is the true class: {"top1_acc": float, "n": images}.

    Ties go to the lowest class index (argmax). Same value as sklearn's accuracy_score(y, logits.argmax(1)).
    """
    correct = total = 0
    for logits, y in zip(outputs, targets, strict=True):
        if logits.shape != (len(y), N_CLASSES):
            raise ValueError(
                f"model(x) returned {tuple(logits.shape)} for {len(y)} images; expected logits of shape "
                f"{(len(y), N_CLASSES)} = [batch, N_CLASSES={N_CLASSES}]"
            )
        if not np.isfinite(logits).all():
            raise ValueError("the model produced non-finite logits")
        correct += int((logits.argmax(axis=1) == y).sum())
        total += len(y)
    if not total:
        raise ValueError("the split has no images: accuracy is undefined")
    return {METRIC: correct / total, "n": total}


@torch.no_grad()
def evaluate(
    model: nn.Module, split: str = EVAL_SPLIT, data_dir: str = DATA_DIR, device: str = "cpu", batch_size: int = 256
) -> dict:
    """score(forward(model, inputs)) over every image of `split` in this process: {"top1_acc": float, "n": images}.

    Call it with split="val" for the validation score your script reports: that is exactly the official
    metric (this task is scored on the validation images). Runs under model.eval() in plain float32 (no
    autocast, no TF32), in a fixed order, and restores the model's training mode.
    """
    was_training = model.training
    model.eval()
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    outputs, targets = [], []
    try:
        for inputs, y in eval_batches(split, data_dir, batch_size):  # fixed order, fixed batches: deterministic
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
    parser = argparse.ArgumentParser(description=f"{TASK_ID}: data preparation and official evaluation")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--prepare", action="store_true", help="build the prepared data from the raw files")
    mode.add_argument("--eval", metavar="CHECKPOINT", help="check a checkpoint: its score on the val split")
    parser.add_argument("--raw-dir", help=f"folder holding {FULL_ZIP} or {SUBSET_ZIP} (with --prepare)")
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
    if args.device == "cuda":  # deterministic kernels, as the harness's predictor uses
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
    try:
        result = self_check(
            args.eval, args.script, EVAL_SPLIT, data_dir=args.data_dir, device=args.device, batch_size=args.batch_size
        )
    except Exception as e:  # any failure: one JSON line saying what to fix, exit 1
        print(json.dumps({"task": TASK_ID, "error": f"{type(e).__name__}: {e}"}))
        sys.exit(1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
