"""Small GENERATED data for this task, for `bench tasks check` and the test suite (docs/extending.md).

A tar with the layout of the VOC 2012 trainval tar, and random-init DINOv3 weight files under the official names (NOT
the real data: no score on them means anything). This file is never copied into an agent's workspace
(bench/pipeline/workspace.py copies program.md, train.py and the locked files only).
"""

from __future__ import annotations

import importlib.util
import io
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image


def jpeg(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


FULL_TAR = "VOCtrainval_11-May-2012.tar"
LABELS_ZIP = "VOC2012_SegmentationClass_trainval2913.zip"
CONVNEXT_FILE = "dinov3_convnext_tiny_pretrain_lvd1689m-21b726bb.pth"
VIT_FILE = "dinov3_vits16_pretrain_lvd1689m-08c60483.pth"
TRAIN_IDS = ["2007_000032", "2007_000039", "2007_000063", "2007_000068", "2007_000121", "2007_000170"]
VAL_IDS = ["2007_000033", "2007_000042", "2007_000061", "2007_000123"]
# One step of batch 2 on the CPU (ConvNeXt-T at 224 costs seconds here), then the validation on 4 images.
TINY = {"batch_size": 2, "epochs": 1, "max_steps": 1, "log_every": 1, "eval_batch_size": 4}


def voc_palette() -> list[int]:
    """The standard VOC colour map (class 1 = (128, 0, 0), ...), as the devkit's labelcolormap builds it."""
    palette = []
    for i in range(256):
        r = g = b = 0
        c = i
        for j in range(8):
            r |= ((c >> 0) & 1) << (7 - j)
            g |= ((c >> 1) & 1) << (7 - j)
            b |= ((c >> 2) & 1) << (7 - j)
            c >>= 3
        palette += [r, g, b]
    return palette


def png(mask: np.ndarray, mode: str = "P") -> bytes:
    """A label PNG: a palette image whose indices are the class ids (mode "RGB": the colours instead, a bad file)."""
    img = Image.fromarray(mask)
    img.putpalette(voc_palette())  # "L" -> "P", indices kept
    if mode == "RGB":
        img = img.convert("RGB")
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def make_pair(rng: np.random.Generator, label: int) -> tuple[bytes, bytes]:
    """A GENERATED image of random size (noise + a rectangle) and its mask: background 0, the rectangle = `label`,
    a 2-pixel 255 ("void") border around it, as VOC draws object borders."""
    h, w = (int(v) for v in rng.integers(60, 180, size=2))
    mask = np.zeros((h, w), dtype=np.uint8)
    top, left = h // 4, w // 5
    mask[top - 2 : 3 * h // 4 + 2, left - 2 : 4 * w // 5 + 2] = 255
    mask[top : 3 * h // 4, left : 4 * w // 5] = label
    pixels = rng.integers(0, 120, (h, w, 3), dtype=np.uint8)
    pixels[mask == label] += np.array([100, 60, 20], dtype=np.uint8) * (label % 2 + 1) // 2
    return jpeg(pixels), png(mask)


def make_pairs(ids: list[str], seed: int = 0) -> dict[str, tuple[bytes, bytes]]:
    rng = np.random.default_rng(seed)
    return {i: make_pair(rng, 1 + k % 20) for k, i in enumerate(ids)}


def add_file(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_voc_tar(path: Path, train: list[str], val: list[str], pairs: dict, drop_png: str | None = None) -> None:
    """A GENERATED tar with the layout of VOCtrainval_11-May-2012.tar (plus an unlisted image and annotations)."""
    root = "VOCdevkit/VOC2012/"
    with tarfile.open(path, "w") as tar:
        add_file(tar, root + "Annotations/2007_000027.xml", b"<annotation></annotation>\n")
        add_file(tar, root + "JPEGImages/2007_000027.jpg", pairs[next(iter(pairs))][0])  # a detection-only image
        for split, ids in (("train", train), ("val", val), ("trainval", sorted(train + val))):
            add_file(tar, f"{root}ImageSets/Segmentation/{split}.txt", "".join(i + "\n" for i in ids).encode())
        for voc_id in sorted(set(train + val)):
            add_file(tar, f"{root}JPEGImages/{voc_id}.jpg", pairs[voc_id][0])
            if voc_id != drop_png:
                add_file(tar, f"{root}SegmentationClass/{voc_id}.png", pairs[voc_id][1])


def write_substitutes(raw: Path, train: list[str], val: list[str], pairs: dict, with_jpeg: set[str]) -> None:
    """The mirror's partial copy, GENERATED: lists, a zip of every label PNG, and a sample folder of some JPEGs."""
    raw.mkdir(parents=True, exist_ok=True)
    (raw / "train.txt").write_text("".join(i + "\n" for i in train))
    (raw / "val.txt").write_text("".join(i + "\n" for i in val))
    with zipfile.ZipFile(raw / LABELS_ZIP, "w", zipfile.ZIP_STORED) as zf:
        for voc_id in sorted(train + val):
            zf.writestr(f"VOCdevkit/VOC2012/SegmentationClass/{voc_id}.png", pairs[voc_id][1])
    for voc_id in with_jpeg:
        for sub, blob in (("JPEGImages", pairs[voc_id][0]), ("SegmentationClass", pairs[voc_id][1])):
            (raw / "VOC2012-sample" / sub).mkdir(parents=True, exist_ok=True)
            (raw / "VOC2012-sample" / sub / f"{voc_id}.{'jpg' if sub == 'JPEGImages' else 'png'}").write_bytes(blob)


def random_backbones(folder: Path) -> dict:
    """Randomly initialised DINOv3 backbones (seed 0), built by the dinov3.py of `folder`: NOT the real weights."""
    spec = importlib.util.spec_from_file_location("_smalldata_dinov3", Path(folder) / "dinov3.py")
    dinov3 = importlib.util.module_from_spec(spec)
    written, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ in the folder
    try:
        spec.loader.exec_module(dinov3)
    finally:
        sys.dont_write_bytecode = written
    torch.manual_seed(0)
    return {"convnext": dinov3.convnext_tiny().eval(), "vit": dinov3.vit_small().eval()}


def write_raw(raw: Path) -> dict:
    pairs = make_pairs(TRAIN_IDS + VAL_IDS)
    write_voc_tar(raw / FULL_TAR, TRAIN_IDS, VAL_IDS, pairs)
    return {"pairs": pairs}


def setup(ws: Path) -> None:
    """GENERATED weight files: random-init state dicts under the official names, in the workspace's weights/."""
    backbones = random_backbones(ws)
    (ws / "weights").mkdir()
    torch.save(backbones["convnext"].state_dict(), ws / "weights" / CONVNEXT_FILE)
    torch.save(backbones["vit"].state_dict(), ws / "weights" / VIT_FILE)


VAL_SPLIT = "val"  # the split the self-reported val_score is measured on (prepare.py's name)
