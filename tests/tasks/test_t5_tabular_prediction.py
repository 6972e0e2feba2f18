"""Task T5 (Forest Cover Type): preparation, the stratified split, scaling, the accuracy metric, the MLP baseline
and prepare.py --eval.

Runs on GENERATED data with the exact schema of covtype.data.gz (gzip CSV, no header, 55 integers a row:
10 continuous, 4 wilderness and 40 soil one-hot columns, class 1..7), 3,000 rows: not the real data, and no
score on it means anything. The data mirror has no copy of the real file; the test marked `mirror` runs only
where one is placed at covtype/covtype.data.gz.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
from sklearn.metrics import accuracy_score
from sklearn.model_selection import train_test_split

from bench.tasks import load_task
from tests.tasks.taskfolder import copy_task, last_json, run_prepare, task_modules

TASK_DIR = Path(__file__).resolve().parents[2] / "tasks" / "t5_tabular_prediction"
ROWS = 3000  # generated rows: 2,400 train, 300 val, 300 test
CLASS_P = [0.36, 0.49, 0.06, 0.02, 0.02, 0.03, 0.02]  # roughly the skew of the real classes
TINY = {"epochs": 2, "batch_size": 256, "log_every": 4}  # 9 steps an epoch on the 2,400 generated training rows


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


def expected_split(labels: np.ndarray) -> dict[str, np.ndarray]:
    """The documented split, recomputed here: train_test_split(stratify, random_state=42) twice."""
    rows = np.arange(len(labels))
    train, rest = train_test_split(rows, test_size=0.2, stratify=labels, random_state=42)
    val, test = train_test_split(rest, test_size=0.5, stratify=labels[rest], random_state=42)
    return {"train": train, "val": val, "test": test}


@pytest.fixture(scope="module")
def fake(tmp_path_factory) -> dict:
    """A copy of the task folder with data/ prepared from a generated covtype.data.gz."""
    root = tmp_path_factory.mktemp("t5")
    ws = copy_task(TASK_DIR, root / "ws")
    (root / "raw").mkdir()
    table = make_covtype_like()
    write_covtype(root / "raw" / "covtype.data.gz", table)
    proc = run_prepare(ws, "--prepare", "--raw-dir", str(root / "raw"), "--data-dir", "data")
    assert proc.returncode == 0, proc.stderr
    return {"ws": ws, "table": table, "log": proc.stdout}


@pytest.fixture(scope="module")
def trained(fake) -> dict:
    """Train the baseline with a tiny config for two epochs; returns its log and checkpoint paths."""
    out = io.StringIO()
    with task_modules(fake["ws"]) as (_, train), contextlib.redirect_stdout(out):
        train.main(dict(train.CONFIG, **TINY))
    return {"log": out.getvalue(), "checkpoints": sorted((fake["ws"] / "checkpoints").glob("*.pt"))}


def test_task_toml_loads():
    task = load_task(TASK_DIR)
    assert (task.id, task.metric, task.direction, task.eval_split) == ("t5", "accuracy", "max", "test")
    assert (task.budget_minutes, task.baseline_score, task.reference_score) == (40, 0.806, 0.969)
    (src,) = task.data
    assert (src.file, src.mirror) == ("covtype.data.gz", "covtype/covtype.data.gz")
    assert src.url == "https://archive.ics.uci.edu/ml/machine-learning-databases/covtype/covtype.data.gz"
    assert src.sha256 == "614360d0257557dd1792834a85a1cdebfadc3c4f30b011d56afee7ffb5b15771"


def test_split_is_stratified_80_10_10(fake):
    table, data = fake["table"], fake["ws"] / "data"
    meta = json.loads((data / "meta.json").read_text(encoding="utf-8"))
    assert meta["counts"] == {"train": 2400, "val": 300, "test": 300}
    assert meta["partial_data"] == [
        "covtype.data.gz: 3,000 of 581,012 rows (not the official file; splits are smaller)"
    ]
    assert "partial data: covtype.data.gz: 3,000 of 581,012 rows" in fake["log"]
    labels = table[:, -1] - 1
    rows = expected_split(labels)
    overall = np.bincount(labels, minlength=7) / len(labels)
    for split, idx in rows.items():
        y = np.load(data / f"{split}_y.npy")
        assert y.dtype == np.int64 and np.array_equal(y, labels[idx])  # the documented split, row for row
        counts = np.bincount(y, minlength=7)
        assert meta["class_counts"][split] == counts.tolist()
        assert np.abs(counts - overall * len(y)).max() <= 2  # stratified: every class in proportion
    assert sorted(np.concatenate(list(rows.values())).tolist()) == list(range(ROWS))  # disjoint, complete


def test_scaler_uses_train_rows_only(fake):
    table, data = fake["table"], fake["ws"] / "data"
    meta = json.loads((data / "meta.json").read_text(encoding="utf-8"))
    rows = expected_split(table[:, -1] - 1)
    raw_train = table[rows["train"], :10].astype(np.float64)
    mean, std = raw_train.mean(axis=0), raw_train.std(axis=0)  # population std, as StandardScaler
    np.testing.assert_allclose(meta["mean"], mean, rtol=1e-12)
    np.testing.assert_allclose(meta["std"], std, rtol=1e-12)
    assert meta["n_continuous"] == 10 and len(meta["features"]) == 54 and meta["features"][0] == "Elevation"
    for split, idx in rows.items():
        x = np.load(data / f"{split}_x.npy")
        assert x.dtype == np.float32 and x.shape == (len(idx), 54)
        np.testing.assert_allclose(x[:, :10], (table[idx, :10] - mean) / std, atol=1e-5)
        assert np.array_equal(x[:, 10:], table[idx, 10:54])  # the one-hot columns are left as 0/1
    train = np.load(data / "train_x.npy").astype(np.float64)
    np.testing.assert_allclose(train[:, :10].mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(train[:, :10].std(axis=0), 1, atol=1e-5)
    assert np.abs(np.load(data / "test_x.npy")[:, :10].mean(axis=0)).max() > 1e-3  # not refitted on test rows


def test_loaders_give_shapes_and_dtypes(fake):
    with task_modules(fake["ws"]) as (prepare, _):
        for split, n in (("train", 2400), ("val", 300), ("test", 300)):
            x, y = prepare.load_split(split)
            assert x.shape == (n, 54) and x.dtype == torch.float32 and y.shape == (n,) and y.dtype == torch.int64
            assert 0 <= int(y.min()) and int(y.max()) <= 6
        with pytest.raises(ValueError, match="unknown split"):
            prepare.load_split("validation")


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda t: t[:, :54], "expected 55 columns"),
        (lambda t: np.where(np.arange(55) == 54, 8, t), "class column must hold 1..7"),
        (lambda t: np.concatenate([t[:, :14], t[:, 14:54] * 0, t[:, 54:]], axis=1), "soil columns must be one-hot"),
        (lambda t: np.where(np.arange(55) == 10, 1, t), "wilderness columns must be one-hot"),
    ],
)
def test_prepare_rejects_bad_raw_data(tmp_path, damage, message):
    (tmp_path / "raw").mkdir()
    write_covtype(tmp_path / "raw" / "covtype.data.gz", damage(make_covtype_like(rows=200)))
    with task_modules(TASK_DIR) as (prepare, _), pytest.raises(ValueError, match=message):
        prepare.prepare(str(tmp_path / "raw"), str(tmp_path / "data"))
    assert not (tmp_path / "data").exists()


def test_prepare_cli_fails_clearly_without_the_file(tmp_path):
    ws = copy_task(TASK_DIR, tmp_path / "ws")
    (tmp_path / "raw").mkdir()
    proc = run_prepare(ws, "--prepare", "--raw-dir", str(tmp_path / "raw"), "--data-dir", "data")
    assert proc.returncode != 0 and "covtype.data.gz does not exist" in proc.stderr
    assert "archive.ics.uci.edu" in proc.stderr


class Fixed(nn.Module):
    """Logits that put the class `pred[i]` first for row i (rows are identified by their order in the batch)."""

    def __init__(self, pred: torch.Tensor, classes: int = 7):
        super().__init__()
        self.pred, self.classes, self.seen = pred, classes, 0

    def forward(self, x):
        out = torch.zeros(len(x), self.classes)
        out[torch.arange(len(x)), self.pred[self.seen : self.seen + len(x)]] = 1.0
        self.seen += len(x)
        return out


def test_accuracy_matches_sklearn(fake):
    with task_modules(fake["ws"]) as (prepare, _):
        _, y = prepare.load_split("test")
        pred = y.clone()
        pred[::3] = (pred[::3] + 1) % 7  # 100 of the 300 rows wrong
        for batch_size in (7, 4096):
            result = prepare.evaluate(Fixed(pred), "test", batch_size=batch_size)
            assert result == {"accuracy": 200 / 300, "n": 300}
            assert result["accuracy"] == accuracy_score(y.numpy(), pred.numpy())
        assert torch.equal(prepare.predict(Fixed(pred), "test", batch_size=64), pred)
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(54, 7))
        got = prepare.evaluate(model, "val")["accuracy"]
        x, yv = prepare.load_split("val")
        assert got == accuracy_score(yv.numpy(), model(x).argmax(1).numpy())
        with pytest.raises(ValueError, match="expected logits of shape"):
            prepare.evaluate(nn.Linear(54, 6), "test")
        with pytest.raises(ValueError, match="non-finite"):
            prepare.evaluate(nan_model(), "test")


def nan_model() -> nn.Module:
    layer = nn.Linear(54, 7)
    nn.init.constant_(layer.bias, float("nan"))
    return layer


def test_baseline_architecture():
    with task_modules(TASK_DIR) as (_, train):
        model = train.build_model(train.CONFIG)
        assert model(torch.randn(5, 54)).shape == (5, 7)
        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        assert [(m.in_features, m.out_features) for m in linears] == [(54, 256), (256, 256), (256, 128), (128, 7)]
        assert sum(isinstance(m, nn.BatchNorm1d) for m in model.modules()) == 3
        assert [m.p for m in model.modules() if isinstance(m, nn.Dropout)] == [0.3, 0.3, 0.3]
        assert (train.CONFIG["batch_size"], train.CONFIG["epochs"], train.CONFIG["lr"]) == (4096, 40, 1e-3)


def test_baseline_trains_logs_and_checkpoints(trained):
    log = trained["log"]
    assert "step 4 | loss " in log and "note: partial data: covtype.data.gz: 3,000 of 581,012 rows" in log
    assert log.count("val_accuracy") == 2  # one validation line per epoch
    assert len(trained["checkpoints"]) == 2  # one checkpoint per epoch
    assert all(p.name.startswith("train_step") for p in trained["checkpoints"])


def test_eval_cli_scores_checkpoint(fake, trained):
    ws, ckpt = fake["ws"], trained["checkpoints"][-1]
    proc = run_prepare(ws, "--eval", str(ckpt.relative_to(ws)), "--device", "cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = last_json(proc)
    assert {k: result[k] for k in ("task", "metric", "direction", "split", "n")} == {
        "task": "t5",
        "metric": "accuracy",
        "direction": "max",
        "split": "test",
        "n": 300,
    }
    assert math.isfinite(result["value"]) and 0 <= result["value"] <= 1
    assert os.path.basename(result["script"]) == "train.py" and result["seconds"] >= 0
    with task_modules(ws) as (prepare, _):
        payload = prepare.load_checkpoint(str(ckpt))
        model = prepare.rebuild_model(payload, "train.py")
        assert result["value"] == prepare.evaluate(model, "test")["accuracy"]
        assert payload["val_score"] == prepare.evaluate(model, "val")["accuracy"]
        _, y = prepare.load_split("test")
        assert result["value"] == accuracy_score(y.numpy(), prepare.predict(model, "test").numpy())


def test_eval_errors_are_one_json_line(fake, trained):
    ws = fake["ws"]
    payload = torch.load(trained["checkpoints"][-1], weights_only=True)
    payload["state_dict"] = {"_orig_mod." + k: v for k, v in payload["state_dict"].items()}
    torch.save(payload, ws / "compiled.pt")
    (ws / "garbage.pt").write_bytes(b"not a checkpoint")
    (ws / "run_nobuild.py").write_text("CONFIG = {}\n", encoding="utf-8")
    cases = [
        (["--eval", "checkpoints/missing.pt"], "does not exist"),
        (["--eval", "garbage.pt"], "cannot read checkpoint"),
        (["--eval", "compiled.pt"], "_orig_mod."),
        (["--eval", str(trained["checkpoints"][-1]), "--script", "run_nobuild.py"], "no build_model"),
    ]
    for args, message in cases:
        proc = run_prepare(ws, *args, "--device", "cpu")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        result = last_json(proc)
        assert result["task"] == "t5" and message in result["error"] and "value" not in result


@pytest.mark.mirror
def test_real_file_splits_464809_58101_58102(real_mirror, tmp_path):
    raw = real_mirror / "covtype" / "covtype.data.gz"
    if not raw.is_file():
        pytest.skip(f"the data mirror has no {raw} (the real file is not in the shared mirror)")
    source = load_task(TASK_DIR).data[0]
    assert hashlib.sha256(raw.read_bytes()).hexdigest() == source.sha256
    ws = copy_task(TASK_DIR, tmp_path / "ws")
    proc = run_prepare(ws, "--prepare", "--raw-dir", str(raw.parent), "--data-dir", "data")
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((ws / "data" / "meta.json").read_text(encoding="utf-8"))
    assert meta["partial_data"] == []
    assert meta["counts"] == {"train": 464809, "val": 58101, "test": 58102}
    total = np.sum([meta["class_counts"][s] for s in ("train", "val", "test")], axis=0)
    assert total.tolist() == [211840, 283301, 35754, 2747, 9493, 17367, 20510]  # covtype.info's class counts
