"""Benchmark: the store's fast read path (MLflow's tables) against its public API, on the same store (prints figures;
not a test).

    python tests/benchmarks/reader_speed.py [--agents 5] [--tasks 4] [--repeats 2] [--scripts 3] [--repeat 5] [--smoke]

1. A fresh embedded MLflow store in a temporary folder gets one synthetic campaign through the harness's
   MlflowWriter (``tests/analysis/synthetic.py``): by default 5 agents x 4 tasks x 2 repeats = 40 agent runs, 3 script
   runs and about 1 eval run each: ~200 runs, every one with tags, params and metrics, the scripts with histories.
2. In this process (MLflow imported and the store's client made once, before any timing), each reader of
   ``bench/tracking/reader.py`` reads what ``bench report`` reads: the experiments, the agent runs with their params,
   the script and eval runs, and the checkpoint-score history of every script run. Median of ``--repeat`` rounds,
   the two readers alternating so that load on the machine falls on both alike.

Prints each reader's median and spread and the ratio api / sql, and checks that both read the same values.
``--smoke``: 1 agent x 1 task x 1 repeat, 1 script, one round (to check that the script works).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.figures import Span, add_smoke  # noqa: E402


def _generator():
    spec = importlib.util.spec_from_file_location("synthetic", ROOT / "tests" / "analysis" / "synthetic.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_all(source, campaign: str) -> tuple:
    """What a report reads, through one reader."""
    from bench.tracking import schema

    exps = source.experiments([campaign])
    ids = list(exps)
    agents = source.runs(ids, schema.KIND_AGENT, params=True)
    scripts = source.runs(ids, schema.KIND_SCRIPT)
    evals = source.runs(ids, schema.KIND_EVAL)
    history = source.metric_history(scripts["run_id"].tolist(), schema.CHECKPOINT_SCORE)
    return exps, agents, scripts, evals, history


def same(a: tuple, b: tuple) -> bool:
    """The two readers' results hold the same values (row and column order aside)."""
    if a[0] != b[0]:
        return False
    for x, y in zip(a[1:4], b[1:4], strict=True):
        x, y = x.set_index("run_id").sort_index(), y.set_index("run_id").sort_index()
        if set(x.columns) != set(y.columns):
            return False
        x, y = x[sorted(x.columns)].astype(object), y[sorted(y.columns)].astype(object)
        if not x.where(x.notna(), None).astype(str).equals(y.where(y.notna(), None).astype(str)):
            return False
    return a[4].astype(str).equals(b[4].astype(str))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=5)
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--scripts", type=int, default=3)
    ap.add_argument("--evals", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5, help="timed rounds per reader (median)")
    add_smoke(ap)
    args = ap.parse_args()
    if args.smoke:
        args.agents = args.tasks = args.repeats = args.scripts = args.evals = args.repeat = 1

    folder = tempfile.mkdtemp(prefix="bench-reader-speed-")
    try:
        return measure(args, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def measure(args: argparse.Namespace, folder: str) -> int:
    os.environ["BENCH_MLRUNS_DIR"] = str(Path(folder) / "mlruns")
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    from bench.tracking import reader, store

    campaign = "synthetic-reader-speed"
    t = time.perf_counter()
    counts = _generator().generate(
        campaign, agents=args.agents, tasks=args.tasks, repeats=args.repeats, scripts=args.scripts, evals=args.evals
    )
    total = sum(counts.values())
    print(f"store: {counts} = {total} runs, written in {time.perf_counter() - t:.1f} s ({store.tracking_uri()})")

    readers = {"sql": reader.open_reader(fast=True), "api": reader.open_reader(fast=False)}
    assert readers["sql"].name == "sql", readers["sql"].name
    results = {name: read_all(source, campaign) for name, source in readers.items()}  # warm: imports, caches
    assert same(results["sql"], results["api"]), "the two readers read different values"
    times: dict[str, list[float]] = {name: [] for name in readers}
    span = Span()
    for _ in range(args.repeat):
        for name, source in readers.items():
            t = time.perf_counter()
            read_all(source, campaign)
            times[name].append(time.perf_counter() - t)
    med = {name: statistics.median(ts) for name, ts in times.items()}
    for name, ts in times.items():
        print(f"{name}: median {med[name]:.3f} s over {len(ts)} rounds (min {min(ts):.3f}, max {max(ts):.3f})")
    print(f"ratio api / sql: {med['api'] / med['sql']:.1f}x on {total} runs; same values: yes")
    what = f"{total} runs, medians of {args.repeat} rounds, alternating"
    span.figure("reader_speed.sql", f"{med['sql']:.2f} s", f"MLflow's tables read directly, {what}")
    span.figure("reader_speed.api", f"{med['api']:.2f} s", f"MLflow's public API, {what}")
    span.figure("reader_speed.ratio", f"{med['api'] / med['sql']:.1f}x", f"api / sql, {what}")
    span.figure("reader_speed.runs", f"{total}", "runs in the store")
    t = time.perf_counter()
    for _ in range(args.repeat):
        reader.open_reader()
    print(f"open_reader (the SQL path's precondition check): {(time.perf_counter() - t) / args.repeat * 1000:.0f} ms")
    print(f"load average while measuring: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
