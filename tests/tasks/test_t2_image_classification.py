"""Task T2 (TinyImageNet): preparation from the zip, loaders, augmentation, top-1 accuracy, baseline, --eval.

Runs on a GENERATED zip with the exact layout of the real archive (tiny-imagenet-200/wnids.txt, words.txt,
train/<wnid>/images/<wnid>_<k>.JPEG, train/<wnid>/<wnid>_boxes.txt, val/images/val_<k>.JPEG and
val/val_annotations.txt) but only 2 training and 1 validation image per class, of random pixels: NOT the real
data, and no score on it means anything (made in tests/tasks/smalldata.py). The test marked `mirror` prepares the
real subset zip from BENCH_DATA_MIRROR. What every task promises (the checkpoint payload, the --eval JSON, strict
loading, errors as JSON, val_score = the evaluator's score) is checked in test_conformance.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
from PIL import Image
from sklearn.metrics import accuracy_score

from bench.pipeline.evaluate import stage
from bench.tasks import load_task
from tests.tasks.smalldata import FULL_ZIP, SUBSET_ZIP, write_tiny_imagenet_like
from tests.tasks.smalldata import T2_TINY as TINY
from tests.tasks.taskfolder import copy_task, expected_probes, last_json, run_prepare, run_scorer, task_modules

ROOT = Path(__file__).resolve().parents[2]
TASK_DIR = ROOT / "tasks" / "t2_image_classification"
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # the published RGB statistics


def test_task_toml_loads():
    task = load_task(TASK_DIR)
    assert (task.id, task.metric, task.direction, task.eval_split) == ("t2", "top1_acc", "max", "val")
    assert (task.budget_minutes, task.baseline_score, task.reference_score) == (120, 0.343, 0.627)
    full, subset = task.data
    assert (full.file, full.url, full.mirror) == (
        FULL_ZIP,
        "http://cs231n.stanford.edu/tiny-imagenet-200.zip",
        "tiny-imagenet-200/tiny-imagenet-200.zip",
    )
    assert (full.md5, full.size, full.substitute_for) == ("90528d7ca1a48142e341f4ef8d21d0de", 248100043, "")
    assert (subset.file, subset.url, subset.mirror, subset.substitute_for) == (
        SUBSET_ZIP,
        "",
        "tiny-imagenet-200/tiny-imagenet-200-subset.zip",
        FULL_ZIP,
    )
    assert subset.sha256 == "3c4ac57fb435df8177c1a08af550879506aeedce877234544e4c57ab780d199e"
    assert (subset.md5, subset.size) == ("6a3101af5e6e0215f448a555c63a952e", 61416863)


def test_prepare_decodes_every_image_in_order_with_sorted_labels(fake, tmp_path):
    data, index = fake["ws"] / "data", fake["index"]
    meta = json.loads((data / "meta.json").read_text(encoding="utf-8"))
    assert meta["classes"] == index["wnids"] and len(meta["classes"]) == 200  # sorted, not wnids.txt's order
    assert meta["words"][0] == "generated class 0, thing 0" and meta["source"] == SUBSET_ZIP
    assert meta["counts"] == {"train": 400, "val": 200} and meta["train_per_class"] == [2] * 200
    assert (meta["mean"], meta["std"]) == (list(IMAGENET_MEAN), list(IMAGENET_STD))
    assert meta["partial_data"] == [
        f"train: 400 of 100,000 images (2 of 500 per class, from {SUBSET_ZIP})",
        f"val: 200 of 10,000 images (from {SUBSET_ZIP})",
    ]
    assert "partial data: train: 400 of 100,000" in fake["stdout"]
    label = {w: i for i, w in enumerate(index["wnids"])}
    with zipfile.ZipFile(fake["raw"] / SUBSET_ZIP) as zf:
        for split in ("train", "val"):
            x, y = np.load(data / f"{split}_x.npy"), np.load(data / f"{split}_y.npy")
            members = index[split]
            if split == "train":  # class by class in sorted-wnid order, then by image number
                members = sorted(members, key=lambda m: (label[m[1]], m[0]))
            assert x.dtype == np.uint8 and x.shape == (len(members), 3, 64, 64)
            assert y.dtype == np.int64 and y.tolist() == [label[w] for _, w in members]
            for i in (0, 1, 2, len(members) - 1):
                with Image.open(io.BytesIO(zf.read(members[i][0]))) as img:
                    want = np.asarray(img.convert("RGB")).transpose(2, 0, 1)
                np.testing.assert_array_equal(x[i], want)
    grey_member = index["train"][0][0]  # the generated greyscale JPEG
    x = np.load(data / "train_x.npy")
    i = [m for m, _ in sorted(index["train"], key=lambda m: (label[m[1]], m[0]))].index(grey_member)
    assert (x[i, 0] == x[i, 1]).all() and (x[i, 1] == x[i, 2]).all()  # greyscale -> three equal channels
    # Deterministic: preparing again gives the same bytes.
    with task_modules(fake["ws"]) as (prepare, _), contextlib.redirect_stdout(io.StringIO()):
        prepare.prepare(str(fake["raw"]), str(tmp_path / "again"))
        assert prepare._natural_key("n1_10.JPEG") > prepare._natural_key("n1_9.JPEG")
    for name in ("train_x.npy", "train_y.npy", "val_x.npy", "val_y.npy", "meta.json"):
        assert (tmp_path / "again" / name).read_bytes() == (data / name).read_bytes(), name


def test_prepare_rejects_bad_archives(tmp_path):
    with task_modules(TASK_DIR) as (prepare, _), contextlib.redirect_stdout(io.StringIO()):
        out = str(tmp_path / "out")
        (tmp_path / "empty").mkdir()
        with pytest.raises(FileNotFoundError, match="holds neither tiny-imagenet-200.zip nor"):
            prepare.prepare(str(tmp_path / "empty"), out)
        cases = {
            "few": ({"n_classes": 199}, "must list 200 distinct wnids"),
            "annotation": ({"bad_val_wnid": True}, "line 4 names no wnid"),
            "size": ({"odd_size": True}, "is 56x56, not 64x64"),
        }
        for name, (kwargs, message) in cases.items():
            (tmp_path / name).mkdir()
            write_tiny_imagenet_like(tmp_path / name / SUBSET_ZIP, train_per_class=1, **kwargs)
            with pytest.raises(ValueError, match=message):
                prepare.prepare(str(tmp_path / name), out)


def test_official_zip_is_preferred_and_checked_strictly(tmp_path):
    """With both zips present, the official one is used, and it must hold the official counts."""
    ws = copy_task(TASK_DIR, tmp_path / "ws")
    raw = tmp_path / "raw"
    raw.mkdir()
    write_tiny_imagenet_like(raw / SUBSET_ZIP, train_per_class=1)
    write_tiny_imagenet_like(raw / FULL_ZIP, train_per_class=1)
    proc = run_prepare(ws, "--prepare", "--raw-dir", str(raw), "--data-dir", "data")
    assert proc.returncode == 1
    assert "expected 500 training images per class in the official archive, found 1 to 1" in proc.stderr
    assert not (ws / "data" / "meta.json").exists()


def test_normalize_uses_imagenet_statistics():
    with task_modules(TASK_DIR) as (prepare, _):
        x = torch.randint(0, 256, (2, 3, 5, 5), dtype=torch.uint8)
        mean, std = (torch.tensor(v, dtype=torch.float64).view(1, 3, 1, 1) for v in (IMAGENET_MEAN, IMAGENET_STD))
        want = (x.double() / 255 - mean) / std
        got = prepare.normalize(x)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.double(), want, atol=1e-6, rtol=0)
        torch.testing.assert_close(prepare.normalize(x.float() / 255), got)  # floats in 0..1 give the same


class Fixed(nn.Module):
    """Logits from a fixed random linear map of the mean colour, or a constant class."""

    def __init__(self, constant: int | None = None, classes: int = 200, value: float = 0.0):
        super().__init__()
        self.constant, self.classes, self.value = constant, classes, value
        self.proj = nn.Linear(3, classes)

    def forward(self, x):
        if self.constant is not None:
            out = torch.full((x.shape[0], self.classes), self.value)
            out[:, self.constant] = 1.0
            return out
        return self.proj(x.mean(dim=(2, 3)))


def test_metric_matches_sklearn_and_hand_counts(fake):
    torch.manual_seed(0)
    with task_modules(fake["ws"]) as (prepare, _):
        _, y = prepare.load_split("val")
        model = Fixed()
        result = prepare.evaluate(model, "val")
        with torch.no_grad():
            pred = torch.cat(
                [prepare.forward(model, {"x": torch.from_numpy(i["x"])}) for i, _ in prepare.eval_batches()]
            )
        assert pred.shape == (200, 200)
        assert result["n"] == 200 and result["top1_acc"] == accuracy_score(y.numpy(), pred.argmax(1).numpy())
        assert prepare.evaluate(model, "val", batch_size=7) == result  # batching does not change the score
        # A constant prediction of class 5 is right exactly on the val images of class 5 (1 of 200 here).
        assert prepare.evaluate(Fixed(constant=5), "val")["top1_acc"] == (y == 5).sum().item() / 200 == 0.005
        train = prepare.evaluate(Fixed(constant=5), "train")
        assert train == {"top1_acc": 2 / 400, "n": 400}
        with pytest.raises(ValueError, match=r"expected logits of shape \(256, 200\)"):
            prepare.evaluate(Fixed(constant=0, classes=10), "train")
        with pytest.raises(ValueError, match="non-finite"):
            prepare.evaluate(Fixed(constant=0, value=float("nan")), "val")
        assert model.training  # evaluate() restores the training mode


def test_eval_batches_forward_and_score_are_the_contract(fake):
    """What the harness feeds (uint8 pixels, in the stored order), what forward returns (the logits) and how score
    checks what comes back: the scorer trusts none of the outputs it gets."""
    with task_modules(fake["ws"]) as (prepare, _):
        assert prepare.FEED_BATCH_SIZE == 256 and not hasattr(prepare, "CAUSAL_INPUT")
        batches = prepare.eval_batches("val", batch_size=64)
        x, y = np.load("data/val_x.npy"), np.load("data/val_y.npy")
        assert [len(t) for _, t in batches] == [64, 64, 64, 8] and all(set(i) == {"x"} for i, _ in batches)
        np.testing.assert_array_equal(np.concatenate([i["x"] for i, _ in batches]), x)
        np.testing.assert_array_equal(np.concatenate([t for _, t in batches]), y)
        assert batches[0][0]["x"].dtype == np.uint8 and batches[0][1].dtype == np.int64
        with pytest.raises(FileNotFoundError, match="no prepared data in 'nowhere'"):
            prepare.eval_batches("val", "nowhere")
        with pytest.raises(ValueError, match="unknown split"):
            prepare.eval_batches("test")
        logits = [np.eye(200, dtype=np.float32)[t] for _, t in batches]  # one-hot on the true class: all right
        assert prepare.score(logits, [t for _, t in batches]) == {"top1_acc": 1.0, "n": 200}
        logits[1][:, 0] = 2.0  # batch 1 now predicts class 0 everywhere: right where the label is 0
        want = (200 - 64 + int((batches[1][1] == 0).sum())) / 200
        assert prepare.score(logits, [t for _, t in batches])["top1_acc"] == want
        with pytest.raises(ValueError, match=r"returned \(64, 10\) for 64 images; expected logits of shape"):
            prepare.score([a[:, :10] for a in logits], [t for _, t in batches])
        logits[3][5, 7] = np.nan
        with pytest.raises(ValueError, match="non-finite"):
            prepare.score(logits, [t for _, t in batches])


def test_augmentation_crops_flips_and_jitters():
    torch.manual_seed(0)
    with task_modules(TASK_DIR) as (_, train):
        x = torch.randint(0, 256, (6, 3, 64, 64), dtype=torch.uint8)
        padded = torch.nn.functional.pad(x, (8, 8, 8, 8))
        crops = train.random_crop(x, 8)
        assert crops.shape == x.shape and crops.dtype == torch.uint8
        for i in range(len(x)):  # every crop is one 64 x 64 window of its zero-padded image
            windows = [padded[i, :, a : a + 64, b : b + 64] for a in range(17) for b in range(17)]
            assert any(torch.equal(crops[i], w) for w in windows)
        assert torch.equal(train.random_crop(x, 0), x)
        plain = dict(train.CONFIG, crop_padding=0, flip=False, jitter=0.0)
        assert torch.equal(train.augment(x, plain), x.float() / 255)
        flipped = train.augment(x, dict(plain, flip=True))
        assert all(torch.equal(f, x[i] / 255) or torch.equal(f, x[i].flip(2) / 255) for i, f in enumerate(flipped))
        jittered = train.augment(x, dict(plain, jitter=0.4))
        assert jittered.min() >= 0 and jittered.max() <= 1 and not torch.equal(jittered, x.float() / 255)
        grey = train.colour_jitter(x[:, :1].float().expand(-1, 3, -1, -1) / 255, 0.4)
        torch.testing.assert_close(grey[:, 0], grey[:, 2])  # saturation cannot colour a grey image


def test_model_is_a_four_stage_resnet():
    with task_modules(TASK_DIR) as (_, train):
        model = train.build_model(train.CONFIG)
        assert sum(p.numel() for p in model.parameters()) == 11_271_432  # ResNet-18 layout, 200-way head
        widths = [m.conv2.out_channels for m in model.stages if isinstance(m, train.BasicBlock)]
        assert widths == [64, 64, 128, 128, 256, 256, 512, 512]
        assert model(torch.randn(2, 3, 64, 64)).shape == (2, 200)
        tiny = train.build_model(dict(train.CONFIG, **TINY))
        assert tiny.head.in_features == 64 and tiny(torch.randn(1, 3, 64, 64)).shape == (1, 200)


def test_baseline_trains_logs_and_checkpoints(trained):
    log = trained["log"]
    assert "note: partial data: train: 400 of 100,000 images" in log
    assert "25 steps per epoch, 30 steps" in log and "step 5 | loss " in log
    assert log.count("val_top1_acc") == 4  # steps 10, 20, 25 (end of epoch 1) and 30 (max_steps)
    assert len(trained["checkpoints"]) == 4
    assert all(p.name.startswith("train_step") for p in trained["checkpoints"])
    assert "done: 30 steps" in log


# ---------------------------------------------------------------------------
# The official score: the harness's trusted scorer on a staged folder
# ---------------------------------------------------------------------------

OLD_COMMIT = "a46ace060bc9527a536580b7ecd1ed188ff7744d"  # the last prepare.py whose --eval was the official score
MIXING_SCRIPT = """import torch.nn as nn

from train import build_model as build_honest


class BatchMean(nn.Module):
    \"\"\"The honest network plus the mean logits of the batch: each image's output depends on the others.\"\"\"

    def __init__(self, config):
        super().__init__()
        self.net = build_honest(config)

    def forward(self, x):
        logits = self.net(x)
        return logits + logits.mean(dim=0, keepdim=True)


def build_model(config):
    return BatchMean(config)
"""


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
    """The scorer's result for the trained baseline's last checkpoint, staged as the harness stages it: the task's
    original prepare.py, the workspace's scripts and the checkpoint as checkpoint.pt."""
    ckpt = small.trained(TASK_DIR.name)["checkpoints"][-1]
    folder = stage(load_task(TASK_DIR), fake["ws"], tmp_path_factory.mktemp("t2-official") / "eval", ckpt)
    code, result = run_scorer(TASK_DIR, fake["ws"] / "data", folder)
    return {"checkpoint": ckpt, "code": code, "result": result, "folder": folder}


def test_official_accuracy_is_sklearns_and_the_old_evaluations(small, fake, official, tmp_path):
    """The scorer's value for the trained baseline (the checkpoint of step 30), recomputed here: the model on the
    val images normalised with ImageNet's statistics, its argmax against the labels, sklearn's accuracy. It is also
    the value of the evaluation before the port (its prepare.py --eval) and of today's self-check."""
    result = official["result"]
    assert official["code"] == 0 and "error" not in result, result
    assert (result["task"], result["metric"], result["split"], result["n"]) == ("t2", "top1_acc", "val", 200)
    assert result["checks"] == expected_probes(1)  # the honest baseline passes every probe (200 images: one batch)
    payload = torch.load(official["checkpoint"], weights_only=True)
    assert payload["step"] == 30 and payload["config"]["width"] == 8
    with task_modules(fake["ws"]) as (_, train):
        model = train.build_model(payload["config"])
    model.load_state_dict(payload["state_dict"])
    model.eval()
    data = fake["ws"] / "data"
    x = torch.from_numpy(np.load(data / "val_x.npy")).float() / 255.0
    mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in (IMAGENET_MEAN, IMAGENET_STD))
    with torch.no_grad():
        pred = model((x - mean) / std).argmax(dim=1).numpy()
    assert result["value"] == accuracy_score(np.load(data / "val_y.npy"), pred)
    assert result["value"] == old_official(fake["ws"], official["checkpoint"], tmp_path / "old")["value"]
    assert result["value"] == last_json(small.official(TASK_DIR.name)["proc"])["value"]  # prepare.py --eval
    assert result["value"] == payload["val_score"]  # what train.py reported: evaluate() on val


def test_scorer_flags_a_model_whose_outputs_depend_on_the_batch(small, official, tmp_path):
    """The same network plus the batch's mean logits: its score would be a number, but the second predictor's
    batch of 8 images gives other outputs for them than the scored batch of 200: a violation, no value."""
    folder = shutil.copytree(official["folder"], tmp_path / "eval")
    (folder / "run_mix.py").write_text(MIXING_SCRIPT, encoding="utf-8")
    payload = torch.load(official["checkpoint"], weights_only=True)
    state = {f"net.{k}": v for k, v in payload["state_dict"].items()}
    torch.save({**payload, "state_dict": state, "script": "run_mix.py"}, folder / "checkpoint.pt")
    code, result = run_scorer(TASK_DIR, small.prepared(TASK_DIR.name)["ws"] / "data", folder, script="run_mix.py")
    assert code == 1 and "value" not in result, result
    assert result["error"] == result["violation"]
    assert "a sample's outputs changed with the other samples in its batch" in result["violation"]


@pytest.mark.mirror
def test_real_subset_zip_prepares_20k_train_10k_val(real_mirror, tmp_path):
    raw_zip = real_mirror / "tiny-imagenet-200" / SUBSET_ZIP
    source = load_task(TASK_DIR).data[1]
    blob = raw_zip.read_bytes()
    assert len(blob) == source.size and hashlib.sha256(blob).hexdigest() == source.sha256
    assert hashlib.md5(blob).hexdigest() == source.md5
    del blob
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / SUBSET_ZIP).symlink_to(raw_zip)
    with task_modules(TASK_DIR) as (prepare, _):
        prepare.prepare(str(tmp_path / "raw"), str(tmp_path / "data"))
        meta = prepare.load_meta(str(tmp_path / "data"))
        x, y = prepare.load_split("train", str(tmp_path / "data"))
        xv, yv = prepare.load_split("val", str(tmp_path / "data"))
    assert meta["counts"] == {"train": 20000, "val": 10000} and meta["train_per_class"] == [100] * 200
    assert meta["partial_data"] == [f"train: 20,000 of 100,000 images (100 of 500 per class, from {SUBSET_ZIP})"]
    wnids = (real_mirror / "tiny-imagenet-200" / "wnids.txt").read_text().split()
    assert meta["classes"] == sorted(wnids) and len(meta["classes"]) == 200
    assert x.shape == (20000, 3, 64, 64) and xv.shape == (10000, 3, 64, 64) and x.dtype == xv.dtype == torch.uint8
    assert torch.equal(torch.bincount(y), torch.full((200,), 100)) and torch.equal(
        y, torch.arange(200).repeat_interleave(100)
    )
    assert torch.equal(torch.bincount(yv), torch.full((200,), 50))
    assert yv[0].item() == meta["classes"].index("n03444034")  # val_0.JPEG in val_annotations.txt
    assert meta["words"][meta["classes"].index("n01443537")] == "goldfish, Carassius auratus"
