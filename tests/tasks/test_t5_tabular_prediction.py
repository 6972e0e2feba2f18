"""Task T5 (Forest Cover Type): preparation, the stratified split, scaling, the accuracy metric through the
harness's scorer, the held-out test split, the MLP baseline and prepare.py --eval.

Runs on GENERATED data with the exact schema of covtype.data.gz (gzip CSV, no header, 55 integers a row:
10 continuous, 4 wilderness and 40 soil one-hot columns, class 1..7), 3,000 rows: not the real data, and no
score on it means anything (made in tests/tasks/smalldata.py). The data mirror has no copy of the real file; the
test marked `mirror` runs only where one is placed at covtype/covtype.data.gz. What every task promises (the
checkpoint payload, the --eval JSON, strict loading, errors as JSON, val_score = the evaluator's score) is checked in
test_conformance.py.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
from sklearn.metrics import accuracy_score
from sklearn.model_selection import train_test_split

from bench.tasks import load_task
from tests.tasks.smalldata import ROWS, make_covtype_like, write_covtype
from tests.tasks.taskfolder import (
    copy_task,
    expected_probes,
    last_json,
    run_prepare,
    run_scorer,
    stage_eval,
    task_modules,
    with_feed,
)

TASK_DIR = Path(__file__).resolve().parents[2] / "tasks" / "t5_tabular_prediction"


def expected_split(labels: np.ndarray) -> dict[str, np.ndarray]:
    """The documented split, recomputed here: train_test_split(stratify, random_state=42) twice."""
    rows = np.arange(len(labels))
    train, rest = train_test_split(rows, test_size=0.2, stratify=labels, random_state=42)
    val, test = train_test_split(rest, test_size=0.5, stratify=labels[rest], random_state=42)
    return {"train": train, "val": val, "test": test}


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
    assert "partial data: covtype.data.gz: 3,000 of 581,012 rows" in fake["stdout"]
    labels = table[:, -1] - 1
    rows = expected_split(labels)
    overall = np.bincount(labels, minlength=7) / len(labels)
    for split, idx in rows.items():
        y = np.load(data / f"{split}_y.npy")
        assert y.dtype == np.int64 and np.array_equal(y, labels[idx])  # the documented split, row for row
        counts = np.bincount(y, minlength=7)
        assert meta["class_counts"].get(split) == (None if split == "test" else counts.tolist())  # test: held out
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
    assert proc.returncode == 1 and "covtype.data.gz does not exist" in proc.stderr
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
        feed = prepare.eval_batches("test", batch_size=64)
        logits = [prepare.forward(Fixed(pred[i * 64 :]), {"x": torch.from_numpy(x["x"])}) for i, (x, _) in
                  enumerate(feed)]  # fmt: skip
        assert torch.equal(torch.cat(logits).argmax(1), pred) and [len(y) for _, y in feed] == [64] * 4 + [44]
        assert prepare.score([v.numpy() for v in logits], [y for _, y in feed]) == {"accuracy": 200 / 300, "n": 300}
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(54, 7))
        got = prepare.evaluate(model, "val")["accuracy"]
        x, yv = prepare.load_split("val")
        assert got == accuracy_score(yv.numpy(), model(x).argmax(1).numpy())
        with pytest.raises(ValueError, match="expected logits of shape"):
            prepare.evaluate(nn.Linear(54, 6), "test")
        with pytest.raises(ValueError, match="non-finite"):
            prepare.evaluate(nan_model(), "test")
        with pytest.raises(ValueError, match=r"expected \(300, 7\)"):
            prepare.score([np.zeros((300, 6), dtype=np.float32)], [y.numpy()])
        assert prepare.FEED_BATCH_SIZE == 4096


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


def test_official_accuracy_is_recomputed_with_sklearn(small, fake):
    """The --eval value of the trained baseline, recomputed here: the model's argmax on the 300 prepared test rows
    against the generated classes of those rows (the documented split), by sklearn's accuracy_score."""
    run = small.official(TASK_DIR.name)
    result = last_json(run["proc"])
    assert result["n"] == 300
    payload = torch.load(run["checkpoint"], weights_only=True)
    with task_modules(fake["ws"]) as (_, train):
        model = train.build_model(payload["config"])
    model.load_state_dict(payload["state_dict"])
    model.eval()
    with torch.no_grad():
        pred = model(torch.from_numpy(np.load(fake["ws"] / "data" / "test_x.npy"))).argmax(dim=1).numpy()
    y = fake["table"][expected_split(fake["table"][:, -1] - 1)["test"], -1] - 1
    assert result["value"] == accuracy_score(y, pred)


# ---------------------------------------------------------------------------
# The official path: the harness's scorer, the held-out test split
# ---------------------------------------------------------------------------


def old_evaluate(prepare, model: nn.Module, split: str = "test", batch_size: int = 4096) -> float:
    """The evaluation before the harness fed the rows (prepare.predict + evaluate at commit 24e94a6, kept here to
    compare): model(x) over the split in batches of 4,096 rows in float32, the argmax, the fraction correct."""
    x, y = prepare.load_split(split)
    model.eval()
    with torch.no_grad():
        pred = torch.cat([model(x[i : i + batch_size]).argmax(dim=1) for i in range(0, len(x), batch_size)])
    return int((pred == y).sum()) / len(y)


@pytest.mark.parametrize("feed", [4096, 64])
def test_official_accuracy_through_the_scorer(small, fake, tmp_path, feed):
    """The real scorer on a staged folder (original prepare.py, train.py, the trained baseline's checkpoint): its
    value is sklearn's accuracy_score of the model's argmax on the test rows computed here (one batch), the old
    evaluation's value and `prepare.py --eval`'s; the baseline passes the probes. feed=64: the task folder with
    FEED_BATCH_SIZE = 64 (5 batches, the last one shorter)."""
    ckpt = small.trained(TASK_DIR.name)["checkpoints"][-1]
    task_dir = with_feed(TASK_DIR, tmp_path / "task", feed)
    code, result = run_scorer(task_dir, fake["ws"] / "data", stage_eval(tmp_path / "eval", TASK_DIR, ckpt))
    assert code == 0 and "error" not in result, result
    assert (result["task"], result["metric"], result["split"], result["n"]) == ("t5", "accuracy", "test", 300)
    assert result["checks"] == expected_probes(math.ceil(300 / feed))  # 300 rows: 1 batch at feed=4096, 5 at 64

    payload = torch.load(ckpt, weights_only=True)
    with task_modules(fake["ws"]) as (prepare, train):
        model = train.build_model(payload["config"])
        model.load_state_dict(payload["state_dict"])
        model.eval()
        old = old_evaluate(prepare, model)
    x = torch.from_numpy(np.load(fake["ws"] / "data" / "test_x.npy"))  # the prepared test rows, in one batch
    with torch.no_grad():
        pred = model(x).argmax(dim=1).numpy()
    y = fake["table"][expected_split(fake["table"][:, -1] - 1)["test"], -1] - 1  # the generated classes
    assert result["value"] == accuracy_score(y, pred) == old
    assert result["value"] == last_json(small.official(TASK_DIR.name)["proc"])["value"]


PEEK = """
import torch
import torch.nn as nn

CONFIG = {"peek": %s}


class Linear(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.peek = config["peek"]
        self.layer = nn.Linear(54, 7)

    def forward(self, x):
        logits = self.layer(x)
        if self.peek:  # a row's logits borrow from the row before it in the batch
            logits = logits + 0.5 * logits.roll(1, dims=0)
        return logits


def build_model(config):
    return Linear(config)
"""


@pytest.mark.parametrize("peek", [False, True])
def test_scorer_flags_a_model_whose_logits_depend_on_the_batch(fake, tmp_path, peek):
    """A forward that mixes the rows of a batch breaks the contract: the scorer's batch-independence probe says so
    (error + violation); the same model without the mixing passes."""
    torch.manual_seed(0)
    state = nn.Linear(54, 7).state_dict()
    torch.save({"state_dict": {f"layer.{k}": v for k, v in state.items()}, "config": {"peek": peek}},
               tmp_path / "peek.pt")  # fmt: skip
    eval_dir = stage_eval(tmp_path / "eval", TASK_DIR, tmp_path / "peek.pt", {"run_peek.py": PEEK % peek})
    code, result = run_scorer(TASK_DIR, fake["ws"] / "data", eval_dir, "run_peek.py")
    if peek:
        assert code == 1 and "value" not in result, result
        assert "changed with the other samples in its batch" in result["violation"] == result["error"], result
    else:
        assert code == 0 and result["checks"] == expected_probes(1), result  # 300 rows: one feed batch
        x, y = np.load(fake["ws"] / "data" / "test_x.npy"), np.load(fake["ws"] / "data" / "test_y.npy")
        layer = nn.Linear(54, 7)
        layer.load_state_dict(state)
        with torch.no_grad():
            assert result["value"] == accuracy_score(y, layer(torch.from_numpy(x)).argmax(1).numpy())


def test_workspace_holds_no_test_rows_or_labels(small, fake, tmp_path):
    """bench.pipeline.workspace.create copies the prepared data without test_x.npy and test_y.npy (task.toml's
    held_out): no file under data/ holds a test row or label, and `prepare.py --eval` there checks on val."""
    from bench.pipeline.workspace import create

    task = load_task(TASK_DIR)
    assert task.held_out == ("test_x.npy", "test_y.npy")
    ws = create(task, fake["ws"] / "data", campaign="c", agent="a", repeat=0, root=tmp_path).path
    files = sorted(p.relative_to(ws / "data").as_posix() for p in (ws / "data").rglob("*") if p.is_file())
    assert files == ["meta.json", "train_x.npy", "train_y.npy", "val_x.npy", "val_y.npy"]
    test_x, test_y = np.load(fake["ws"] / "data" / "test_x.npy"), np.load(fake["ws"] / "data" / "test_y.npy")
    test_rows = {row.tobytes() for row in test_x}
    for split, n in (("train", 2400), ("val", 300)):  # every array: its own split's rows, no test row
        x, y = np.load(ws / "data" / f"{split}_x.npy"), np.load(ws / "data" / f"{split}_y.npy")
        assert len(x) == len(y) == n and not any(row.tobytes() in test_rows for row in x)
        assert not np.array_equal(y, test_y)
    meta = json.loads((ws / "data" / "meta.json").read_text(encoding="utf-8"))
    assert sorted(meta["class_counts"]) == ["train", "val"] and meta["held_out"] == list(task.held_out)
    with task_modules(ws) as (prepare, _):
        assert not prepare.has_test_split()
        for call in (prepare.load_split, prepare.eval_batches):
            with pytest.raises(FileNotFoundError, match="the test split is held out"):
                call("test")
        ckpt = small.trained(TASK_DIR.name)["checkpoints"][-1]
        model = prepare.rebuild_model(torch.load(ckpt, weights_only=True), str(TASK_DIR / "train.py"))
        want = prepare.evaluate(model, "val")["accuracy"]
    shutil.copyfile(ckpt, ws / "checkpoints" / ckpt.name)
    proc = run_prepare(ws, "--eval", f"checkpoints/{ckpt.name}", "--device", "cpu")
    result = last_json(proc)
    assert proc.returncode == 0 and (result["split"], result["value"], result["n"]) == ("val", want, 300), result


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
    test = np.bincount(np.load(ws / "data" / "test_y.npy"), minlength=7)  # the test counts: not in meta.json
    total = np.sum([meta["class_counts"]["train"], meta["class_counts"]["val"], test], axis=0)
    assert total.tolist() == [211840, 283301, 35754, 2747, 9493, 17367, 20510]  # covtype.info's class counts
