"""Benchmark: how long ``bench report`` takes on a campaign of the paper's size (prints figures; not a test).

    python tests/benchmarks/report_speed.py [--store DIR] [--repeat 3] [--published] [--smoke]

1. A fresh embedded MLflow store (in a temporary folder, or ``--store DIR`` to keep and reuse it) gets
   one synthetic campaign through the harness's MlflowWriter: 7 agents x 7 tasks x 5 repeats = 245 agent
   runs, 12 script runs each on average (2,940), 3 eval runs per successful run, every run tagged
   ``bench.synthetic=true``.
2. ``bench report`` (or ``python -m analysis.report_cli`` where the CLI is not wired yet) runs on it as a
   user would run it: a new process, imports included, every table and figure written.

``--smoke``: a campaign of 2 agents x 2 tasks x 1 repeat, 2 script runs each, one report (to check that the script
works).

Target: under 10 s.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.figures import Span, add_smoke, seconds  # noqa: E402

CAMPAIGN = "synthetic-245x12"
TARGET_S = 10.0


def _generator():
    spec = importlib.util.spec_from_file_location("synthetic", ROOT / "tests" / "analysis" / "synthetic.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _report_command(out: Path, published: bool) -> list[str]:
    bench = Path(sys.executable).parent / "bench"
    wired = bench.exists() and subprocess.run([str(bench), "report", "--help"], capture_output=True).returncode == 0
    cmd = [str(bench), "report"] if wired else [sys.executable, "-m", "analysis.report_cli"]
    return cmd + ["--experiment", CAMPAIGN, "--out", str(out)] + (["--published"] if published else [])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", type=Path, help="keep the generated store here (reused when it exists)")
    p.add_argument("--repeat", type=int, default=3, help="report runs to time (default 3)")
    p.add_argument("--published", action="store_true", help="also add the published rows (--published)")
    add_smoke(p)
    args = p.parse_args()
    size = dict(agents=2, tasks=2, repeats=1, scripts=2, evals=1) if args.smoke else {}
    repeat = 1 if args.smoke else args.repeat

    tmp = Path(tempfile.mkdtemp(prefix="bench-report-speed-"))
    store = args.store or tmp / "mlruns"
    os.environ["BENCH_MLRUNS_DIR"] = str(store)
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    try:
        if not (store / "mlflow.db").exists():
            t = time.perf_counter()
            counts = _generator().generate(CAMPAIGN, **size)
            print(
                f"generated {counts['agent']} agent runs, {counts['script']} script runs, {counts['eval']} eval runs "
                f"(synthetic) in {time.perf_counter() - t:.0f} s -> {store}"
            )
        else:
            print(f"reusing the store {store}")
        times = []
        span = Span()
        for i in range(repeat):
            out = tmp / f"report-{i}"
            cmd = _report_command(out, args.published)
            t = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            times.append(time.perf_counter() - t)
            if done.returncode != 0:
                print(done.stdout, done.stderr, sep="\n")
                return 1
            files = sorted(f.name for f in out.iterdir())
            print(f"run {i + 1}: {times[-1]:.2f} s wall ({len(files)} files) | {done.stdout.strip()}")
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"\ncommand: {' '.join(Path(c).name if c.startswith('/') else c for c in cmd)}")
        print(f"machine: {os.cpu_count()} CPUs, load average {load:.1f} at the end (other work slows the figures)")
        print(
            f"bench report on 245 agent runs x 12 script runs: median {statistics.median(times):.2f} s, "
            f"min {min(times):.2f} s, max {max(times):.2f} s (target < {TARGET_S:.0f} s: "
            f"{'met' if statistics.median(times) < TARGET_S else 'NOT met'})"
        )
        what = f"bench report, a new process, median of {repeat}" + (" (smoke: a small campaign)" if size else "")
        span.figure("report_speed.report", seconds(statistics.median(times)), what)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
