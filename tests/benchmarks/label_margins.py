"""Benchmark: the val/test gap of each task's honest baselines, for the margins of task.toml's ``[scoring]``
(``test_val_error_ratio``), and the cost of the scorer's scan for its targets (prints figures and a table; not a
test).

    python tests/benchmarks/label_margins.py --real-t6 [--seeds 3] [--tuned]   # ETTh1 from $BENCH_DATA_MIRROR
    python tests/benchmarks/label_margins.py --small t4,t5,t6,t7                # each task's small generated data
    python tests/benchmarks/label_margins.py --real-t6 --seeds 3 --small t4,t5,t7 [--smoke]   # what make bench runs

For each run: the baseline trained in-process on the CPU (default config, or ``baselines/results/t6.json``'s tuned
one), its best checkpoint by self-reported validation score evaluated by the task's own ``evaluate`` on val and on
the eval split (the scorer's numbers on a CPU: rule 9's tolerance notes they agree to 1e-12), the errors (the metric
for ``min``, 1 - metric for ``max``) and their ratio test/val; and the scan of that checkpoint's staged folder for
the eval split's targets (:func:`bench.scoring.leakage.scan`: windows found, seconds). Small data are generated,
not real: their gap says nothing about the real task's and is printed only to mark a margin calibrated on them.

Figures: ``label_margins.t6.real.{val,test,ratio,scan_s}`` (the range over the seeds' default baselines),
``label_margins.t6.real.found`` (targets found in their checkpoints, of the runs), ``label_margins.t6.tuned.*`` with
``--tuned``, and ``label_margins.<task>.small.ratio`` for each ``--small`` task. ``make bench`` runs ``--real-t6
--seeds 3 --small t4,t5,t7`` (2 min 22 s on the shared 2-core machine at load 6-9). ``--smoke``: the same rows,
one seed, every real T6 baseline trained 1 epoch (its figures mean nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.scoring import leakage  # noqa: E402
from bench.scoring.scorer import task_scoring  # noqa: E402
from bench.tasks import load_task, smalldata  # noqa: E402
from tests.benchmarks.figures import Span, add_smoke  # noqa: E402
from tests.tasks.taskfolder import copy_task, run_prepare, task_modules  # noqa: E402

FOLDERS = {p.name.split("_")[0]: p for p in sorted((ROOT / "tasks").iterdir()) if (p / "task.toml").is_file()}


def measure(task_id: str, ws: Path, config: dict) -> dict:
    """Train the baseline with ``config`` in ``ws``; its best checkpoint's val and eval-split scores, and the scan."""
    task = load_task(FOLDERS[task_id])
    out = io.StringIO()
    with task_modules(ws) as (prepare, train), contextlib.redirect_stdout(out):
        import torch

        torch.cuda.is_available = lambda: False
        shutil.rmtree(ws / "checkpoints", ignore_errors=True)
        t0 = time.time()
        train.main(config)
        train_s = time.time() - t0
        ckpts = sorted((ws / "checkpoints").glob("*.pt"))
        best = min(ckpts, key=lambda p: (1 if task.direction == "min" else -1) * torch.load(p)["val_score"])
        script = str(ws / "train.py")
        val = prepare.self_check(str(best), script, "val", data_dir=str(ws / "data"), device="cpu")["value"]
        test = prepare.self_check(str(best), script, task.eval_split, data_dir=str(ws / "data"), device="cpu")["value"]
        feed = prepare.eval_batches(task.eval_split, str(ws / "data"), prepare.FEED_BATCH_SIZE)
    error = (lambda v: v) if task.direction == "min" else (lambda v: 1 - v)
    staged = Path(tempfile.mkdtemp())
    shutil.copyfile(best, staged / "checkpoint.pt")
    shutil.copyfile(ws / "train.py", staged / "train.py")
    kind = task_scoring(FOLDERS[task_id]).get("targets", leakage.LABELS)
    vocab = prepare.load_meta(str(ws / "data")).get("vocab") if kind == leakage.TEXT else None
    scan = leakage.scan(staged, "checkpoint.pt", kind, [y for _, y in feed], vocab=vocab)
    shutil.rmtree(staged)
    return {
        "task": task_id,
        "val": val,
        "test": test,
        "ratio": error(test) / error(val) if error(val) else None,
        "train_s": round(train_s, 1),
        "found": len(scan["found"]),
        "scan_s": scan["seconds"],
        "scan_bytes": scan["bytes"],
    }


def real_t6(seeds: int, tuned: bool, epochs: int | None = None) -> list[dict]:
    if not os.environ.get("BENCH_DATA_MIRROR"):
        raise SystemExit("the real T6 rows need the datasets' mirror: set BENCH_DATA_MIRROR (docs/tasks-and-data.md)")
    mirror = Path(os.environ["BENCH_DATA_MIRROR"])
    root = Path(tempfile.mkdtemp())
    ws = copy_task(FOLDERS["t6"], root / "ws")
    proc = run_prepare(ws, "--prepare", "--raw-dir", str(mirror / "ETTh1"), "--data-dir", "data")
    assert proc.returncode == 0, proc.stderr
    with task_modules(ws) as (_, train):
        base = dict(train.CONFIG)
    configs = [dict(base, seed=2021 + i) for i in range(seeds)]
    if tuned:
        configs.append(json.loads((ROOT / "baselines" / "results" / "t6.json").read_text())["config"])
    if epochs is not None:  # --smoke
        configs = [dict(c, epochs=epochs) for c in configs]
    rows = []
    for config in configs:
        row = measure("t6", ws, config)
        row["config"] = "tuned" if config is configs[-1] and tuned else f"default seed {config['seed']}"
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def small(tasks: list[str]) -> list[dict]:
    rows = []
    for task_id in tasks:
        folder = FOLDERS[task_id]
        spec = smalldata.load(folder)
        root = Path(tempfile.mkdtemp())
        ws = copy_task(folder, root / "ws")
        (root / "raw").mkdir()
        spec.write_raw(root / "raw")
        proc = run_prepare(ws, "--prepare", "--raw-dir", str(root / "raw"), "--data-dir", "data")
        assert proc.returncode == 0, proc.stderr
        if spec.setup is not None:
            spec.setup(ws)
        with task_modules(ws) as (_, train):
            config = dict(train.CONFIG, **spec.tiny)
        row = measure(task_id, ws, config)
        row["config"] = "tiny, small data"
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def spread(values: list[float], fmt: str) -> str:
    """One value, or the range of several, as the docs quote it."""
    lo, hi = format(min(values), fmt), format(max(values), fmt)
    return lo if lo == hi else f"{lo}-{hi}"


def figures(span: Span, rows: list[dict]) -> None:
    """The figure lines of the rows measured."""
    default = [r for r in rows if r["task"] == "t6" and r["config"].startswith("default")]
    tuned = [r for r in rows if r["config"] == "tuned"]
    for key, group, what in (("real", default, f"{len(default)} seeds"), ("tuned", tuned, "the tuned config")):
        if not group:
            continue
        what = f"T6 DLinear baseline on the real ETTh1, CPU, {what}"
        span.figure(f"label_margins.t6.{key}.val", spread([r["val"] for r in group], ".3f"), f"val MSE, {what}")
        span.figure(f"label_margins.t6.{key}.test", spread([r["test"] for r in group], ".3f"), f"test MSE, {what}")
        span.figure(f"label_margins.t6.{key}.ratio", spread([r["ratio"] for r in group], ".3f"),
                    f"test / val error, {what}")  # fmt: skip
        span.figure(f"label_margins.t6.{key}.scan_s", spread([r["scan_s"] for r in group], ".2f") + " s",
                    f"the label scan of the best checkpoint's staged folder, {what}")  # fmt: skip
        span.figure(f"label_margins.t6.{key}.found", f"{sum(r['found'] for r in group)} of {len(group)}",
                    f"test targets found by the scan (0: no false flag), {what}")  # fmt: skip
    for r in rows:
        if r["config"] == "tiny, small data":
            ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
            what = f"test / val error, {r['task'].upper()} baseline, tiny config, small generated data"
            span.figure(f"label_margins.{r['task']}.small.ratio", ratio, what)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--real-t6", action="store_true")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--tuned", action="store_true")
    parser.add_argument("--small", default="", help="task ids, comma-separated")
    add_smoke(parser)
    args = parser.parse_args()
    if args.smoke:  # make bench's rows, smallest
        args.real_t6, args.seeds, args.small = True, 1, "t4,t5,t7"
    span = Span()
    rows = real_t6(args.seeds, args.tuned, 1 if args.smoke else None) if args.real_t6 else []
    rows += small([t for t in args.small.split(",") if t])
    print(f"{'task':5} {'config':20} {'val':>9} {'test':>9} {'ratio':>6} {'found':>5} {'scan s':>7} {'MB':>7}")
    for r in rows:
        ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "-"
        print(
            f"{r['task']:5} {r['config']:20} {r['val']:9.4f} {r['test']:9.4f} {ratio:>6} {r['found']:5} "
            f"{r['scan_s']:7.3f} {r['scan_bytes'] / 1e6:7.1f}"
        )
    figures(span, rows)


if __name__ == "__main__":
    main()
