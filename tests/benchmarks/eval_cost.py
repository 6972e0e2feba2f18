"""Benchmark: the trusted evaluation against the in-process one at each task's REAL evaluation size (prints a table;
not a test).

    python tests/benchmarks/eval_cost.py [--tasks t1,t2,t3,t4,t5,t6,t7] [--runs 1] [--data-mirror DIR] [--smoke]

For each task, the prepared data of the real evaluation size. From the data mirror (``--data-mirror`` or
$BENCH_DATA_MIRROR) where it holds the real files: T1 TinyShakespeare's val split (111,540 characters, 435 blocks
of up to 256), T4 all 41,127 ogbg-molhiv molecules featurised by the task's own prepare.py (the scaffold split it
recomputes without OGB's split files: 4,113 test + 4,113 valid graphs), T6 ETTh1 (2,785 test + 2,785 val windows),
T7 AG News test.csv encoded by the task's own encode() (7,600 texts; the val split is carved from train.csv, which
the mirror lacks: 6,000 test.csv texts stand in for it). Generated where the mirror does not hold them (NOT the
real data: the cost depends on the shapes, not the values): T2 10,000 images 3x64x64 (200 classes), T3 1,449
images 3x224x224 with 224x224 masks, T5 116,203 rows x 54 (test; the scorer also scores a validation split of the
same size), and T4 and T7 when no mirror is given (graphs and texts of the real sizes); T1 and T6 need the mirror
(sandbox_cost.py measures them with a trained baseline checkpoint instead of a stand-in). The model is a stand-in of
the task's contract with almost no compute (T1 a bigram table, T2 a strided conv + linear, T3 a 1x1 conv to 21
classes, T4 a per-atom score summed per molecule, T5 one linear layer, T6 one linear map over time, T7 a character
embedding + linear), so the ratio is an UPPER bound of the harness's overhead: a real model adds the same compute
to both sides. The scorer also scores the validation split where the official split is another (T4-T7); the
in-process evaluation does not. Before: ``prepare.py --eval`` (one process that imports the script); after:
``python -I -m bench.scoring.scorer`` (scorer + sandboxed predictor + a second predictor for the probes), each
timed whole, the two alternating run by run (one figure line per task: ``eval_cost.<task>.ratio``).
``--smoke``: one run, the generated data cut to a few samples (the mirror's data as it is: those evaluations take
seconds), to check that the script still works.
Target: under 2x on a CPU.
"""

from __future__ import annotations

import argparse
import importlib.util
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

from tests.benchmarks.figures import Span, add_smoke, ratio, seconds  # noqa: E402

STANDIN = {
    "t1": "nn.Embedding(65, 65)",
    "t2": "nn.Sequential(nn.Conv2d(3, 8, 4, stride=4), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 200))",
    "t3": "nn.Conv2d(3, 21, 1)",
    "t4": "Molecules()",
    "t5": "nn.Linear(54, 7)",
    "t6": "OverTime()",
    "t7": "nn.Sequential(nn.Embedding(128, 4), nn.Flatten(), nn.Linear(4 * 1014, 4))",
}
# Modules the expressions above need (the stand-in script defines them before build_model).
CLASSES = {
    "t4": """
class Molecules(nn.Module):
    def __init__(self):
        super().__init__()
        self.atom = nn.Embedding(128, 1)

    def forward(self, batch):
        per_atom = self.atom(batch.x[:, 0]).squeeze(1)
        return torch.zeros(batch.num_graphs).index_add_(0, batch.batch, per_atom)
""",
    "t6": """
class OverTime(nn.Module):
    def __init__(self):
        super().__init__()
        self.map = nn.Linear(336, 96)

    def forward(self, x):
        return self.map(x.transpose(1, 2)).transpose(1, 2)
""",
}
SIZES = {
    "t1": "111,540 characters (435 blocks of up to 256)",
    "t2": "10,000 images 64x64",
    "t3": "1,449 images 224x224, per-pixel",
    "t4": "4,113 graphs (+ 4,113 val)",
    "t5": "116,203 rows (+ val)",
    "t6": "2,785 windows 336->96 x 7 (+ 2,785 val)",
    "t7": "7,600 texts x 1,014 chars (+ 6,000 val)",
}
MIRRORED = {"t1": "tinyshakespeare", "t4": "ogbg_molhiv/mapping", "t6": "ETTh1", "t7": "ag_news_csv"}


def generate(
    task_id: str, data_dir: Path, rng: np.random.Generator, mirror: Path | None = None, cap: int | None = None
) -> str:
    """The prepared files ``eval_batches`` reads, at the real shapes and dtypes; returns where they came from.
    ``cap`` (the smoke mode) cuts each generated split to that many samples."""
    if task_id in MIRRORED and mirror is not None and (mirror / MIRRORED[task_id]).is_dir():
        return from_mirror(task_id, data_dir, mirror / MIRRORED[task_id])
    if task_id in ("t1", "t6"):
        raise SystemExit(f"{task_id}: needs the data mirror (--data-mirror or BENCH_DATA_MIRROR)")
    data_dir.mkdir(parents=True)

    def n(real: int) -> int:
        return min(real, cap or real)

    if task_id == "t4":
        generated_graphs(data_dir, rng, n(4113))
        return "generated"
    if task_id == "t2":
        splits = {
            "val": (rng.integers(0, 256, (n(10_000), 3, 64, 64), dtype=np.uint8), rng.integers(0, 200, n(10_000)))
        }
    elif task_id == "t3":
        x = rng.integers(0, 256, (n(1449), 224, 224, 3), dtype=np.uint8)
        splits = {"val": (x, rng.integers(0, 21, (n(1449), 224, 224), dtype=np.uint8))}
    elif task_id == "t7":  # texts of 100..1,014 ASCII characters, zero-padded as encode() pads them
        splits = {}
        for split, count in (("test", n(7600)), ("val", n(6000))):
            x = rng.integers(32, 127, (count, 1014), dtype=np.uint8)
            x[np.arange(1014) >= rng.integers(100, 1015, count)[:, None]] = 0
            splits[split] = (x, rng.integers(0, 4, count))
    else:
        splits = {
            s: (rng.standard_normal((n(116_203), 54)).astype(np.float32), rng.integers(0, 7, n(116_203)))
            for s in ("val", "test")
        }
    for split, (x, y) in splits.items():
        np.save(data_dir / f"{split}_x.npy", x)
        np.save(data_dir / f"{split}_y.npy", y.astype(np.int64) if y.dtype != np.uint8 else y)
    (data_dir / "meta.json").write_text("{}")
    return "generated"


def from_mirror(task_id: str, data_dir: Path, raw: Path) -> str:
    """The real data: T1, T4, T6 prepared by the task's own prepare.py; T7's test.csv encoded by its encode()."""
    from bench.tasks import get_task

    folder = get_task(task_id).folder
    if task_id != "t7":
        argv = [sys.executable, "-B", "prepare.py", "--prepare", "--raw-dir", str(raw), "--data-dir", str(data_dir)]
        done = subprocess.run(argv, cwd=folder, capture_output=True, text=True)  # T4's progress lines: not shown
        if done.returncode != 0:
            raise RuntimeError(f"{task_id}: prepare.py --prepare failed: {done.stderr[-1500:]}")
        return "real (mirror)"
    spec = importlib.util.spec_from_file_location("_t7_prepare", folder / "prepare.py")
    t7 = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(folder))  # prepare.py imports the locked helpers beside it (task_helpers.py), as in a run
    try:
        spec.loader.exec_module(t7)
    finally:
        sys.path.remove(str(folder))
    texts, labels = t7.read_csv(str(raw / "test.csv"))
    x = np.stack([t7.encode(t) for t in texts])
    data_dir.mkdir(parents=True)
    for split, rows in (("test", slice(None)), ("val", slice(0, 6000))):  # val: a stand-in for train.csv's carve
        np.save(data_dir / f"{split}_x.npy", x[rows])
        np.save(data_dir / f"{split}_y.npy", labels[rows])
    (data_dir / "meta.json").write_text("{}")
    return "real test.csv (mirror)"


def generated_graphs(data_dir: Path, rng: np.random.Generator, per_split: int = 4113) -> None:
    """4,113 valid + 4,113 test molecules of ogbg-molhiv's sizes (25.5 atoms and 27.5 bonds, each bond as two
    directed edges, on average) in prepare.py's arrays: a chain of atoms plus ring closures, random features."""
    n_val, n_test = per_split, per_split
    g = n_val + n_test
    nodes = np.clip(rng.gamma(4.0, 25.5 / 4.0, g).round(), 2, 222).astype(np.int64)
    edge_parts, edges = [], np.zeros(g, dtype=np.int64)
    for k, n in enumerate(nodes):
        src = np.arange(n - 1)
        dst = src + 1
        rings = rng.integers(0, n, (min(3, n // 6), 2))  # ring closures between two random atoms
        src, dst = np.concatenate([src, rings[:, 0]]), np.concatenate([dst, rings[:, 1]])
        pair = np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])])
        edge_parts.append(pair)
        edges[k] = pair.shape[1]
    dims = ([119, 5, 12, 12, 10, 6, 6, 2, 2], [5, 6, 2])  # OGB's atom and bond feature vocabularies
    node_feat = np.stack([rng.integers(0, d, nodes.sum()) for d in dims[0]], axis=1).astype(np.uint8)
    edge_feat = np.stack([rng.integers(0, d, edges.sum()) for d in dims[1]], axis=1).astype(np.uint8)
    labels = (rng.random(g) < 0.035).astype(np.uint8)  # 3.5 % active, as the real data
    labels[[0, n_val]] = 1  # both classes in both splits: the AUROC is defined
    split = {"train": np.zeros(0, dtype=np.int64), "valid": np.arange(n_val), "test": np.arange(n_val, g)}
    arrays = {"node_feat": node_feat, "edge_index": np.concatenate(edge_parts, axis=1), "edge_feat": edge_feat,
              "num_nodes": nodes, "num_edges": edges}  # fmt: skip
    for name, a in arrays.items():
        np.save(data_dir / f"{name}.npy", a)
    shown = labels.astype(np.int8)
    shown[split["test"]] = -1
    np.save(data_dir / "labels.npy", shown)
    np.save(data_dir / "labels_test.npy", labels[split["test"]])
    for name, ids in split.items():
        np.save(data_dir / f"split_{name}.npy", ids.astype(np.int64))
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


def measure(task_id: str, tmp: Path, runs: int, mirror: Path | None, cap: int | None = None) -> dict:
    import torch

    from bench.tasks import get_task

    task = get_task(task_id)
    data_dir = tmp / f"data-{task_id}"
    source = generate(task_id, data_dir, np.random.default_rng(0), mirror, cap)
    ev = tmp / f"eval-{task_id}"
    ev.mkdir()
    for name in task.locked_files:
        shutil.copyfile(task.file(name), ev / name)
    script = "import torch\nimport torch.nn as nn\n" + CLASSES.get(task_id, "")
    script += f"\n\ndef build_model(config):\n    return {STANDIN[task_id]}\n"
    (ev / "standin.py").write_text(script)
    space: dict = {}
    exec(compile(script, "standin.py", "exec"), space)  # the model the checkpoint holds, as build_model makes it
    torch.manual_seed(0)
    model = space["build_model"]({})
    payload = {"format": "1gc-7rc/checkpoint-v1", "state_dict": model.state_dict(), "config": {}, "step": 0,
               "script": "standin.py", "val_score": 0.0, "metric": task.metric, "time": 0.0}  # fmt: skip
    torch.save(payload, ev / "checkpoint.pt")
    before = [sys.executable, "prepare.py", "--eval", "checkpoint.pt", "--script", "standin.py", "--device", "cpu"]
    before += ["--data-dir", str(data_dir)] + (["--split", task.eval_split] if task.eval_split != "val" else [])
    after = [sys.executable, "-I", "-m", "bench.scoring.scorer", "--task-dir", str(task.folder), "--data-dir"]
    after += [str(data_dir), "--eval-dir", str(ev), "--checkpoint", "checkpoint.pt", "--script", "standin.py"]
    old, new, values = [], [], {}
    span = Span()
    for _ in range(runs):
        s, out = timed(before, ev)
        old.append(s)
        values["in_process"] = out.get("value")
        s, out = timed(after, tmp)
        new.append(s)
        values["scorer"] = out.get("value")
    mo, mn = statistics.median(old), statistics.median(new)
    size = f"at most {cap} samples (smoke)" if cap and source == "generated" else SIZES[task_id]
    sizes = {"task": task_id, "size": size, "data": source}
    what = f"{task_id.upper()}: sandboxed {mn:.2f} s vs in-process {mo:.2f} s, median of {runs}, {sizes['size']}"
    span.figure(f"eval_cost.{task_id}.ratio", ratio(mn / mo), f"{what}, {source} data")
    span.figure(f"eval_cost.{task_id}.sandboxed", seconds(mn), f"{what}, {source} data")
    span.figure(f"eval_cost.{task_id}.in_process", seconds(mo), f"{what}, {source} data")
    return {**sizes, "scorer_s": mn, "in_process_s": mo, "ratio": mn / mo, **values}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="t1,t2,t3,t4,t5,t6,t7")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--data-mirror", type=Path, default=os.environ.get("BENCH_DATA_MIRROR") or None)
    add_smoke(parser)
    args = parser.parse_args()
    cap = 16 if args.smoke else None
    runs = 1 if args.smoke else args.runs
    os.environ.setdefault("BENCH_CACHE_DIR", tempfile.mkdtemp(prefix="eval-cost-cache-"))
    rows, load = [], [os.getloadavg()[0]]  # the figures depend on what else runs: printed with them
    with tempfile.TemporaryDirectory(prefix="eval-cost-") as tmp:
        for task_id in args.tasks.split(","):
            rows.append(measure(task_id, Path(tmp), runs, args.data_mirror, cap))
            r = rows[-1]
            print(f"{task_id}: sandboxed {r['scorer_s']:.2f} s, in-process {r['in_process_s']:.2f} s", flush=True)
    load.append(os.getloadavg()[0])
    print(f"\nload average (1 min) {load[0]:.2f} at the start, {load[1]:.2f} at the end, on {os.cpu_count()} CPUs")
    print("\n| task | evaluation size | data | sandboxed s | in-process s | ratio | same value |")
    print("|---|---|---|---|---|---|---|")
    differ = []
    for r in rows:
        same = r["scorer"] is not None and abs(r["scorer"] - r["in_process"]) <= 1e-6 * max(1, abs(r["in_process"]))
        differ += [] if same else [r["task"]]
        print(f"| {r['task']} | {r['size']} | {r['data']} | {r['scorer_s']:.2f} | {r['in_process_s']:.2f} | "
              f"{r['ratio']:.2f}x | {'yes' if same else 'NO'} |")  # fmt: skip
    if differ:  # a cost is only comparable when both sides computed the same score
        print(f"the sandboxed and in-process values differ for {', '.join(differ)}", file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
