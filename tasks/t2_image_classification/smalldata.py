"""Small GENERATED data for this task, for `bench tasks check` and the test suite (docs/extending.md).

A zip with the layout of tiny-imagenet-200.zip and random JPEGs (NOT the real data: no score on them means anything).
This file is never copied into an agent's workspace (bench/pipeline/workspace.py copies program.md, train.py and the
locked files only).
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
from PIL import Image


def jpeg(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


SUBSET_ZIP = "tiny-imagenet-200-subset.zip"
FULL_ZIP = "tiny-imagenet-200.zip"
# A tiny network and schedule: 400 generated training images / 16 = 25 steps an epoch, stopped after 30 steps.
TINY = {
    "width": 8,
    "blocks_per_stage": [1, 1, 1, 1],
    "batch_size": 16,
    "epochs": 2,
    "max_steps": 30,
    "eval_every": 10,
    "log_every": 5,
    "eval_batch_size": 64,
}


def write_tiny_imagenet_like(
    path: Path,
    train_per_class: int = 2,
    val_per_class: int = 1,
    n_classes: int = 200,
    seed: int = 0,
    bad_val_wnid: bool = False,
    odd_size: bool = False,
) -> dict:
    """A GENERATED zip with the layout of tiny-imagenet-200.zip (NOT the real data).

    wnids.txt lists the classes in a shuffled (unsorted) order; the first training image of the first listed
    class is greyscale, as a few real ones are. Returns {"wnids": sorted wnids, "train"/"val": [(member, wnid)]}.
    """
    rng = np.random.default_rng(seed)
    wnids = [f"n{1000000 + 7919 * i:08d}" for i in range(n_classes)]
    listed = [wnids[i] for i in rng.permutation(n_classes)]
    root = "tiny-imagenet-200/"
    train, val = [], []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(root + "wnids.txt", "".join(w + "\n" for w in listed))
        words = ["n00001740\tentity"] + [f"{w}\tgenerated class {i}, thing {i}" for i, w in enumerate(wnids)]
        zf.writestr(root + "words.txt", "\n".join(words) + "\n")
        for c, w in enumerate(listed):
            boxes = []
            for k in range(train_per_class):
                member = f"{root}train/{w}/images/{w}_{k}.JPEG"
                if c == 0 and k == 0:
                    pixels = rng.integers(0, 256, (64, 64), dtype=np.uint8)  # greyscale ("L") JPEG
                else:
                    size = 56 if odd_size and c == 1 else 64
                    pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
                zf.writestr(member, jpeg(pixels))
                boxes.append(f"{w}_{k}.JPEG\t0\t0\t63\t63")
                train.append((member, w))
            zf.writestr(f"{root}train/{w}/{w}_boxes.txt", "\n".join(boxes) + "\n")
        labels = [w for w in wnids for _ in range(val_per_class)]
        labels = [labels[i] for i in rng.permutation(len(labels))]
        lines = []
        for k, w in enumerate(labels):
            member = f"{root}val/images/val_{k}.JPEG"
            zf.writestr(member, jpeg(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)))
            lines.append(f"val_{k}.JPEG\t{'n99999999' if bad_val_wnid and k == 3 else w}\t0\t0\t63\t63")
            val.append((member, w))
        zf.writestr(root + "val/val_annotations.txt", "\n".join(lines) + "\n")
    return {"wnids": sorted(wnids), "train": train, "val": val}


def write_raw(raw: Path) -> dict:
    return {"index": write_tiny_imagenet_like(raw / SUBSET_ZIP)}


VAL_SPLIT = "val"  # the split the self-reported val_score is measured on (prepare.py's name)
