# =============================================================================
# prepare.py for T3 (semantic segmentation, Pascal VOC 2012): LOCKED.
# Do not modify: the harness evaluates with the original copy of this file.
#
# What is here, in order:
#   1. constants (task, classes, image size, normalisation)
#   2. preparation: the VOC tar (or the data mirror's partial substitutes) -> 224 x 224 uint8 arrays in data/
#   3. loaders the training scripts import (load_split, load_meta, normalize)
#   4. the evaluation: eval_batches, forward, score, evaluate (mIoU from one confusion matrix of the split)
#   5. checkpoint + logging helpers (task_helpers.py, shared by all seven tasks)
#   6. main(): the command line
#
#   python prepare.py --prepare --raw-dir RAW --data-dir OUT
#   python prepare.py --eval checkpoints/<file>.pt [--script PATH] [--data-dir DIR] [--device cpu|cuda]
#                     [--batch-size N]      (your own check; the harness scores officially)
#   python prepare.py --check-weights weights/<file>.pth     (does a DINOv3 file load? one JSON line)
# =============================================================================

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
import tarfile
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

TASK_ID = "t3"
METRIC = "miou"  # mean intersection-over-union over the classes, from one confusion matrix of the whole val split
DIRECTION = "max"  # higher is better
EVAL_SPLIT = "val"  # VOC's test labels are not public: the 1,449 val images are the benchmark (paper rule 9)
DATA_DIR = "data"
WEIGHTS_DIR = "weights"  # the DINOv3 backbone files, placed there by the harness (see dinov3.py)

FULL_TAR = "VOCtrainval_11-May-2012.tar"  # the official archive (host.robots.ox.ac.uk), 2.0 GB
TAR_ROOT = "VOCdevkit/VOC2012/"  # every member of the archive lies under this folder
# The data mirror's PARTIAL substitutes, used when the tar cannot be fetched: the two official lists, the label PNGs
# of all 2,913 segmentation images, and the JPEGs of a 48-image sample (26 train, 22 val) in VOC's own layout.
LIST_FILES = {"train": "train.txt", "val": "val.txt"}
LABELS_ZIP = "VOC2012_SegmentationClass_trainval2913.zip"
SAMPLE_DIR = "VOC2012-sample"  # SAMPLE_DIR/JPEGImages/<id>.jpg (and SegmentationClass/<id>.png)

CLASSES = (
    "background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train", "tvmonitor",
)  # fmt: skip
N_CLASSES = len(CLASSES)  # 21: background + 20 object classes
IGNORE_INDEX = 255  # VOC's "void" label: object borders and ambiguous pixels, left out of loss and metric
IMAGE_SIZE = 224  # every image and mask is resized to 224 x 224 (paper section 3.2)
N_IMAGES = {"train": 1464, "val": 1449}  # official ImageSets/Segmentation/{train,val}.txt
MEAN = (0.485, 0.456, 0.406)  # ImageNet channel statistics (RGB, on pixel values / 255), as DINOv3 expects:
STD = (0.229, 0.224, 0.225)  # the model sees (x / 255 - MEAN) / STD
SPLITS = ("train", "val")
VOC_ID = re.compile(r"\d{4}_\d{6}")  # e.g. 2007_000032
VALID_LABELS = np.array([*range(N_CLASSES), IGNORE_INDEX])


# ---------------------------------------------------------------------------
# 2. Preparation: raw files -> data/{train,val}_{x,y}.npy + data/meta.json
# Images and masks are read straight from the archive (no extraction). A label PNG is a palette ("P") image
# whose palette INDICES are the class ids (0-20, 255 = void); its colours are only for display. Every image is
# resized to 224 x 224 with Pillow's bilinear filter (antialiased when shrinking; the aspect ratio is not
# kept) and its mask with nearest neighbour, so the masks keep exact class ids. The official metric is computed
# on these 224 x 224 masks. Images keep the order of the official lists (sorted ids).
# ---------------------------------------------------------------------------


def read_ids(text: str, where: str) -> list[str]:
    """The ids of an ImageSets list (one per line), checked."""
    ids = [line.strip() for line in text.splitlines() if line.strip()]
    bad = [i for i in ids if not VOC_ID.fullmatch(i)]
    if not ids or bad:
        found = f"e.g. {bad[0]!r}" if bad else "no ids"
        raise ValueError(f"{where}: not a VOC id list ({found}; expected one id like 2007_000032 per line)")
    if len(set(ids)) != len(ids):
        raise ValueError(f"{where}: lists an id more than once")
    return ids


def decode_pair(jpeg: bytes, png: bytes, name: str) -> tuple[np.ndarray, np.ndarray]:
    """One image and its mask at IMAGE_SIZE: RGB uint8 [224, 224, 3] (bilinear), labels uint8 [224, 224] (nearest)."""
    with Image.open(io.BytesIO(jpeg)) as img:
        img = img.convert("RGB")
        size = img.size
        image = np.asarray(img.resize((IMAGE_SIZE, IMAGE_SIZE), Image.Resampling.BILINEAR))
    with Image.open(io.BytesIO(png)) as label:
        if label.mode not in ("P", "L"):
            raise ValueError(
                f"{name}: the label PNG is a mode {label.mode!r} image, not a palette ('P') image: its pixels are "
                "colours, not class indices. Use VOC's SegmentationClass PNGs as released"
            )
        if label.size != size:
            raise ValueError(
                f"{name}: the image is {size[0]}x{size[1]} but its label is {label.size[0]}x{label.size[1]}"
            )
        mask = np.asarray(label)  # palette indices = class ids
    bad = np.setdiff1d(np.unique(mask), VALID_LABELS)
    if bad.size:
        raise ValueError(
            f"{name}: label values {bad.tolist()} are neither classes 0-{N_CLASSES - 1} nor {IGNORE_INDEX}"
        )
    mask = np.asarray(Image.fromarray(mask).resize((IMAGE_SIZE, IMAGE_SIZE), Image.Resampling.NEAREST))
    return image, mask


class TarSource:
    """The official archive, read in place: random access into the uncompressed tar, member by member."""

    def __init__(self, path: str):
        self.path = path
        self.name = os.path.basename(path)
        try:
            self.tar = tarfile.open(path, "r:")  # uncompressed: members are found by their headers, not unpacked
        except tarfile.TarError as e:
            raise ValueError(f"{path} is not a readable tar ({e}): the download is damaged, fetch it again") from e
        self.members = {m.name: m for m in self.tar.getmembers() if m.isfile()}
        self.lists = {
            s: read_ids(self.read(f"ImageSets/Segmentation/{s}.txt").decode(), f"{path}: {s}.txt") for s in SPLITS
        }

    def read(self, rel: str) -> bytes:
        member = self.members.get(TAR_ROOT + rel)
        if member is None:
            raise ValueError(f"{self.path}: no {TAR_ROOT}{rel}; is this the VOC2012 trainval tar ({FULL_TAR})?")
        return self.tar.extractfile(member).read()

    def has_image(self, voc_id: str) -> bool:
        return True  # the full archive must hold every listed image: read() says which one it lacks

    def pair(self, voc_id: str) -> tuple[bytes, bytes]:
        return self.read(f"JPEGImages/{voc_id}.jpg"), self.read(f"SegmentationClass/{voc_id}.png")

    def close(self) -> None:
        self.tar.close()


class SubstituteSource:
    """The mirror's partial copy: the official lists, every label PNG (zip) and the JPEGs of a small sample."""

    def __init__(self, raw_dir: str):
        self.name = f"{LABELS_ZIP} + {SAMPLE_DIR}/JPEGImages (partial substitute of {FULL_TAR})"
        self.lists = {}
        for split, file in LIST_FILES.items():
            with open(os.path.join(raw_dir, file), encoding="utf-8") as f:
                self.lists[split] = read_ids(f.read(), os.path.join(raw_dir, file))
        self.zip = zipfile.ZipFile(os.path.join(raw_dir, LABELS_ZIP))
        self.labels = {}
        for member in self.zip.namelist():  # VOCdevkit/VOC2012/SegmentationClass/<id>.png
            parts = member.split("/")
            if len(parts) >= 2 and parts[-2] == "SegmentationClass" and parts[-1].endswith(".png"):
                self.labels[parts[-1][:-4]] = member
        missing = [i for s in SPLITS for i in self.lists[s] if i not in self.labels]
        if missing:
            raise ValueError(
                f"{LABELS_ZIP} has no SegmentationClass/<id>.png for {len(missing)} listed ids (e.g. {missing[0]})"
            )
        self.jpeg_dir = os.path.join(raw_dir, SAMPLE_DIR, "JPEGImages")
        if not os.path.isdir(self.jpeg_dir):
            raise FileNotFoundError(f"no folder {self.jpeg_dir}: the sample's JPEGs are missing")

    def has_image(self, voc_id: str) -> bool:
        return os.path.isfile(os.path.join(self.jpeg_dir, f"{voc_id}.jpg"))

    def pair(self, voc_id: str) -> tuple[bytes, bytes]:
        with open(os.path.join(self.jpeg_dir, f"{voc_id}.jpg"), "rb") as f:
            return f.read(), self.zip.read(self.labels[voc_id])

    def close(self) -> None:
        self.zip.close()


def open_source(raw_dir: str) -> TarSource | SubstituteSource:
    """The official tar if present, else the mirror's substitutes; a clear error when neither is complete."""
    tar = os.path.join(raw_dir, FULL_TAR)
    if os.path.isfile(tar):
        return TarSource(tar)
    needed = [*LIST_FILES.values(), LABELS_ZIP, SAMPLE_DIR]
    missing = [n for n in needed if not os.path.exists(os.path.join(raw_dir, n))]
    if missing:
        raise FileNotFoundError(
            f"{raw_dir} holds neither {FULL_TAR} nor the mirror's partial substitutes (missing: {', '.join(missing)}): "
            f"download http://host.robots.ox.ac.uk/pascal/VOC/voc2012/{FULL_TAR} into it (or let the harness fetch it)"
        )
    return SubstituteSource(raw_dir)


def prepare(raw_dir: str, data_dir: str) -> None:
    """Decode both splits at 224 x 224 and save images, masks and meta.json; describe any shortfall in partial_data."""
    start = time.time()
    source = open_source(raw_dir)
    notes = []  # one line per way these data fall short of the official VOC 2012 segmentation splits
    ids, arrays = {}, {}
    try:
        both = set(source.lists["train"]) & set(source.lists["val"])
        if both:
            raise ValueError(f"{len(both)} ids are in both train.txt and val.txt (e.g. {sorted(both)[0]})")
        for split in SPLITS:
            listed = source.lists[split]
            ids[split] = [i for i in listed if source.has_image(i)]
            if not ids[split]:
                raise ValueError(f"none of the {len(listed)} {split} ids has its JPEG in {raw_dir}")
            x = np.empty((len(ids[split]), IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
            y = np.empty((len(ids[split]), IMAGE_SIZE, IMAGE_SIZE), dtype=np.uint8)
            for k, voc_id in enumerate(ids[split]):
                x[k], y[k] = decode_pair(*source.pair(voc_id), name=f"{split} image {voc_id}")
            arrays[split] = (x, y)
            if len(listed) != N_IMAGES[split]:
                notes.append(f"{split}: the list names {len(listed):,} ids, not the official {N_IMAGES[split]:,}")
            if len(ids[split]) < len(listed):
                note = (
                    f"{split}: {len(ids[split]):,} of {len(listed):,} images (only those whose JPEG is in the data "
                    f"mirror's sample; the full split needs {FULL_TAR})"
                )
                if split == EVAL_SPLIT:
                    note += ": the val mIoU covers these images only, not comparable with the paper's scores"
                notes.append(note)
    finally:
        source.close()
    os.makedirs(data_dir, exist_ok=True)
    for split, (x, y) in arrays.items():
        np.save(os.path.join(data_dir, f"{split}_x.npy"), x)
        np.save(os.path.join(data_dir, f"{split}_y.npy"), y)
    pixels = {s: np.bincount(y.ravel(), minlength=256) for s, (_, y) in arrays.items()}
    meta = {
        "classes": list(CLASSES),  # class i = classes[i]; 0 is background
        "ignore_index": IGNORE_INDEX,
        "image_size": IMAGE_SIZE,
        "counts": {s: len(ids[s]) for s in SPLITS},
        "ids": ids,  # row i of <split>_x.npy is image ids[split][i]
        "class_pixels": {s: p[:N_CLASSES].tolist() for s, p in pixels.items()},
        "ignore_pixels": {s: int(p[IGNORE_INDEX]) for s, p in pixels.items()},
        "layout": "x: uint8 [N, 224, 224, 3] RGB (load_split: [N, 3, 224, 224]); y: uint8 [N, 224, 224], 0-20 or 255",
        "resize": "images: Pillow bilinear to 224 x 224 (aspect ratio not kept); masks: nearest neighbour to 224 x 224",
        "mean": list(MEAN),
        "std": list(STD),
        "source": source.name,
        "partial_data": notes,
    }
    with open(os.path.join(data_dir, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)
    print(
        f"prepared {len(ids['train']):,} train and {len(ids['val']):,} val images from {source.name} "
        f"in {time.time() - start:.1f} s into {data_dir}" + "".join(f"\n  partial data: {n}" for n in notes)
    )


# ---------------------------------------------------------------------------
# 3. Loaders (import these in your training script)
# ---------------------------------------------------------------------------


def load_meta(data_dir: str = DATA_DIR) -> dict:
    """Classes, counts, ids, pixel counts per class, normalisation and partial_data notes, as written by prepare()."""
    with open(os.path.join(data_dir, "meta.json"), encoding="utf-8") as f:
        return json.load(f)


def load_split(split: str, data_dir: str = DATA_DIR) -> tuple[torch.Tensor, torch.Tensor]:
    """All images and masks of one split: x uint8 [N, 3, 224, 224] (RGB, 0..255), y uint8 [N, 224, 224].

    y holds class ids 0-20 and IGNORE_INDEX (255) for void pixels: use y.long() with
    F.cross_entropy(..., ignore_index=IGNORE_INDEX). Pass the images through normalize() before the model.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use one of {list(SPLITS)}")
    x = torch.from_numpy(np.load(os.path.join(data_dir, f"{split}_x.npy"))).permute(0, 3, 1, 2).contiguous()
    y = torch.from_numpy(np.load(os.path.join(data_dir, f"{split}_y.npy")))
    return x, y


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
# The harness scores a checkpoint in two processes: a sandboxed predictor runs the model through forward() on
# the inputs of eval_batches(), and a scorer that never runs your code compares its class maps with the masks in
# score(). evaluate() does all three in one process: call it for your validation score.
# mIoU is computed the standard way (as mmsegmentation and the VOC devkit): ONE 21 x 21 confusion matrix is
# accumulated over every labelled pixel of the whole split (pixels labelled 255 are left out, whatever the
# prediction), then IoU_c = TP_c / (TP_c + FP_c + FN_c) for each class c, and mIoU = the mean of IoU_c over the
# classes whose union TP + FP + FN is > 0. A class absent from the ground truth but predicted somewhere counts
# with IoU 0; a class neither present nor predicted is left out. Not a mean of per-image IoUs.
# ---------------------------------------------------------------------------


def confusion_matrix(pred: torch.Tensor, target: torch.Tensor, num_classes: int = N_CLASSES) -> torch.Tensor:
    """cm[t, p] = number of pixels of true class t predicted as p, over the pixels whose target is not 255. int64."""
    valid = target != IGNORE_INDEX
    t = target[valid].long()
    p = pred[valid].long()
    if t.numel() and (int(t.max()) >= num_classes or int(p.max()) >= num_classes or int(p.min()) < 0):
        raise ValueError(f"targets and predictions must be class ids 0-{num_classes - 1} (or {IGNORE_INDEX} targets)")
    return torch.bincount(t * num_classes + p, minlength=num_classes**2).view(num_classes, num_classes)


def iou_from_confusion(cm: torch.Tensor) -> tuple[float, list[float | None]]:
    """(mIoU, IoU per class) from a confusion matrix; a class with an empty union has IoU None and is not averaged."""
    cm = cm.to(torch.float64).cpu()
    inter = cm.diag()
    union = cm.sum(dim=0) + cm.sum(dim=1) - inter
    ious = [float(i / u) if u > 0 else None for i, u in zip(inter.tolist(), union.tolist(), strict=True)]
    present = [v for v in ious if v is not None]
    if not present:
        raise ValueError("the split has no labelled pixel: mIoU is undefined")
    return sum(present) / len(present), ious


# The images are independent samples and an input (the pixels) reveals no mask, so any batch size gives the
# same predictions. 32 images are 4.8 MB of uint8 pixels in and 1.6 MB of uint8 class maps out per batch; the
# model's float32 logits alone are 135 MB at that size (21 x 224 x 224 per image), and a fine-tuned backbone's
# activations fit a GPU with room to spare.
FEED_BATCH_SIZE = 32


def eval_batches(split: str = EVAL_SPLIT, data_dir: str = DATA_DIR, batch_size: int = 32) -> list:
    """[(inputs, masks)] in the stored order: inputs {"x": uint8 [b, 3, 224, 224]} (as load_split gives them),
    masks uint8 [b, 224, 224] with class ids 0-20 and IGNORE_INDEX (numpy)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use one of {list(SPLITS)}")
    if not os.path.isfile(os.path.join(data_dir, f"{split}_x.npy")):
        raise FileNotFoundError(
            f"no prepared data in {data_dir!r}: run `python prepare.py --prepare` first or pass --data-dir"
        )
    x, y = (t.numpy() for t in load_split(split, data_dir))
    return [({"x": x[i : i + batch_size]}, y[i : i + batch_size]) for i in range(0, len(x), batch_size)]


def forward(model: nn.Module, inputs: dict) -> torch.Tensor:
    """The forward contract: the argmax over the classes of model(normalize(x)).

    x uint8 [batch, 3, 224, 224] -> model logits [batch, N_CLASSES, 224, 224] -> class map uint8 [batch, 224, 224]
    (the predicted class of every pixel; ties go to the lowest class). Plain float32: no autocast (and no TF32:
    the harness turns it off, evaluate() too), so the score depends neither on reduced-precision rounding nor on
    which ops support it.
    """
    x = inputs["x"]
    with torch.autocast(device_type=x.device.type, enabled=False):
        xb = normalize(x)
        logits = model(xb)
    want = (len(xb), N_CLASSES, *xb.shape[2:])
    if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != want:
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(
            f"model(x) returned {shape} for x of shape {tuple(xb.shape)}; expected logits of shape "
            f"{want} = [batch, N_CLASSES={N_CLASSES}, H, W] (upsample the logits to the input size)"
        )
    if not torch.isfinite(logits).all():
        raise ValueError("the model produced non-finite logits")
    return logits.argmax(dim=1).to(torch.uint8)


def score(outputs: list, targets: list) -> dict:
    """mIoU from ONE confusion matrix over every labelled pixel of the split (void pixels left out):
    {"miou": float, "n": images, "iou": [IoU or None per class]}. outputs: class maps [b, 224, 224], integers."""
    cm = torch.zeros(N_CLASSES, N_CLASSES, dtype=torch.int64)
    for pred, y in zip(outputs, targets, strict=True):
        if pred.shape != y.shape:
            raise ValueError(
                f"forward returned {tuple(pred.shape)} for {len(y)} images; expected class maps of shape "
                f"{tuple(y.shape)} = [batch, H, W]"
            )
        if pred.dtype.kind not in "iu":
            raise ValueError(f"forward returned {pred.dtype} values; expected class ids (integers 0-{N_CLASSES - 1})")
        cm += confusion_matrix(torch.from_numpy(pred.astype(np.int64)), torch.from_numpy(y))
    miou, ious = iou_from_confusion(cm)
    return {METRIC: miou, "n": sum(len(y) for y in targets), "iou": ious}


@torch.no_grad()
def evaluate(
    model: nn.Module, split: str = EVAL_SPLIT, data_dir: str = DATA_DIR, device: str = "cpu", batch_size: int = 32
) -> dict:
    """score(forward(model, inputs)) over every image of `split` in this process:
    {"miou": float, "n": images, "iou": [IoU or None per class]}.

    Call it with split="val" for the validation score your script reports: that is exactly the official metric
    (this task is scored on the validation images). Runs under model.eval() in plain float32 (no autocast, no
    TF32), in a fixed order, and restores the model's training mode.
    """
    was_training = model.training
    model.eval()
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    outputs, targets = [], []
    try:
        for inputs, y in eval_batches(split, data_dir, batch_size):  # fixed order, fixed batches: deterministic
            pred = forward(model, {k: torch.from_numpy(v).to(device) for k, v in inputs.items()})
            outputs.append(pred.cpu().numpy())
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
    mode.add_argument("--check-weights", metavar="PATH", help="check that a DINOv3 weights file loads (dinov3.py)")
    parser.add_argument("--raw-dir", help=f"folder holding {FULL_TAR} or its partial substitutes (with --prepare)")
    parser.add_argument("--data-dir", default=DATA_DIR, help="prepared data folder (default: data)")
    parser.add_argument("--script", help="training script with build_model (default: the checkpoint's)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    if args.prepare:
        if not args.raw_dir:
            parser.error("--prepare needs --raw-dir")
        prepare(args.raw_dir, args.data_dir)
        return
    if args.check_weights:
        try:
            from dinov3 import check_weights  # the locked backbone definitions beside this file

            print(json.dumps(check_weights(args.check_weights)))
        except Exception as e:
            print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
            sys.exit(1)
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
