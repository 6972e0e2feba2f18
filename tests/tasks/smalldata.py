"""Small GENERATED data for every task folder, and the baseline trained on it once per test session.

Every task folder under tasks/ has an entry in FACTORIES (keyed by folder name): a generator that writes raw
files with the exact schema of the real ones (NOT the real data: no score on them means anything), a tiny
baseline config that trains a few steps on a CPU, and the split the baseline reports its validation score on.
The conformance suite (test_conformance.py) runs over every task folder and fails for one without a factory.

SmallTasks (the session fixture `small` in conftest.py) prepares each task's workspace and trains its baseline
at most once per session, for the conformance suite and the per-task test files alike.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import gzip
import importlib
import io
import random
import string
import sys
import tarfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.tasks.taskfolder import TASKS_DIR, copy_task, run_prepare, task_modules


@dataclass(frozen=True)
class SmallData:
    """How to run one task on small generated data."""

    write_raw: Callable[[Path], dict]  # writes the raw files into an empty folder; returns what tests check
    tiny: dict  # baseline CONFIG overrides: a few steps on a CPU, at least one scored checkpoint
    val_split: str  # the split the baseline's self-reported val_score is measured on (prepare.py's name for it)
    setup: Callable[[Path], None] | None = None  # files a prepared workspace needs before training (T3's weights)


def jpeg(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


# ---------------------------------------------------------------------------
# T1 (TinyShakespeare): input.txt
# ---------------------------------------------------------------------------

REAL_VOCAB = "\n !$&',-.3:;?" + string.ascii_uppercase + string.ascii_lowercase  # the 65 characters of input.txt
N_FAKE = 6000  # characters: 5400 train, 600 val
T1_TINY = {
    "block_size": 16,
    "n_layer": 1,
    "n_head": 2,
    "d_model": 32,
    "batch_size": 8,
    "epochs": 2,
    "warmup_steps": 5,
    "eval_every": 10**9,
}  # validation + checkpoint at the end of each epoch only


def fake_shakespeare(n_chars: int = N_FAKE, seed: int = 0) -> str:
    """Play-like text that uses every character of the real vocabulary (first line) and nothing else."""
    rng = random.Random(seed)
    lines = [REAL_VOCAB.replace("\n", "")]
    while sum(len(line) + 1 for line in lines) < n_chars:
        speaker = rng.choice(["FIRST CITIZEN", "MENENIUS", "ROMEO", "JULIET", "KING RICHARD III"])
        words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(1, 8))) for _ in range(rng.randint(3, 12))]
        lines += [f"{speaker}:", " ".join(words) + rng.choice([".", ",", "!", "?", ";", ":", "'", " - &3$"]), ""]
    return ("\n".join(lines) + "\n")[:n_chars]


def _t1_raw(raw: Path) -> dict:
    text = fake_shakespeare()
    (raw / "input.txt").write_text(text, encoding="utf-8")
    return {"text": text}


# ---------------------------------------------------------------------------
# T2 (TinyImageNet): the zip
# ---------------------------------------------------------------------------

SUBSET_ZIP = "tiny-imagenet-200-subset.zip"
FULL_ZIP = "tiny-imagenet-200.zip"
# A tiny network and schedule: 400 generated training images / 16 = 25 steps an epoch, stopped after 30 steps.
T2_TINY = {
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


def _t2_raw(raw: Path) -> dict:
    return {"index": write_tiny_imagenet_like(raw / SUBSET_ZIP)}


# ---------------------------------------------------------------------------
# T3 (Pascal VOC 2012): the tar or the mirror's substitutes, and GENERATED DINOv3 weight files
# ---------------------------------------------------------------------------

FULL_TAR = "VOCtrainval_11-May-2012.tar"
LABELS_ZIP = "VOC2012_SegmentationClass_trainval2913.zip"
CONVNEXT_FILE = "dinov3_convnext_tiny_pretrain_lvd1689m-21b726bb.pth"
VIT_FILE = "dinov3_vits16_pretrain_lvd1689m-08c60483.pth"
TRAIN_IDS = ["2007_000032", "2007_000039", "2007_000063", "2007_000068", "2007_000121", "2007_000170"]
VAL_IDS = ["2007_000033", "2007_000042", "2007_000061", "2007_000123"]
# One step of batch 2 on the CPU (ConvNeXt-T at 224 costs seconds here), then the validation on 4 images.
T3_TINY = {"batch_size": 2, "epochs": 1, "max_steps": 1, "log_every": 1, "eval_batch_size": 4}


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
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(folder))
        mp.setattr(sys, "dont_write_bytecode", True)
        mp.delitem(sys.modules, "dinov3", raising=False)
        dinov3 = importlib.import_module("dinov3")
    sys.modules.pop("dinov3", None)
    torch.manual_seed(0)
    return {"convnext": dinov3.convnext_tiny().eval(), "vit": dinov3.vit_small().eval()}


def _t3_raw(raw: Path) -> dict:
    pairs = make_pairs(TRAIN_IDS + VAL_IDS)
    write_voc_tar(raw / FULL_TAR, TRAIN_IDS, VAL_IDS, pairs)
    return {"pairs": pairs}


def _t3_weights(ws: Path) -> None:
    """GENERATED weight files: random-init state dicts under the official names, in the workspace's weights/."""
    backbones = random_backbones(ws)
    (ws / "weights").mkdir()
    torch.save(backbones["convnext"].state_dict(), ws / "weights" / CONVNEXT_FILE)
    torch.save(backbones["vit"].state_dict(), ws / "weights" / VIT_FILE)


# ---------------------------------------------------------------------------
# T4 (ogbg-molhiv): mol.csv.gz and the split files
# ---------------------------------------------------------------------------

SPLITS = ("train", "valid", "test")
T4_TINY = {"epochs": 2, "batch_size": 16, "log_every": 2}  # 3 steps an epoch on the 48 generated training graphs

# 60 ordinary molecules (a few share a scaffold; acyclic ones share the empty scaffold), with stereo bonds and
# centres, a salt without bonds, and one molecule of the real file that fails RDKit's valence checks (index 59).
SMILES = [
    "CCO", "c1ccccc1O", "CC(=O)O", "CCN(CC)CC", "c1ccncc1", "CC(C)O", "OC(=O)c1ccccc1", "Nc1ccccc1",
    "CC(=O)Nc1ccc(O)cc1", "COc1ccccc1", "C1CCCCC1", "C1CCOC1", "c1ccc2ccccc2c1", "Clc1ccccc1", "CC(C)(C)O",
    "C=CC=O", "CC#N", "O=C1CCCCC1", "c1ccsc1", "c1cc[nH]c1", "CCOC(=O)C", "CN1CCCC1", "OCC(O)CO", "C[C@@H](N)C(=O)O",
    "NC(=O)c1ccccc1", "Cc1ccccc1", "Oc1ccc(Cl)cc1", "Cc1ccncc1", "Oc1ccc2ccccc2c1", "CC1CCCCC1", "OC1CCOC1",
    "Cl[C@H](/C=C/C)Br", "C/C=C\\C", "Brc1ccccc1", "c1ccc(-c2ccccc2)cc1", "Cc1ccc(-c2ccccc2)cc1", "O=C(O)C1CCCCC1",
    "c1ccc2[nH]ccc2c1", "Cc1ccc2[nH]ccc2c1", "C1CCNCC1", "CC1CCNCC1", "O=c1cc[nH]c(=O)[nH]1", "Cc1c[nH]c(=O)[nH]c1=O",
    "CCCCCC", "CCCCO", "c1ccoc1", "Cc1ccco1", "N#Cc1ccccc1", "O=[N+]([O-])c1ccccc1", "CS(=O)(=O)c1ccccc1",
    "C1CC1", "CC1CC1", "c1cnc2ccccc2c1", "Cc1cnc2ccccc2c1", "FC(F)(F)c1ccccc1", "[Na+].[Cl-]", "OCCN1CCOCC1",
    "C1COCCN1", "Nc1ncnc2[nH]cnc12", "Cc1ccc([B-2]2(c3ccc(C)cc3)=NCCO2)cc1",
]  # fmt: skip
LABELS = [1 if i % 4 == 0 else 0 for i in range(len(SMILES))]  # 15 active, in every split
SPLIT = {"train": list(range(48)), "valid": list(range(48, 54)), "test": list(range(54, 60))}  # generated


def gz(text: str) -> bytes:
    return gzip.compress(text.encode("utf-8"), mtime=0)


def mol_csv(smiles=SMILES, labels=LABELS) -> bytes:
    """GENERATED mapping/mol.csv.gz: OGB's header and layout (empty mol_id), made-up labels."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["HIV_active", "smiles", "mol_id"])
    w.writerows([y, s, ""] for y, s in zip(labels, smiles, strict=True))
    return gz(out.getvalue())


def split_csv(indices) -> bytes:
    """GENERATED split/scaffold/<split>.csv.gz: one graph index per line, no header (as OGB's)."""
    return gz("".join(f"{i}\n" for i in indices))


def write_molhiv_raw(raw: Path, splits: bool = True) -> Path:
    """GENERATED mol.csv.gz (+ the three split files) in OGB's schema: 60 molecules, made-up labels."""
    raw.mkdir(parents=True, exist_ok=True)
    (raw / "mol.csv.gz").write_bytes(mol_csv())
    if splits:
        for s in SPLITS:
            (raw / f"{s}.csv.gz").write_bytes(split_csv(SPLIT[s]))
    return raw


def _t4_raw(raw: Path) -> dict:
    write_molhiv_raw(raw)
    return {}


# ---------------------------------------------------------------------------
# T5 (Forest Cover Type): covtype.data.gz
# ---------------------------------------------------------------------------

ROWS = 3000  # generated rows: 2,400 train, 300 val, 300 test
CLASS_P = [0.36, 0.49, 0.06, 0.02, 0.02, 0.03, 0.02]  # roughly the skew of the real classes
T5_TINY = {"epochs": 2, "batch_size": 256, "log_every": 4}  # 9 steps an epoch on the 2,400 generated training rows


def make_covtype_like(rows: int = ROWS, seed: int = 0) -> np.ndarray:
    """GENERATED rows with the schema of covtype.data (NOT the real data): int64 [rows, 55], class 1..7 last.

    The class is learnable: the elevation rises with the class and each class prefers one wilderness area.
    """
    rng = np.random.default_rng(seed)
    y = rng.choice(7, size=rows, p=CLASS_P)
    t = np.zeros((rows, 55), dtype=np.int64)
    t[:, 0] = 2000 + 250 * y + rng.integers(-150, 150, rows)  # Elevation
    t[:, 1] = rng.integers(0, 360, rows)  # Aspect
    t[:, 2] = rng.integers(0, 60, rows)  # Slope
    t[:, 3] = rng.integers(0, 1400, rows)
    t[:, 4] = rng.integers(-150, 600, rows)  # the vertical distance can be negative
    t[:, 5] = rng.integers(0, 7000, rows)
    t[:, 6:9] = rng.integers(0, 256, (rows, 3))  # hillshades
    t[:, 9] = rng.integers(0, 7000, rows)
    t[np.arange(rows), 10 + y % 4] = 1  # one wilderness area
    t[np.arange(rows), 14 + rng.integers(0, 40, rows)] = 1  # one soil type
    t[:, 54] = y + 1
    return t


def write_covtype(path: Path, table: np.ndarray) -> Path:
    np.savetxt(path, table, fmt="%d", delimiter=",")  # a .gz file name: numpy writes gzip
    return path


def _t5_raw(raw: Path) -> dict:
    table = make_covtype_like()
    write_covtype(raw / "covtype.data.gz", table)
    return {"table": table}


# ---------------------------------------------------------------------------
# T6 (ETTh1): ETTh1.csv
# ---------------------------------------------------------------------------

ETT_COLUMNS = ["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"]
ETT_ROWS = 17420
T6_TINY = {"epochs": 2, "batch_size": 1024, "log_every": 2}  # 8 steps an epoch on the 8,209 training windows


def write_fake_etth1(path: Path, seed: int = 0) -> np.ndarray:
    """A generated file with the schema of ETTh1.csv (NOT the real data); returns its values [ETT_ROWS, 7]."""
    rng = np.random.default_rng(seed)
    t = np.arange(ETT_ROWS)[:, None]
    k = np.arange(len(ETT_COLUMNS))[None, :]
    values = 5 + k + 2 * np.sin(2 * np.pi * t / 24 + k) + 0.01 * t / (1 + k) + 0.3 * rng.standard_normal(t.shape)
    values = values.round(6)
    start = datetime(2016, 7, 1)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["date", *ETT_COLUMNS])
        for i, row in enumerate(values):
            w.writerow([(start + timedelta(hours=i)).strftime("%Y-%m-%d %H:%M:%S"), *(repr(float(v)) for v in row)])
    return values


def _t6_raw(raw: Path) -> dict:
    return {"values": write_fake_etth1(raw / "ETTh1.csv")}


# ---------------------------------------------------------------------------
# T7 (AG News): train.csv and test.csv
# ---------------------------------------------------------------------------

WORDS = [  # generated texts: a class shows in these words
    ["minister", "election", "embassy", "troops", "parliament"],
    ["coach", "season", "goal", "playoffs", "striker"],
    ["shares", "profit", "market", "bank", "earnings"],
    ["software", "internet", "chip", "space", "browser"],
]
# The first line of the generated test.csv, as it stands in the file: "" is a quote; the backslashes are kept.
ESCAPED_LINE = '"2","Coach says ""we won""","Line one\\Line two \\\\ tickets \\$5, caf\u00e9 \u20ac3"\n'
ESCAPED_TEXT = 'Coach says "we won" Line one\\Line two \\\\ tickets \\$5, caf\u00e9 \u20ac3'
T7_TINY = {"batch_size": 4, "max_steps": 2, "log_every": 1, "eval_batch_size": 64}  # the full-size network


def agnews_rows(n_per_class: int, seed: int) -> list[list[str]]:
    """GENERATED AG News-like rows (NOT the real data): [class 1..4, title, description], classes interleaved."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_per_class):
        for label, words in enumerate(WORDS):
            a, b, c = rng.choice(words, size=3)
            title = f"{a.title()} news: {b} update {i}"
            desc = f"AP - Reports on the {a} and the {c} today.\\More on {b} later ({rng.integers(1000)})."
            rows.append([str(label + 1), title, desc])
    return rows


def write_agnews_csv(path: Path, rows: list[list[str]]) -> Path:
    """Write rows as AG News does: every field quoted, inner quotes doubled, one line per row."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    return path


def write_agnews_raw(raw: Path, train_per_class: int = 60, test_per_class: int = 10) -> dict:
    """A generated train.csv (240 rows) and test.csv (40 rows, the first one ESCAPED_LINE)."""
    raw.mkdir(parents=True, exist_ok=True)
    write_agnews_csv(raw / "train.csv", agnews_rows(train_per_class, seed=0))
    test = agnews_rows(test_per_class, seed=1)
    del test[1]  # a class-2 row: ESCAPED_LINE (class 2) comes first instead
    write_agnews_csv(raw / "test.csv", test)
    (raw / "test.csv").write_text(ESCAPED_LINE + (raw / "test.csv").read_text(encoding="utf-8"), encoding="utf-8")
    return {}


# ---------------------------------------------------------------------------
# The registry: one entry per task folder
# ---------------------------------------------------------------------------

FACTORIES: dict[str, SmallData] = {
    "t1_language_modeling": SmallData(_t1_raw, T1_TINY, val_split="val"),
    "t2_image_classification": SmallData(_t2_raw, T2_TINY, val_split="val"),
    "t3_semantic_segmentation": SmallData(_t3_raw, T3_TINY, val_split="val", setup=_t3_weights),
    "t4_graph_learning": SmallData(_t4_raw, T4_TINY, val_split="valid"),
    "t5_tabular_prediction": SmallData(_t5_raw, T5_TINY, val_split="val"),
    "t6_time_series_forecasting": SmallData(_t6_raw, T6_TINY, val_split="val"),
    "t7_text_classification": SmallData(write_agnews_raw, T7_TINY, val_split="val"),
}


def factory(task_name: str) -> SmallData:
    """The small-data factory of a task folder; a test FAILS (never skips) for a folder without one."""
    if task_name not in FACTORIES:
        pytest.fail(
            f"task folder {task_name!r} has no small-data factory: add one to FACTORIES in tests/tasks/smalldata.py "
            "(a generator of its raw files in the real schema, a tiny baseline config, its validation split)",
            pytrace=False,
        )
    return FACTORIES[task_name]


class SmallTasks:
    """Each task's generated data, prepared workspace, trained baseline and official evaluation, made at most once
    per session (a failure is remembered too, so that it is not retried by every test that needs it)."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory):
        self._tmp = tmp_path_factory
        self._done: dict[tuple[str, str], object] = {}

    def _once(self, key: tuple[str, str], make: Callable[[], object]):
        if key not in self._done:
            try:
                self._done[key] = make()
            except (Exception, pytest.fail.Exception) as e:  # pytest.fail() raises a BaseException
                self._done[key] = e
                raise
        value = self._done[key]
        if isinstance(value, BaseException):
            raise value
        return value

    def prepared(self, name: str) -> dict:
        """A copy of the task folder with data/ prepared by `prepare.py --prepare` from generated raw files:
        {"ws", "raw", "stdout" (of --prepare), **what the generator returned}."""

        def make() -> dict:
            spec = factory(name)
            root = self._tmp.mktemp(name)
            ws = copy_task(TASKS_DIR / name, root / "ws")
            raw = root / "raw"
            raw.mkdir()
            facts = spec.write_raw(raw)
            proc = run_prepare(ws, "--prepare", "--raw-dir", str(raw), "--data-dir", "data")
            assert proc.returncode == 0, f"{name}: prepare.py --prepare failed:\n{proc.stdout}\n{proc.stderr}"
            if spec.setup is not None:
                spec.setup(ws)
            return {"ws": ws, "raw": raw, "stdout": proc.stdout, **facts}

        return self._once((name, "prepared"), make)

    def trained(self, name: str) -> dict:
        """The baseline's train.main() with the tiny config, in-process on the CPU (CUDA hidden, so that its scores
        are the CPU evaluator's): {"log", "checkpoints" (in the order written), "config", "started", "finished"}."""

        def make() -> dict:
            spec = factory(name)
            ws = self.prepared(name)["ws"]
            out = io.StringIO()
            with (
                task_modules(ws) as (_, train),
                contextlib.redirect_stdout(out),
                pytest.MonkeyPatch.context() as mp,
            ):
                mp.setattr(torch.cuda, "is_available", lambda: False)
                config = dict(train.CONFIG, **spec.tiny)
                given = copy.deepcopy(config)
                started = time.time()
                train.main(config)
                finished = time.time()
            checkpoints = sorted((ws / "checkpoints").glob("*.pt"), key=lambda p: (p.stat().st_mtime_ns, p.name))
            assert checkpoints, f"{name}: the baseline saved no checkpoint with {spec.tiny}; log:\n{out.getvalue()}"
            return {
                "log": out.getvalue(),
                "checkpoints": checkpoints,
                "config": given,
                "started": started,
                "finished": finished,
            }

        return self._once((name, "trained"), make)

    def official(self, name: str) -> dict:
        """`python prepare.py --eval <last checkpoint> --device cpu` in the workspace, as an agent runs it:
        {"checkpoint", "proc", "wall" (seconds the subprocess took, measured here)}."""

        def make() -> dict:
            ws = self.prepared(name)["ws"]
            ckpt = self.trained(name)["checkpoints"][-1]
            start = time.perf_counter()
            proc = run_prepare(ws, "--eval", str(ckpt.relative_to(ws)), "--device", "cpu")
            return {"checkpoint": ckpt, "proc": proc, "wall": time.perf_counter() - start}

        return self._once((name, "official"), make)
