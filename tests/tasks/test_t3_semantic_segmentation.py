"""Task T3 (Pascal VOC 2012): preparation (tar and substitutes), loaders, mIoU, augmentation, the DINOv3 backbones,
the baseline, --eval and --check-weights.

Runs on GENERATED data with the exact layout of the real files: a VOC-like tar (VOCdevkit/VOC2012/ImageSets/
Segmentation/{train,val}.txt, JPEGImages/<id>.jpg of random sizes, SegmentationClass/<id>.png palette PNGs with
the VOC palette and 255 borders) of 6 train and 4 val ids, and the mirror's substitutes (lists, label zip, sample
folder) built the same way. The images are noise with a coloured rectangle: NOT the real data, and no score on them
means anything. The weight files are GENERATED too: state dicts of randomly initialised backbones saved under the
official file names, not DINOv3 (both made in tests/tasks/smalldata.py). The test marked `mirror` prepares the real
substitutes from BENCH_DATA_MIRROR. What every task promises (the checkpoint payload, the --eval JSON, strict loading,
errors as JSON, val_score = the evaluator's score) is checked in test_conformance.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import io
import json
import math
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
from PIL import Image
from sklearn.metrics import confusion_matrix as sk_confusion_matrix

from bench.pipeline.evaluate import stage
from bench.tasks import load_task
from tests.tasks.smalldata import (
    CONVNEXT_FILE,
    FULL_TAR,
    LABELS_ZIP,
    TRAIN_IDS,
    VAL_IDS,
    VIT_FILE,
    jpeg,
    make_pairs,
    png,
    write_substitutes,
    write_voc_tar,
)
from tests.tasks.smalldata import T3_TINY as TINY
from tests.tasks.taskfolder import PROBES, copy_task, expected_probes, last_json, run_prepare, run_scorer, task_modules

ROOT = Path(__file__).resolve().parents[2]
TASK_DIR = ROOT / "tasks" / "t3_semantic_segmentation"
NOTES = Path(__file__).parent / "fixtures" / "dinov3_layout.md"  # the official layout (Appendix A/B) and its sources
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # the statistics DINOv3 expects


# ---------------------------------------------------------------------------
# Helpers and fixtures
# ---------------------------------------------------------------------------


def expected_pair(pair: tuple[bytes, bytes]) -> tuple[np.ndarray, np.ndarray]:
    """What preparation must store: bilinear 224 x 224 RGB image, nearest-neighbour 224 x 224 palette indices."""
    image = np.array(Image.open(io.BytesIO(pair[0])).convert("RGB").resize((224, 224), Image.Resampling.BILINEAR))
    mask = np.array(Image.open(io.BytesIO(pair[1])).resize((224, 224), Image.Resampling.NEAREST))
    return image, mask


@pytest.fixture(scope="module")
def dinov3():
    """The task's dinov3.py as a module."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(TASK_DIR))
        mp.setattr(sys, "dont_write_bytecode", True)
        mp.delitem(sys.modules, "dinov3", raising=False)
        module = importlib.import_module("dinov3")
    sys.modules.pop("dinov3", None)
    return module


@pytest.fixture(scope="module")
def backbones(dinov3) -> dict:
    """Randomly initialised backbones (seeded), in eval mode: the weights of fake's weight files (seed 0)."""
    torch.manual_seed(0)
    return {"convnext": dinov3.convnext_tiny().eval(), "vit": dinov3.vit_small().eval()}


# ---------------------------------------------------------------------------
# task.toml and preparation
# ---------------------------------------------------------------------------


def test_task_toml_loads():
    task = load_task(TASK_DIR)
    assert (task.id, task.metric, task.direction, task.eval_split) == ("t3", "miou", "max", "val")
    assert (task.budget_minutes, task.baseline_score, task.reference_score) == (80, 0.660, None)
    assert task.locked_files == ("prepare.py", "dinov3.py", "task_helpers.py")
    assert [(w.file, w.sha256_prefix) for w in task.weights] == [(CONVNEXT_FILE, "21b726bb"), (VIT_FILE, "08c60483")]
    full, labels, train_list, val_list, sample = task.data
    assert (full.file, full.url, full.mirror, full.md5, full.size) == (
        FULL_TAR,
        "http://host.robots.ox.ac.uk/pascal/VOC/voc2012/VOCtrainval_11-May-2012.tar",
        "voc2012/VOCtrainval_11-May-2012.tar",
        "6cd6e144f989b92b3379bac3b3de84fd",
        1999639040,
    )
    assert all(s.substitute_for == FULL_TAR and s.url == "" for s in (labels, train_list, val_list, sample))
    assert (labels.file, labels.mirror, labels.size, labels.md5) == (
        LABELS_ZIP,
        "voc2012/VOC2012_SegmentationClass_trainval2913.zip",
        9728053,
        "2ed09a4cde874d2687ec2496d1fbeb4b",
    )
    assert labels.sha256 == "f3942ef5d0d0442c2c1f5323d219547e835e49a2510aa4aa4a47df4c72a6ef1d"
    assert (train_list.file, train_list.size, val_list.file, val_list.size) == ("train.txt", 17568, "val.txt", 17388)
    assert train_list.sha256 == "aa623bd2c8ce4443a8aaae51c524c0eb165e8e44caf6aa9e3ad33d7b75a3ef20"
    assert val_list.mirror == "voc2012/VOCdevkit/VOC2012/ImageSets/Segmentation/val.txt"
    assert val_list.sha256 == "cdc1326d12f69ce5153aa5da04a4d8783e146868d42d19f82f44e74b97ac907d"
    assert (sample.file, sample.mirror, sample.manifest) == (
        "VOC2012-sample",
        "voc2012/VOCdevkit/VOC2012",
        "voc2012/MANIFEST.sha256",
    )
    assert sample.manifest_sha256 == "cff03c6d134a3f9f0778a02387511f64d5fa412a8660bdfb76e4f8dcbf5637ed"


def test_prepare_from_tar_resizes_in_list_order(fake, tmp_path):
    data, pairs = fake["ws"] / "data", fake["pairs"]
    meta = json.loads((data / "meta.json").read_text(encoding="utf-8"))
    assert meta["classes"][0] == "background" and meta["classes"][20] == "tvmonitor" and len(meta["classes"]) == 21
    assert (meta["ignore_index"], meta["image_size"], meta["source"]) == (255, 224, FULL_TAR)
    assert meta["counts"] == {"train": 6, "val": 4} and meta["ids"] == {"train": TRAIN_IDS, "val": VAL_IDS}
    assert meta["partial_data"] == [  # a full tar whose lists are short (generated): said, not hidden
        "train: the list names 6 ids, not the official 1,464",
        "val: the list names 4 ids, not the official 1,449",
    ]
    assert "partial data: train: the list names 6 ids" in fake["stdout"]
    for split, ids in (("train", TRAIN_IDS), ("val", VAL_IDS)):
        x, y = np.load(data / f"{split}_x.npy"), np.load(data / f"{split}_y.npy")
        assert x.dtype == y.dtype == np.uint8 and x.shape == (len(ids), 224, 224, 3) and y.shape == (len(ids), 224, 224)
        for k, voc_id in enumerate(ids):
            image, mask = expected_pair(pairs[voc_id])
            np.testing.assert_array_equal(x[k], image)
            np.testing.assert_array_equal(y[k], mask)
            assert set(np.unique(y[k]).tolist()) == {0, 255, 1 + (TRAIN_IDS + VAL_IDS).index(voc_id) % 20}
        counts = np.bincount(y.ravel(), minlength=256)
        assert meta["class_pixels"][split] == counts[:21].tolist() and meta["ignore_pixels"][split] == counts[255]
    # Deterministic: preparing again gives the same bytes.
    with task_modules(fake["ws"]) as (prepare, _), contextlib.redirect_stdout(io.StringIO()):
        prepare.prepare(str(fake["raw"]), str(tmp_path / "again"))
    for name in ("train_x.npy", "train_y.npy", "val_x.npy", "val_y.npy", "meta.json"):
        assert (tmp_path / "again" / name).read_bytes() == (data / name).read_bytes(), name


def test_prepare_from_substitutes_keeps_the_ids_with_a_jpeg(tmp_path):
    """Without the tar: the lists, the label zip and the sample's JPEGs; only ids with a JPEG are kept."""
    train, val = TRAIN_IDS[:5], VAL_IDS
    pairs = make_pairs(train + val, seed=1)
    with_jpeg = {train[0], train[2], train[4], val[1], val[3]}
    write_substitutes(tmp_path / "raw", train, val, pairs, with_jpeg)
    with task_modules(TASK_DIR) as (prepare, _), contextlib.redirect_stdout(io.StringIO()) as out:
        prepare.prepare(str(tmp_path / "raw"), str(tmp_path / "data"))
        meta = prepare.load_meta(str(tmp_path / "data"))
        x, y = prepare.load_split("val", str(tmp_path / "data"))
        assert meta["ids"] == {"train": [train[0], train[2], train[4]], "val": [val[1], val[3]]}
        assert meta["source"].startswith(LABELS_ZIP) and "partial substitute" in meta["source"]
        assert meta["partial_data"] == [
            "train: the list names 5 ids, not the official 1,464",
            "train: 3 of 5 images (only those whose JPEG is in the data mirror's sample; the full split needs "
            f"{FULL_TAR})",
            "val: the list names 4 ids, not the official 1,449",
            "val: 2 of 4 images (only those whose JPEG is in the data mirror's sample; the full split needs "
            f"{FULL_TAR}): the val mIoU covers these images only, not comparable with the paper's scores",
        ]
        assert "partial data: val: 2 of 4 images" in out.getvalue()
        for k, voc_id in enumerate(meta["ids"]["val"]):
            image, mask = expected_pair(pairs[voc_id])
            assert torch.equal(x[k], torch.from_numpy(image).permute(2, 0, 1)) and torch.equal(
                y[k], torch.from_numpy(mask)
            )
        # With the tar present as well, the tar is used.
        write_voc_tar(tmp_path / "raw" / FULL_TAR, train, val, pairs)
        prepare.prepare(str(tmp_path / "raw"), str(tmp_path / "data2"))
        assert prepare.load_meta(str(tmp_path / "data2"))["counts"] == {"train": 5, "val": 4}


def test_prepare_rejects_bad_raw_data(tmp_path):
    ids = [TRAIN_IDS[0], VAL_IDS[0]]
    pairs = make_pairs(ids)
    rgb_mask = png(np.zeros((80, 100), dtype=np.uint8), mode="RGB")
    bad_value = np.zeros((80, 100), dtype=np.uint8)
    bad_value[5, 5] = 21
    cases = {
        "value": ({VAL_IDS[0]: (jpeg(np.zeros((80, 100, 3), np.uint8)), png(bad_value))}, None, "label values [21]"),
        "rgb": ({VAL_IDS[0]: (jpeg(np.zeros((80, 100, 3), np.uint8)), rgb_mask)}, None, "not a palette"),
        "size": ({VAL_IDS[0]: (jpeg(np.zeros((90, 100, 3), np.uint8)), png(bad_value * 0))}, None, "100x90 but its"),
        "missing": ({}, VAL_IDS[0], f"no VOCdevkit/VOC2012/SegmentationClass/{VAL_IDS[0]}.png"),
    }
    with task_modules(TASK_DIR) as (prepare, _), contextlib.redirect_stdout(io.StringIO()):
        (tmp_path / "empty").mkdir()
        with pytest.raises(FileNotFoundError, match=f"holds neither {FULL_TAR} nor the mirror's partial substitutes"):
            prepare.prepare(str(tmp_path / "empty"), str(tmp_path / "out"))
        for name, (override, drop, message) in cases.items():
            (tmp_path / name).mkdir()
            write_voc_tar(tmp_path / name / FULL_TAR, ids[:1], ids[1:], {**pairs, **override}, drop_png=drop)
            with pytest.raises(ValueError, match=re.escape(message)):
                prepare.prepare(str(tmp_path / name), str(tmp_path / "out"))
        (tmp_path / "overlap").mkdir()
        write_voc_tar(tmp_path / "overlap" / FULL_TAR, ids, ids[1:], pairs)
        with pytest.raises(ValueError, match="in both train.txt and val.txt"):
            prepare.prepare(str(tmp_path / "overlap"), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()  # nothing written on failure
    ws = copy_task(TASK_DIR, tmp_path / "ws")
    proc = run_prepare(ws, "--prepare", "--raw-dir", str(tmp_path / "rgb"), "--data-dir", "data")
    assert proc.returncode == 1 and "not a palette ('P') image" in proc.stderr


def test_loaders_and_normalize(fake):
    with task_modules(fake["ws"]) as (prepare, _):
        x, y = prepare.load_split("train")
        assert x.dtype == y.dtype == torch.uint8 and x.shape == (6, 3, 224, 224) and y.shape == (6, 224, 224)
        assert x.is_contiguous() and torch.equal(x, torch.from_numpy(np.load("data/train_x.npy")).permute(0, 3, 1, 2))
        with pytest.raises(ValueError, match="unknown split"):
            prepare.load_split("test")
        mean, std = (torch.tensor(v, dtype=torch.float64).view(1, 3, 1, 1) for v in (IMAGENET_MEAN, IMAGENET_STD))
        got = prepare.normalize(x[:2])
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.double(), (x[:2].double() / 255 - mean) / std, atol=1e-6, rtol=0)
        torch.testing.assert_close(prepare.normalize(x[:2].float() / 255), got)


# ---------------------------------------------------------------------------
# The metric
# ---------------------------------------------------------------------------


def test_miou_hand_computed_with_ignored_pixels():
    with task_modules(TASK_DIR) as (prepare, _):
        target = torch.tensor([[0, 0, 1, 255, 1, 255]], dtype=torch.uint8)
        pred = torch.tensor([[0, 1, 1, 2, 2, 7]], dtype=torch.uint8)  # predictions on 255 pixels do not count
        cm = prepare.confusion_matrix(pred, target)
        assert cm.dtype == torch.int64 and cm.shape == (21, 21) and cm.sum() == 4
        assert (cm[0, 0], cm[0, 1], cm[1, 1], cm[1, 2]) == (1, 1, 1, 1)
        miou, ious = prepare.iou_from_confusion(cm)
        # IoU = TP / (TP + FP + FN): class 0: 1 / (1 + 1 + 0); class 1: 1 / (1 + 1 + 1); class 2 (predicted, absent): 0.
        assert ious[:3] == [0.5, 1 / 3, 0.0] and ious[3:] == [None] * 18  # 7 was only predicted on a void pixel
        assert miou == pytest.approx((0.5 + 1 / 3 + 0.0) / 3, rel=1e-15)
        perfect, _ = prepare.iou_from_confusion(prepare.confusion_matrix(target.clamp(max=20), target))
        assert perfect == 1.0
        with pytest.raises(ValueError, match="no labelled pixel"):
            prepare.iou_from_confusion(prepare.confusion_matrix(pred, torch.full_like(target, 255)))


def sklearn_miou(pred: np.ndarray, target: np.ndarray) -> float:
    """The same rule computed independently: sklearn's confusion matrix over the non-void pixels."""
    valid = target != 255
    cm = sk_confusion_matrix(target[valid], pred[valid], labels=list(range(21))).astype(np.float64)
    inter = np.diag(cm)
    union = cm.sum(axis=0) + cm.sum(axis=1) - inter
    return float(np.mean(inter[union > 0] / union[union > 0]))


class PixelRule(nn.Module):
    """Logits from a fixed rule on the pixels (class = a quantised red channel), or a constant / bad output."""

    def __init__(self, bad: str | None = None):
        super().__init__()
        self.bad = bad

    def forward(self, x):
        cls = ((x[:, 0] + 2.2) * 2).long().clamp(0, 20)  # normalised red -> 0..20
        logits = torch.nn.functional.one_hot(cls, 21).permute(0, 3, 1, 2).float()
        if self.bad == "small":
            return logits[:, :, ::2, ::2]
        if self.bad == "nan":
            return logits * float("nan")
        return logits


def test_miou_matches_sklearn(fake):
    rng = np.random.default_rng(0)
    with task_modules(fake["ws"]) as (prepare, _):
        for _ in range(3):  # random predictions against random targets with void pixels
            target = rng.integers(0, 21, (3, 17, 19)).astype(np.uint8)
            target[rng.random(target.shape) < 0.2] = 255
            pred = rng.integers(0, 12, target.shape).astype(np.uint8)
            cm = prepare.confusion_matrix(torch.from_numpy(pred), torch.from_numpy(target))
            assert prepare.iou_from_confusion(cm)[0] == pytest.approx(sklearn_miou(pred, target), rel=1e-12)
        model = PixelRule()
        result = prepare.evaluate(model, "val")
        with torch.no_grad():
            pred = torch.cat(
                [prepare.forward(model, {"x": torch.from_numpy(i["x"])}) for i, _ in prepare.eval_batches()]
            )
        _, y = prepare.load_split("val")
        assert pred.dtype == torch.uint8 and pred.shape == y.shape == (4, 224, 224)
        assert result["n"] == 4 and len(result["iou"]) == 21
        assert result["miou"] == pytest.approx(sklearn_miou(pred.numpy(), y.numpy()), rel=1e-12)
        assert prepare.evaluate(model, "val", batch_size=3) == result  # batching does not change the score
        with pytest.raises(ValueError, match=r"expected logits of shape \(4, 21, 224, 224\)"):
            prepare.evaluate(PixelRule(bad="small"), "val")
        with pytest.raises(ValueError, match="non-finite"):
            prepare.evaluate(PixelRule(bad="nan"), "val")
        assert model.training  # evaluate() restores the training mode


def test_eval_batches_forward_and_score_are_the_contract(fake):
    """What the harness feeds (uint8 pixels, channels first, in the stored order), what forward returns (the class
    map, not 21 logit maps) and how score checks what comes back: the scorer trusts none of the outputs it gets."""
    with task_modules(fake["ws"]) as (prepare, _):
        assert prepare.FEED_BATCH_SIZE == 32 and not hasattr(prepare, "CAUSAL_INPUT")
        batches = prepare.eval_batches("val", batch_size=3)
        x, y = prepare.load_split("val")
        assert [len(t) for _, t in batches] == [3, 1] and all(set(i) == {"x"} for i, _ in batches)
        assert batches[0][0]["x"].dtype == batches[0][1].dtype == np.uint8 and batches[0][0]["x"].shape == (
            3,
            3,
            224,
            224,
        )
        np.testing.assert_array_equal(np.concatenate([i["x"] for i, _ in batches]), x.numpy())
        np.testing.assert_array_equal(np.concatenate([t for _, t in batches]), y.numpy())
        with pytest.raises(FileNotFoundError, match="no prepared data in 'nowhere'"):
            prepare.eval_batches("val", "nowhere")
        with pytest.raises(ValueError, match="unknown split"):
            prepare.eval_batches("test")
        with torch.no_grad():
            out = prepare.forward(PixelRule().eval(), {"x": torch.from_numpy(batches[0][0]["x"])})
        assert out.dtype == torch.uint8 and out.shape == (3, 224, 224)
        targets = [t for _, t in batches]
        truth = [np.where(t == 255, 0, t) for t in targets]  # the masks themselves (void pixels predicted as 0)
        assert prepare.score(truth, targets)["miou"] == 1.0 and prepare.score(truth, targets)["n"] == 4
        assert prepare.score([t.astype(np.int64) for t in truth], targets)["miou"] == 1.0  # int64 maps as well
        with pytest.raises(ValueError, match=r"returned \(3, 112, 112\) for 3 images; expected class maps"):
            prepare.score([t[:, ::2, ::2] for t in truth], targets)
        with pytest.raises(ValueError, match="float32 values; expected class ids"):
            prepare.score([t.astype(np.float32) for t in truth], targets)
        with pytest.raises(ValueError, match="class ids 0-20"):
            prepare.score([t.astype(np.int64) + 21 for t in truth], targets)
        with pytest.raises(ValueError, match="class ids 0-20"):
            prepare.score([t.astype(np.int64) - 1 for t in truth], targets)


# ---------------------------------------------------------------------------
# Augmentation and the baseline model
# ---------------------------------------------------------------------------


def test_augmentation_changes_masks_only_by_flips():
    torch.manual_seed(0)
    with task_modules(TASK_DIR) as (_, train):
        x = torch.randint(0, 256, (8, 3, 32, 32), dtype=torch.uint8)
        y = torch.randint(0, 21, (8, 32, 32), dtype=torch.uint8)
        y[:, :3] = 255
        plain = dict(train.CONFIG, flip=False, jitter=0.0)
        xa, ya = train.augment(x, y, plain)
        assert torch.equal(xa, x.float() / 255) and torch.equal(ya, y)
        xa, ya = train.augment(x, y, dict(plain, jitter=0.4))  # photometric: the image changes, the mask never
        assert torch.equal(ya, y) and ya.dtype == torch.uint8
        assert xa.min() >= 0 and xa.max() <= 1 and not torch.equal(xa, x.float() / 255)
        xa, ya = train.augment(x, y, dict(plain, flip=True, jitter=0.4))
        flipped = [torch.equal(ya[i], y[i].flip(1)) for i in range(8)]
        assert all(f or torch.equal(ya[i], y[i]) for i, f in enumerate(flipped)) and 0 < sum(flipped) < 8
        xf, yf = train.augment(x, y, dict(plain, flip=True))  # one draw flips an image and its mask together
        for i in range(8):
            assert torch.equal(xf[i], x[i].flip(2).float() / 255) == torch.equal(yf[i], y[i].flip(1))
        grey = train.colour_jitter(x[:, :1].float().expand(-1, 3, -1, -1) / 255, 0.4)
        torch.testing.assert_close(grey[:, 0], grey[:, 2])  # saturation cannot colour a grey image


def test_build_model_is_convnext_plus_fpn(fake):
    with task_modules(fake["ws"]) as (_, train):
        model = train.build_model(train.CONFIG)  # no weights read here (the evaluation has no weights/)
        assert sum(p.numel() for p in model.backbone.parameters()) == 27_820_128
        assert sum(p.numel() for p in model.decoder.parameters()) == 1_368_469
        assert [m.out_channels for m in model.decoder.lateral] == [128] * 4
        model.eval()
        with torch.no_grad():
            assert model(torch.randn(2, 3, 64, 96)).shape == (2, 21, 64, 96)  # logits at the input size


# ---------------------------------------------------------------------------
# The DINOv3 backbones
# ---------------------------------------------------------------------------


def convnext_expected_keys() -> list[tuple[str, tuple]]:
    """ConvNeXt-Tiny's official state dict (the notes' Appendix A), built from its rules."""
    dims, depths = [96, 192, 384, 768], [3, 3, 9, 3]
    keys = [("downsample_layers.0.0.weight", (96, 3, 4, 4)), ("downsample_layers.0.0.bias", (96,))]
    keys += [("downsample_layers.0.1.weight", (96,)), ("downsample_layers.0.1.bias", (96,))]
    for i in (1, 2, 3):
        keys += [(f"downsample_layers.{i}.0.weight", (dims[i - 1],)), (f"downsample_layers.{i}.0.bias", (dims[i - 1],))]
        keys += [(f"downsample_layers.{i}.1.weight", (dims[i], dims[i - 1], 2, 2))]
        keys += [(f"downsample_layers.{i}.1.bias", (dims[i],))]
    for i, (d, n) in enumerate(zip(dims, depths, strict=True)):
        for j in range(n):
            p = f"stages.{i}.{j}."
            keys += [(p + "gamma", (d,)), (p + "dwconv.weight", (d, 1, 7, 7)), (p + "dwconv.bias", (d,))]
            keys += [(p + "norm.weight", (d,)), (p + "norm.bias", (d,))]
            keys += [(p + "pwconv1.weight", (4 * d, d)), (p + "pwconv1.bias", (4 * d,))]
            keys += [(p + "pwconv2.weight", (d, 4 * d)), (p + "pwconv2.bias", (d,))]
    return keys + [(f"{n}.{w}", (768,)) for n in ("norm", "norms.3") for w in ("weight", "bias")]


def vit_expected_keys() -> list[tuple[str, tuple]]:
    """ViT-S/16's official state dict (the notes' Appendix B), built from its rules."""
    keys = [("cls_token", (1, 1, 384)), ("storage_tokens", (1, 4, 384)), ("mask_token", (1, 384))]
    keys += [("patch_embed.proj.weight", (384, 3, 16, 16)), ("patch_embed.proj.bias", (384,))]
    keys += [("rope_embed.periods", (16,))]
    for b in range(12):
        p = f"blocks.{b}."
        keys += [(p + "norm1.weight", (384,)), (p + "norm1.bias", (384,)), (p + "attn.qkv.weight", (1152, 384))]
        keys += [(p + "attn.qkv.bias", (1152,)), (p + "attn.qkv.bias_mask", (1152,))]
        keys += [(p + "attn.proj.weight", (384, 384)), (p + "attn.proj.bias", (384,)), (p + "ls1.gamma", (384,))]
        keys += [(p + "norm2.weight", (384,)), (p + "norm2.bias", (384,))]
        keys += [(p + "mlp.fc1.weight", (1536, 384)), (p + "mlp.fc1.bias", (1536,))]
        keys += [(p + "mlp.fc2.weight", (384, 1536)), (p + "mlp.fc2.bias", (384,)), (p + "ls2.gamma", (384,))]
    return keys + [("norm.weight", (384,)), ("norm.bias", (384,))]


def layout(module: nn.Module) -> list[tuple[str, tuple]]:
    return [(k, tuple(v.shape)) for k, v in module.state_dict().items()]


def test_convnext_tiny_has_the_official_layout(backbones):
    model = backbones["convnext"]
    assert layout(model) == convnext_expected_keys() and len(layout(model)) == 182
    assert sum(p.numel() for p in model.parameters()) == 27_820_128  # unique parameters (norm counted once)
    assert model.norms[3] is model.norm and all(isinstance(m, nn.Identity) for m in model.norms[:3])
    sd = model.state_dict()
    assert torch.equal(sd["norm.weight"], sd["norms.3.weight"]) and not list(model.buffers())
    assert torch.all(sd["stages.2.4.gamma"] == 1e-6)


def test_vit_small_has_the_official_layout(backbones):
    model = backbones["vit"]
    assert layout(model) == vit_expected_keys() and len(layout(model)) == 188
    assert sum(p.numel() for p in model.parameters()) == 21_601_152
    sd = model.state_dict()
    torch.testing.assert_close(sd["rope_embed.periods"], 100.0 ** (torch.arange(16) / 16), rtol=1e-6, atol=0)
    mask = sd["blocks.0.attn.qkv.bias_mask"]
    assert mask[:384].eq(1).all() and mask[384:768].eq(0).all() and mask[768:].eq(1).all()  # no bias on the keys
    assert torch.all(sd["blocks.3.ls2.gamma"] == 1e-5) and model.norm.eps == 1e-5 and torch.all(sd["mask_token"] == 0)


def test_state_dicts_equal_the_notes_appendices(backbones):
    text = NOTES.read_text(encoding="utf-8")
    appendix_a, appendix_b = text.split("## Appendix A")[1].split("## Appendix B")
    pattern = re.compile(r"^(\S+) \(([\d, ]+)\) float32$", re.M)

    def parse(section: str) -> list[tuple[str, tuple]]:
        return [(m[1], tuple(int(v) for v in m[2].replace(" ", "").split(",") if v)) for m in pattern.finditer(section)]

    assert layout(backbones["convnext"]) == parse(appendix_a)
    assert layout(backbones["vit"]) == parse(appendix_b)


@pytest.mark.slow  # the backbone at 224 and 512 px / the scorer on a batch-dependent model: ~1 min on 2 cores
def test_feature_shapes_at_224_and_512(backbones):
    with torch.no_grad():
        for side in (224, 512):
            x = torch.randn(1, 3, side, side)
            maps = backbones["convnext"].stage_outputs(x)
            assert [tuple(m.shape) for m in maps] == [
                (1, 96 * 2**i, side // 4 // 2**i, side // 4 // 2**i) for i in range(4)
            ]
            vit = backbones["vit"].get_intermediate_layers(x, n=[2, 5, 8, 11], reshape=True, norm=True)
            assert [tuple(m.shape) for m in vit] == [(1, 384, side // 16, side // 16)] * 4
            if side == 224:
                tokens = backbones["convnext"].get_intermediate_layers(x, n=[3], return_class_token=True)
                torch.testing.assert_close(tokens[0][0], maps[3].flatten(2).transpose(1, 2))  # the same normed map
                assert tokens[0][1].shape == (1, 768)
                feats = backbones["vit"].forward_features(x)
                assert feats["x_norm_patchtokens"].shape == (1, 196, 384) and feats["x_storage_tokens"].shape == (
                    1,
                    4,
                    384,
                )
                torch.testing.assert_close(feats["x_norm_patchtokens"], vit[3].flatten(2).transpose(1, 2))


def test_layer_norm_rope_and_masked_bias(dinov3):
    torch.manual_seed(0)
    ln = dinov3.LayerNorm(8, eps=1e-6, data_format="channels_first")
    nn.init.normal_(ln.weight)
    nn.init.normal_(ln.bias)
    x = torch.randn(2, 8, 5, 3, dtype=torch.float64)
    u = x.mean(1, keepdim=True)
    s = (x - u).pow(2).mean(1, keepdim=True)
    want = ln.weight.double()[:, None, None] * (x - u) / torch.sqrt(s + 1e-6) + ln.bias.double()[:, None, None]
    torch.testing.assert_close(ln(x.float()).double(), want, atol=1e-5, rtol=1e-5)
    # RoPE: patch (row 1, column 2) of a 3 x 4 grid has coordinates ((1.5 / 3) * 2 - 1, (2.5 / 4) * 2 - 1) = (0, 0.25).
    rope = dinov3.RopePositionEmbedding(384, 6).eval()
    sin, cos = rope(H=3, W=4)
    assert sin.shape == cos.shape == (12, 64)
    angles = 2 * math.pi * torch.cat([torch.zeros(16), 0.25 / rope.periods]).repeat(2)
    torch.testing.assert_close(sin[1 * 4 + 2], torch.sin(angles))
    torch.testing.assert_close(cos[1 * 4 + 2], torch.cos(angles))
    # Rotations keep norms, and q.k after rotation depends only on the offset between the two patches.
    q, k = torch.randn(64, dtype=torch.float64), torch.randn(64, dtype=torch.float64)
    sin, cos = (t.double() for t in rope(H=4, W=4))
    rq, rk = dinov3.rope_apply(q.expand(16, -1), sin, cos), dinov3.rope_apply(k.expand(16, -1), sin, cos)
    torch.testing.assert_close(rq.norm(dim=1), q.norm().expand(16))
    torch.testing.assert_close(rq[0] @ rk[5], rq[10] @ rk[15])  # (0,0)-(1,1) and (2,2)-(3,3)
    # The key third of the qkv bias is masked out.
    qkv = dinov3.LinearKMaskedBias(4, 12)
    nn.init.ones_(qkv.bias)
    nn.init.zeros_(qkv.weight)
    assert qkv(torch.zeros(1, 4)).tolist() == [[1.0] * 4 + [0.0] * 4 + [1.0] * 4]


def test_load_backbone_weights_is_strict_and_explains(dinov3, backbones, fake, tmp_path):
    weights = fake["ws"] / "weights"
    model = backbones["vit"]  # the file holds its own state dict; the failing loads below change nothing
    assert dinov3.load_backbone_weights(model, str(weights / VIT_FILE)) is model
    with pytest.raises(FileNotFoundError, match=r"not provided to this run.*bench weights install.*= None"):
        dinov3.load_backbone_weights(model, str(tmp_path / VIT_FILE))
    renamed = {k.replace("storage_tokens", "reg_token"): v for k, v in model.state_dict().items()}
    renamed.pop("mask_token")
    torch.save(renamed, tmp_path / "renamed.pth")
    with pytest.raises(
        ValueError, match=r"2 missing \(e\.g\. storage_tokens, mask_token\); 1 unexpected \(e\.g\. reg_token\)"
    ):
        dinov3.load_backbone_weights(model, str(tmp_path / "renamed.pth"))
    torch.save({"model": {"w": torch.ones(1)}}, tmp_path / "wrapped.pth")
    with pytest.raises(ValueError, match="not a flat state dict"):
        dinov3.load_backbone_weights(model, str(tmp_path / "wrapped.pth"))
    assert dinov3.check_weights(str(weights / CONVNEXT_FILE)) == {
        "ok": True,
        "arch": "convnext_tiny",
        "n_params": 27_820_128,
        "file": CONVNEXT_FILE,
    }
    bad = tmp_path / CONVNEXT_FILE  # the official name, but a converted-looking file
    torch.save({"stem.0.weight": torch.zeros(96, 3, 4, 4), "norm.weight": torch.ones(768)}, bad)
    with pytest.raises(ValueError, match=r"181 missing .*; 1 unexpected \(e\.g\. stem\.0\.weight\).*bench weights"):
        dinov3.check_weights(str(bad))


def test_check_weights_cli(fake, tmp_path):
    """What `bench weights install` runs: one JSON line, exit 0 when the file loads, 1 with an error otherwise."""
    ws = fake["ws"]
    proc = run_prepare(ws, "--check-weights", str(ws / "weights" / VIT_FILE))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert last_json(proc) == {"ok": True, "arch": "vit_small", "n_params": 21_601_152, "file": VIT_FILE}
    proc = run_prepare(ws, "--check-weights", str(tmp_path / CONVNEXT_FILE))
    assert proc.returncode == 1 and "not found: the pretrained DINOv3 weights" in last_json(proc)["error"]


# ---------------------------------------------------------------------------
# The baseline run, --eval
# ---------------------------------------------------------------------------


def test_baseline_trains_logs_and_checkpoints(trained):
    log = trained["log"]
    assert f"encoder initialised from weights/{CONVNEXT_FILE}" in log
    assert "note: partial data: train: the list names 6 ids" in log
    assert "6 training images, 3 steps per epoch, 1 steps" in log and "step 1 | loss " in log
    assert log.count("val_miou") == 1 and "done: 1 steps" in log
    (ckpt,) = trained["checkpoints"]
    assert ckpt.name.startswith("train_step1_miou")


def test_missing_weights_are_a_clear_error(fake):
    with task_modules(fake["ws"]) as (_, train), contextlib.redirect_stdout(io.StringIO()):
        with pytest.raises(FileNotFoundError, match=r"weights/absent\.pth not found: the pretrained DINOv3 weights"):
            train.main(dict(train.CONFIG, **TINY, pretrained="weights/absent.pth"))


# ---------------------------------------------------------------------------
# The official score: the harness's trusted scorer on a staged folder
# ---------------------------------------------------------------------------

OLD_COMMIT = "a46ace060bc9527a536580b7ecd1ed188ff7744d"  # the last prepare.py whose --eval was the official score
MANY_VAL_IDS = [f"2008_{k:06d}" for k in range(1, 41)]  # 40 generated val images: two feed batches (32 + 8)
TINY_SCRIPT = """import torch.nn as nn

CONFIG = {"mix": False}


class PerPixel(nn.Module):
    \"\"\"A 1x1 convolution to 21 logit maps; with mix, plus the batch's mean logits (other images leak in).\"\"\"

    def __init__(self, config):
        super().__init__()
        self.mix = config["mix"]
        self.head = nn.Conv2d(3, 21, 1)

    def forward(self, x):
        logits = self.head(x)
        return logits + logits.mean(dim=0, keepdim=True) if self.mix else logits


def build_model(config):
    return PerPixel(config)
"""


def numpy_miou(pred: np.ndarray, target: np.ndarray) -> float:
    """mIoU by hand with numpy: one 21 x 21 confusion matrix (np.bincount) over the non-void pixels, IoU per class
    whose union is not empty, their mean."""
    valid = target != 255
    cm = np.bincount(target[valid].astype(np.int64) * 21 + pred[valid], minlength=21 * 21).reshape(21, 21)
    inter = np.diag(cm).astype(np.float64)
    union = cm.sum(axis=0) + cm.sum(axis=1) - inter
    return float(np.mean(inter[union > 0] / union[union > 0]))


def old_official(ws: Path, checkpoint: Path, dest: Path) -> dict:
    """`prepare.py --eval` of the prepare.py before the port (from git history), in a copy of the workspace."""
    old = subprocess.run(
        ["git", "show", f"{OLD_COMMIT}:tasks/{TASK_DIR.name}/prepare.py"], cwd=ROOT, capture_output=True, text=True
    )
    if old.returncode != 0:
        pytest.skip(f"the pre-port prepare.py ({OLD_COMMIT[:7]}) is not in this checkout's git history")
    copy = copy_task(ws, dest)
    (copy / "prepare.py").write_text(old.stdout, encoding="utf-8")
    proc = run_prepare(copy, "--eval", str(checkpoint), "--script", "train.py", "--data-dir", str(ws / "data"))
    assert proc.returncode == 0 and "run_eval" in old.stdout, proc.stdout + proc.stderr
    return last_json(proc)


@pytest.fixture(scope="module")
def official(small, fake, tmp_path_factory) -> dict:
    """The scorer's result for the trained baseline's checkpoint, staged as the harness stages it: the task's
    original prepare.py and dinov3.py, the workspace's scripts and the checkpoint as checkpoint.pt (no weights/)."""
    ckpt = small.trained(TASK_DIR.name)["checkpoints"][-1]
    folder = stage(load_task(TASK_DIR), fake["ws"], tmp_path_factory.mktemp("t3-official") / "eval", ckpt)
    code, result = run_scorer(TASK_DIR, fake["ws"] / "data", folder)
    return {"checkpoint": ckpt, "code": code, "result": result, "folder": folder}


def test_official_miou_is_numpys_and_the_old_evaluations(small, fake, official, tmp_path):
    """The scorer's value for the trained baseline, recomputed here: the model on the 4 val images normalised with
    ImageNet's statistics, the argmax of its logits, one confusion matrix by hand over the non-void pixels. It is
    also the value of the evaluation before the port (its prepare.py --eval) and of today's self-check."""
    result = official["result"]
    assert official["code"] == 0 and "error" not in result, result
    assert (result["task"], result["metric"], result["split"], result["n"]) == ("t3", "miou", "val", 4)
    assert result["checks"] == expected_probes(1)  # the honest baseline passes every probe (4 images: one batch)
    staged = {p.name for p in official["folder"].iterdir()} - {"__pycache__"}  # (bytecode: the unsandboxed predictor)
    assert staged == {"checkpoint.pt", "dinov3.py", "prepare.py", "task_helpers.py", "train.py"}  # the originals
    payload = torch.load(official["checkpoint"], weights_only=True)
    assert payload["step"] == 1 and payload["config"]["pretrained"] == f"weights/{CONVNEXT_FILE}"
    with task_modules(fake["ws"]) as (_, train):
        model = train.build_model(payload["config"])
    model.load_state_dict(payload["state_dict"])
    model.eval()
    data = fake["ws"] / "data"
    x = torch.from_numpy(np.load(data / "val_x.npy")).permute(0, 3, 1, 2).contiguous().float() / 255.0
    mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in (IMAGENET_MEAN, IMAGENET_STD))
    with torch.no_grad():
        pred = model((x - mean) / std).argmax(dim=1).numpy()
    y = np.load(data / "val_y.npy")
    assert result["value"] == pytest.approx(numpy_miou(pred, y), rel=1e-12)
    assert result["value"] == pytest.approx(sklearn_miou(pred, y), rel=1e-12)
    assert result["value"] == old_official(fake["ws"], official["checkpoint"], tmp_path / "old")["value"]
    assert result["value"] == last_json(small.official(TASK_DIR.name)["proc"])["value"]  # prepare.py --eval
    assert result["value"] == payload["val_score"]  # what train.py reported: evaluate() on val


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> Path:
    """A prepared data folder with 40 generated val images (and 2 train): more than one feed batch."""
    root = tmp_path_factory.mktemp("t3-many")
    train_ids = TRAIN_IDS[:2]
    write_voc_tar(root / FULL_TAR, train_ids, MANY_VAL_IDS, make_pairs(train_ids + MANY_VAL_IDS, seed=2))
    with task_modules(TASK_DIR) as (prepare, _), contextlib.redirect_stdout(io.StringIO()):
        prepare.prepare(str(root), str(root / "data"))
    return root / "data"


def tiny_folder(dest: Path, mix: bool) -> Path:
    """A staged folder for TINY_SCRIPT's model (a seeded 1x1 convolution), with or without the batch mixing."""
    dest.mkdir()
    for name in ("prepare.py", "dinov3.py", "task_helpers.py"):
        shutil.copyfile(TASK_DIR / name, dest / name)
    (dest / "run_tiny.py").write_text(TINY_SCRIPT, encoding="utf-8")
    torch.manual_seed(0)
    state = nn.Conv2d(3, 21, 1).state_dict()
    state = {f"head.{k}": v for k, v in state.items()}
    torch.save({"state_dict": state, "config": {"mix": mix}, "script": "run_tiny.py"}, dest / "checkpoint.pt")
    return dest


@pytest.mark.slow  # the backbone at 224 and 512 px / the scorer on a batch-dependent model: ~1 min on 2 cores
def test_scorer_flags_a_model_whose_outputs_depend_on_the_batch(many, tmp_path):
    """Two feed batches of 40 val images. The honest per-pixel model passes every probe and its score is the
    numpy mIoU of its class maps; the same model plus the batch's mean logits gets other class maps for the first
    8 images in a batch of their own than in the scored batch of 32: a violation, no value."""
    code, honest = run_scorer(TASK_DIR, many, tiny_folder(tmp_path / "honest", mix=False), script="run_tiny.py")
    assert code == 0 and honest["checks"] == PROBES and honest["n"] == 40, honest
    torch.manual_seed(0)
    head = nn.Conv2d(3, 21, 1)
    x = torch.from_numpy(np.load(many / "val_x.npy")).permute(0, 3, 1, 2).float() / 255.0
    mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in (IMAGENET_MEAN, IMAGENET_STD))
    with torch.no_grad():
        pred = head((x - mean) / std).argmax(dim=1).numpy()
    assert honest["value"] == pytest.approx(numpy_miou(pred, np.load(many / "val_y.npy")), rel=1e-12)
    code, mixed = run_scorer(TASK_DIR, many, tiny_folder(tmp_path / "mixed", mix=True), script="run_tiny.py")
    assert code == 1 and "value" not in mixed, mixed
    assert mixed["error"] == mixed["violation"]
    assert "a sample's outputs changed with the other samples in its batch" in mixed["violation"]


# ---------------------------------------------------------------------------
# The real substitutes, through the harness's fetch (mirror) and prepare
# ---------------------------------------------------------------------------


@pytest.mark.mirror
def test_real_substitutes_prepare_26_train_22_val(real_mirror):
    from bench.tasks import data

    task = load_task(TASK_DIR)
    folder = data.prepare(task, progress=False)  # the tar is not in the mirror: its substitutes are fetched
    marker = json.loads((folder / ".complete").read_text())
    assert marker["substituted"] == [FULL_TAR]
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["counts"] == {"train": 26, "val": 22}
    notes = meta["partial_data"]
    assert (
        len(notes) == 2 and notes[0].startswith("train: 26 of 1,464 images") and notes[1].startswith("val: 22 of 1,449")
    )
    assert data.partial_notes(task) == notes
    lists = real_mirror / "voc2012" / "VOCdevkit" / "VOC2012" / "ImageSets" / "Segmentation"
    for split in ("train", "val"):
        listed = (lists / f"{split}.txt").read_text().split()
        assert len(listed) == {"train": 1464, "val": 1449}[split]
        assert meta["ids"][split] == [i for i in listed if i in set(meta["ids"][split])]  # in list order
        x, y = np.load(folder / f"{split}_x.npy"), np.load(folder / f"{split}_y.npy")
        assert x.shape == (meta["counts"][split], 224, 224, 3) and y.shape == (meta["counts"][split], 224, 224)
        assert set(np.unique(y).tolist()) <= set(range(21)) | {255} and (y == 255).any() and (y > 0).any()
    assert meta["ids"]["train"][0] == "2007_000032"  # aeroplane, person and void borders
    assert set(np.unique(np.load(folder / "train_y.npy")[0]).tolist()) == {0, 1, 15, 255}


# ---------------------------------------------------------------------------
# The whole harness on T3: data through the mirror, installed weights in the workspace, locked dinov3.py
# ---------------------------------------------------------------------------


def test_bench_run_provides_weights_locks_dinov3_and_scores(fake, tmp_path, monkeypatch):
    """`bench run` on a copy of T3 whose task.toml declares GENERATED data and weights (their checksums rewritten)."""
    from bench.runner import RunSpec, run
    from bench.tasks import get_task, weights

    folder = copy_task(TASK_DIR, tmp_path / "tasks" / TASK_DIR.name)
    mirror = tmp_path / "mirror" / "voc2012"
    mirror.mkdir(parents=True)
    shutil.copy(fake["raw"] / FULL_TAR, mirror / FULL_TAR)
    toml = (folder / "task.toml").read_text()
    tar = (mirror / FULL_TAR).read_bytes()
    full = toml.index(f'file = "{FULL_TAR}"')
    head, tail = toml[:full], toml[full:]
    tail = re.sub(r'md5 = "[0-9a-f]+"', f'sha256 = "{hashlib.sha256(tar).hexdigest()}"', tail, count=1)
    tail = re.sub(r"size = \d+", f"size = {len(tar)}", tail, count=1)
    for name in (CONVNEXT_FILE, VIT_FILE):
        digest = hashlib.sha256((fake["ws"] / "weights" / name).read_bytes()).hexdigest()
        head = re.sub(rf'(file = "{name}"\nsha256_prefix = )"[0-9a-f]+"', rf'\1"{digest[:8]}"', head)
    (folder / "task.toml").write_text(head + tail)
    monkeypatch.setenv("BENCH_TASKS_DIR", str(tmp_path / "tasks"))
    monkeypatch.setenv("BENCH_DATA_MIRROR", str(tmp_path / "mirror"))
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    task = get_task("t3")
    with pytest.raises(weights.WeightsError, match="bench weights install"):
        weights.for_task(task)
    for name in (CONVNEXT_FILE, VIT_FILE):
        weights.install(fake["ws"] / "weights" / name)  # hash prefix + strict load into dinov3.py's modules

    edits = {
        '"batch_size": 16': '"batch_size": 2',
        '"epochs": 15': '"epochs": 1',
        '"max_steps": None': '"max_steps": 1',
    }
    tiny = "; ".join(f"s/{a}/{b}/" for a, b in edits.items())  # the agent's run_1.py: one step of batch 2
    command = f"sed '{tiny}' train.py > run_1.py && python run_1.py"
    spec = RunSpec(
        task=task,
        agent="command",
        campaign="t3-e2e",
        budget_s=600,
        grace_s=5,
        console=False,
        options={"command": command},
    )
    result = run(spec)
    assert result.status == "success", result.reason
    assert result.metric == "miou"
    assert result.audit.locked_sha256.keys() == {"prepare.py", "dinov3.py", "task_helpers.py"} and not result.violations
    assert result.partial_data is True  # a 6/4-image tar is not the official 1,464/1,449
    ws = Path(result.workspace)
    (ckpt,) = (ws / "checkpoints").glob("*.pt")  # one step: one checkpoint, the one scored
    # the eval split is the val split, evaluated in plain float32 by the training run and by the harness alike
    assert result.score == pytest.approx(torch.load(ckpt, weights_only=True)["val_score"], rel=1e-6)
    for name in (CONVNEXT_FILE, VIT_FILE):
        assert (ws / "weights" / name).read_bytes() == (fake["ws"] / "weights" / name).read_bytes()
        assert not (ws / "weights" / name).stat().st_mode & stat.S_IWUSR  # read-only copies, not links
    eval_dirs = sorted(d for d in (Path(result.run_dir) / "eval").iterdir() if d.is_dir())  # (and predictor logs)
    assert eval_dirs and all((d / "dinov3.py").read_bytes() == (folder / "dinov3.py").read_bytes() for d in eval_dirs)
