"""Benchmark: the trusted evaluation against the in-process one at each task's REAL evaluation size (prints a table;
not a test).

    python tests/benchmarks/eval_cost.py [--tasks t2,t3,t5] [--runs 1]

For each task, prepared data of the real evaluation shapes are generated (NOT the real data: the cost depends on
the shapes, not the values): T2 10,000 images 3x64x64 (200 classes), T3 1,449 images 3x224x224 with 224x224
masks, T5 116,203 rows x 54 (test; the scorer also scores a validation split of the same size). The model is a
stand-in of the task's contract with almost no compute (T2 a strided conv + linear, T3 a 1x1 conv to 21 classes,
T5 one linear layer), so the ratio is an UPPER bound of the harness's overhead: a real model adds the same compute
to both sides. Before: ``prepare.py --eval`` (one process that imports the script); after: ``python -I -m
bench.scoring.scorer`` (scorer + sandboxed predictor + a second predictor for the probes), each timed whole.
Target (issue 24): under 2x on a CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

STANDIN = {
    "t2": "nn.Sequential(nn.Conv2d(3, 8, 4, stride=4), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 200))",
    "t3": "nn.Conv2d(3, 21, 1)",
    "t5": "nn.Linear(54, 7)",
}
SIZES = {"t2": "10,000 images 64x64", "t3": "1,449 images 224x224, per-pixel", "t5": "116,203 rows (+ val)"}


def generate(task_id: str, data_dir: Path, rng: np.random.Generator) -> None:
    """The prepared files ``eval_batches`` reads, at the real shapes and dtypes."""
    data_dir.mkdir(parents=True)
    if task_id == "t2":
        splits = {"val": (rng.integers(0, 256, (10_000, 3, 64, 64), dtype=np.uint8), rng.integers(0, 200, 10_000))}
    elif task_id == "t3":
        x = rng.integers(0, 256, (1449, 224, 224, 3), dtype=np.uint8)
        splits = {"val": (x, rng.integers(0, 21, (1449, 224, 224), dtype=np.uint8))}
    else:
        splits = {
            s: (rng.standard_normal((116_203, 54)).astype(np.float32), rng.integers(0, 7, 116_203))
            for s in ("val", "test")
        }
    for split, (x, y) in splits.items():
        np.save(data_dir / f"{split}_x.npy", x)
        np.save(data_dir / f"{split}_y.npy", y.astype(np.int64) if y.dtype != np.uint8 else y)
    (data_dir / "meta.json").write_text("{}")


def timed(argv: list[str], cwd: Path) -> tuple[float, dict]:
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    out = json.loads(lines[-1]) if lines else {}
    if done.returncode != 0 or out.get("error"):
        raise RuntimeError(f"{argv[:4]}: {out.get('error') or done.stderr[-1500:]}")
    return seconds, out


def measure(task_id: str, tmp: Path, runs: int) -> dict:
    import torch
    import torch.nn as nn  # noqa: F401 - the stand-in's expression

    from bench.tasks import get_task

    task = get_task(task_id)
    data_dir = tmp / f"data-{task_id}"
    generate(task_id, data_dir, np.random.default_rng(0))
    ev = tmp / f"eval-{task_id}"
    ev.mkdir()
    for name in task.locked_files:
        shutil.copyfile(task.file(name), ev / name)
    source = f"import torch.nn as nn\n\ndef build_model(config):\n    return {STANDIN[task_id]}\n"
    (ev / "standin.py").write_text(source)
    torch.manual_seed(0)
    model = eval(STANDIN[task_id])
    payload = {"format": "1gc-7rc/checkpoint-v1", "state_dict": model.state_dict(), "config": {}, "step": 0,
               "script": "standin.py", "val_score": 0.0, "metric": task.metric, "time": 0.0}  # fmt: skip
    torch.save(payload, ev / "checkpoint.pt")
    before = [sys.executable, "prepare.py", "--eval", "checkpoint.pt", "--script", "standin.py", "--device", "cpu"]
    before += ["--data-dir", str(data_dir)] + (["--split", task.eval_split] if task.eval_split != "val" else [])
    after = [sys.executable, "-I", "-m", "bench.scoring.scorer", "--task-dir", str(task.folder), "--data-dir"]
    after += [str(data_dir), "--eval-dir", str(ev), "--checkpoint", "checkpoint.pt", "--script", "standin.py"]
    old, new, values = [], [], {}
    for _ in range(runs):
        s, out = timed(before, ev)
        old.append(s)
        values["in_process"] = out.get("value")
        s, out = timed(after, tmp)
        new.append(s)
        values["scorer"] = out.get("value")
    mo, mn = statistics.median(old), statistics.median(new)
    return {"task": task_id, "size": SIZES[task_id], "scorer_s": mn, "in_process_s": mo, "ratio": mn / mo, **values}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="t2,t3,t5")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("BENCH_CACHE_DIR", tempfile.mkdtemp(prefix="eval-cost-cache-"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="eval-cost-") as tmp:
        for task_id in args.tasks.split(","):
            rows.append(measure(task_id, Path(tmp), args.runs))
            r = rows[-1]
            print(f"{task_id}: sandboxed {r['scorer_s']:.2f} s, in-process {r['in_process_s']:.2f} s", flush=True)
    print("\n| task | evaluation size | sandboxed s | in-process s | ratio | same value |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        same = r["scorer"] is not None and abs(r["scorer"] - r["in_process"]) <= 1e-6 * max(1, abs(r["in_process"]))
        print(f"| {r['task']} | {r['size']} | {r['scorer_s']:.2f} | {r['in_process_s']:.2f} | {r['ratio']:.2f}x | "
              f"{'yes' if same else 'NO'} |")  # fmt: skip


if __name__ == "__main__":
    main()
