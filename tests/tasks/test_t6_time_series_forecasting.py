"""Task T6 (ETTh1): preparation, windows, the MSE metric, the DLinear baseline and prepare.py --eval.

Runs on a generated ETTh1.csv with the exact real schema (date + 7 channels, 17,420 hourly rows; made in
tests/tasks/smalldata.py); the tests marked `mirror` use the real file from BENCH_DATA_MIRROR. What every task
promises (the checkpoint payload, the --eval JSON, strict loading, errors as JSON, val_score = the evaluator's score)
is checked in test_conformance.py.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

from bench.tasks import load_task
from tests.tasks.smalldata import ETT_COLUMNS as COLUMNS
from tests.tasks.taskfolder import copy_task, last_json, run_prepare, task_modules

TASK_DIR = Path(__file__).resolve().parents[2] / "tasks" / "t6_time_series_forecasting"


def test_task_toml_loads():
    task = load_task(TASK_DIR)
    assert (task.id, task.metric, task.direction, task.eval_split) == ("t6", "mse", "min", "test")
    assert (task.budget_minutes, task.baseline_score, task.reference_score) == (40, 0.384, 0.375)
    (src,) = task.data
    assert (src.file, src.mirror, src.size) == ("ETTh1.csv", "ETTh1/ETTh1.csv", 2589657)
    assert src.sha256 == "f18de3ad269cef59bb07b5438d79bb3042d3be49bdeecf01c1cd6d29695ee066"
    assert src.md5 == "8381763947c85f4be6ac456c508460d6"


def test_prepare_normalises_with_train_statistics(fake):
    values, data = fake["values"], fake["ws"] / "data"
    meta = json.loads((data / "meta.json").read_text(encoding="utf-8"))
    assert meta["columns"] == COLUMNS and (meta["seq_len"], meta["pred_len"]) == (336, 96)
    assert meta["borders"] == {"train": [0, 8640], "val": [8304, 11520], "test": [11184, 14400]}
    assert meta["windows"] == {"train": 8209, "val": 2785, "test": 2785}
    assert meta["first_timestamp"]["test"] == "2017-10-10 00:00:00"  # row 11,184 of an hourly series
    mean, std = values[:8640].mean(axis=0), values[:8640].std(axis=0)  # population std, as StandardScaler
    np.testing.assert_allclose(meta["mean"], mean, rtol=1e-12)
    np.testing.assert_allclose(meta["std"], std, rtol=1e-12)
    for split, (start, end) in meta["borders"].items():
        arr = np.load(data / f"{split}.npy")
        assert arr.dtype == np.float32 and arr.shape == (end - start, 7)
        np.testing.assert_allclose(arr, (values[start:end] - mean) / std, atol=1e-5)
    train = np.load(data / "train.npy").astype(np.float64)
    np.testing.assert_allclose(train.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(train.std(axis=0), 1, atol=1e-5)


def test_prepare_rejects_wrong_schema(tmp_path):
    ws = copy_task(TASK_DIR, tmp_path / "ws")
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "ETTh1.csv").write_text("date,HUFL,OT\n2016-07-01 00:00:00,1.0,2.0\n", encoding="utf-8")
    proc = run_prepare(ws, "--prepare", "--raw-dir", str(tmp_path / "raw"), "--data-dir", "data")
    assert proc.returncode == 1 and "expected columns ['date', 'HUFL'," in proc.stderr


def test_windows_are_aligned(fake):
    with task_modules(fake["ws"]) as (prepare, _):
        for split, n in (("train", 8209), ("val", 2785), ("test", 2785)):
            series = prepare.load_series(split)
            x, y = prepare.load_split(split)
            assert x.shape == (n, 336, 7) and y.shape == (n, 96, 7) and x.dtype == y.dtype == torch.float32
            for i in (0, 1, n - 1):
                assert torch.equal(x[i], series[i : i + 336]) and torch.equal(y[i], series[i + 336 : i + 432])
            assert i + 432 == len(series)  # the last window ends on the last row
        # the first test target is row 11,520 of the file: the first row after the val months
        _, y = prepare.load_split("test")
        mean, std = np.array(prepare.load_meta()["mean"]), np.array(prepare.load_meta()["std"])
        np.testing.assert_allclose(y[0, 0].double().numpy() * std + mean, fake["values"][11520], atol=1e-4)


class Constant(nn.Module):
    """Predicts the same value everywhere, with the right shape."""

    def __init__(self, value: float = 0.0, steps: int = 96):
        super().__init__()
        self.value, self.steps = value, steps

    def forward(self, x):
        return torch.full((x.shape[0], self.steps, x.shape[2]), self.value)


def test_metric_matches_hand_computation(tmp_path):
    with task_modules(TASK_DIR) as (prepare, _):
        # A test segment of 433 rows holds exactly 2 windows; only two entries are non-zero.
        series = np.zeros((433, 7), dtype=np.float32)
        series[336, 0] = 2.0  # first step of window 0's target (not in window 1's target)
        series[432, 6] = 1.0  # last step of window 1's target (not in window 0's target)
        np.save(tmp_path / "test.npy", series)
        expected_zero = (2.0**2 + 1.0**2) / (2 * 96 * 7)  # = 5 / 1344
        expected_half = ((2.0 - 0.5) ** 2 + (1.0 - 0.5) ** 2 + (2 * 96 * 7 - 2) * 0.25) / (2 * 96 * 7)
        for batch_size in (1, 256):
            result = prepare.evaluate(Constant(0.0), "test", str(tmp_path), batch_size=batch_size)
            assert result["n"] == 2 and result["mse"] == pytest.approx(expected_zero, rel=1e-12)
            result = prepare.evaluate(Constant(0.5), "test", str(tmp_path), batch_size=batch_size)
            assert result["mse"] == pytest.approx(expected_half, rel=1e-12)
        with pytest.raises(ValueError, match="expected a tensor of shape"):
            prepare.evaluate(Constant(0.0, steps=48), "test", str(tmp_path))
        with pytest.raises(ValueError, match="non-finite"):
            prepare.evaluate(Constant(float("nan")), "test", str(tmp_path))


def test_moving_average_replicates_the_ends():
    with task_modules(TASK_DIR) as (_, train):
        x = torch.randn(3, 40, 7, dtype=torch.float64)
        got = train.MovingAverage(25)(x)
        padded = torch.cat([x[:, :1].repeat(1, 12, 1), x, x[:, -1:].repeat(1, 12, 1)], dim=1)
        want = torch.stack([padded[:, t : t + 25].mean(dim=1) for t in range(40)], dim=1)
        torch.testing.assert_close(got, want)
        model = train.build_model(train.CONFIG)
        assert model(torch.randn(2, 336, 7)).shape == (2, 96, 7)
        assert sum(p.numel() for p in model.parameters()) == 2 * (336 * 96 + 96)  # two Linear(336 -> 96), shared


def test_baseline_trains_logs_and_checkpoints(trained):
    log = trained["log"]
    assert "step 2 | loss " in log
    assert log.count("val_mse") == 2  # one validation line per epoch
    assert len(trained["checkpoints"]) == 2  # one checkpoint per epoch
    assert all(p.name.startswith("train_step") for p in trained["checkpoints"])


def test_official_mse_is_recomputed_from_the_test_segment(small, fake):
    """The --eval value of the trained baseline, recomputed with numpy: every window of data/test.npy at stride 1
    (336 rows in, the next 96 out), the mean squared error over windows, steps and channels."""
    run = small.official(TASK_DIR.name)
    result = last_json(run["proc"])
    assert result["n"] == 2785
    payload = torch.load(run["checkpoint"], weights_only=True)
    with task_modules(fake["ws"]) as (_, train):
        model = train.build_model(payload["config"])
    model.load_state_dict(payload["state_dict"])
    model.eval()
    series = np.load(fake["ws"] / "data" / "test.npy")
    windows = np.lib.stride_tricks.sliding_window_view(series, 336 + 96, axis=0).transpose(0, 2, 1)  # [2785, 432, 7]
    assert windows.shape == (2785, 432, 7)
    with torch.no_grad():
        pred = model(torch.from_numpy(np.ascontiguousarray(windows[:, :336]))).double().numpy()
    want = np.mean((pred - windows[:, 336:]) ** 2)
    assert result["value"] == pytest.approx(want, rel=1e-6)  # float32 predictions batched differently: a few ulps


def mirror_file() -> Path:
    mirror = os.environ.get("BENCH_DATA_MIRROR")
    if not mirror:
        pytest.skip("set BENCH_DATA_MIRROR=... to run against the real data")
    return Path(mirror) / "ETTh1" / "ETTh1.csv"


@pytest.mark.mirror
def test_real_data_split_and_window_counts(tmp_path):
    raw = mirror_file()
    source = load_task(TASK_DIR).data[0]
    blob = raw.read_bytes()
    assert len(blob) == source.size and hashlib.sha256(blob).hexdigest() == source.sha256
    assert hashlib.md5(blob).hexdigest() == source.md5
    ws = copy_task(TASK_DIR, tmp_path / "ws")
    proc = run_prepare(ws, "--prepare", "--raw-dir", str(raw.parent), "--data-dir", "data")
    assert proc.returncode == 0, proc.stderr
    with task_modules(ws) as (prepare, _):
        counts = {split: len(prepare.load_split(split)[0]) for split in ("train", "val", "test")}
        assert counts == {"train": 8209, "val": 2785, "test": 2785}
        meta = prepare.load_meta()
    assert meta["first_timestamp"] == {
        "train": "2016-07-01 00:00:00",
        "val": "2017-06-12 00:00:00",  # 336 hours before the first val target, 2017-06-26 00:00
        "test": "2017-10-10 00:00:00",  # 336 hours before the first test target, 2017-10-24 00:00
    }
    with open(raw, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))[1:]
    values = np.array([[float(v) for v in r[1:]] for r in rows])
    assert values.shape == (17420, 7)
    np.testing.assert_allclose(meta["mean"], values[:8640].mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(meta["std"], values[:8640].std(axis=0), rtol=1e-12)
    assert meta["mean"][6] == pytest.approx(17.12826, abs=1e-4)  # OT, the oil temperature, over the train year
