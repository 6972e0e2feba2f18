"""Benchmark: `bench verify` of an N-run T6 campaign with --jobs 1 and --jobs 2, side by side in one run (prints
figures; not a test).

    python tests/benchmarks/verify_jobs.py [--runs 20] [--smoke] [--data-mirror DIR]

One real `bench run` on T6 (the command agent: the task's train.py at 2 epochs, 1-minute budget, the real ETTh1 from
the data mirror, prepared first) is copied N-1 times into the campaign's folder under new run folder names: what
verify re-scores is the same per run (one staged candidate, a sandboxed predictor and the probes' predictor), as
for N runs made one by one. Then `bench verify <campaign folder> --quiet --jobs J` is timed whole for J = 1 and 2,
with the load average at the start and end of each. ``make bench`` runs ``--runs 20``, the campaign size the docs
quote (1 min 57 s on the shared 2-core machine at load 2-3: the one real run, then 20 + 20 re-scorings).
``--smoke``: 2 runs (its figures mean nothing). Needs $BENCH_DATA_MIRROR (or --data-mirror): without it, it says
so and exits 1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.figures import Span, add_smoke, ratio, seconds  # noqa: E402

COMMAND = 'sed \'s/"epochs": 5/"epochs": 2/\' train.py > run_1.py && python run_1.py'
CAMPAIGN = "verify-jobs"


def bench(args: list[str], env: dict, **kw) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "bench"
    return subprocess.run([str(exe), *args], env=env, cwd=ROOT, capture_output=True, text=True, **kw)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20)
    add_smoke(p)
    p.add_argument("--data-mirror", default=os.environ.get("BENCH_DATA_MIRROR"))
    args = p.parse_args()
    n = 2 if args.smoke else args.runs
    if not args.data_mirror:
        raise SystemExit("verify_jobs: needs the real T6 data: set BENCH_DATA_MIRROR (or --data-mirror) to the offline "
                         "data mirror (docs/tasks-and-data.md)")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-verify-jobs-") as tmp:
        env = {**os.environ, "BENCH_CACHE_DIR": f"{tmp}/cache", "BENCH_MLRUNS_DIR": f"{tmp}/mlruns",
               "BENCH_DATA_MIRROR": str(args.data_mirror), "BENCH_API_CHECK": "0"}  # fmt: skip
        env.pop("BENCH_WORKSPACES_DIR", None)
        done = bench(["data", "prepare", "t6"], env)
        assert done.returncode == 0, done.stderr
        argv = ["run", "--agent", "command", "--agent-command", COMMAND, "--task", "t6", "--budget", "1m"]
        done = bench([*argv, "--grace", "5", "--campaign", CAMPAIGN, "--quiet", "--no-summary"], env)
        assert done.returncode == 0, done.stdout + done.stderr
        folder = Path(tmp) / "cache" / "workspaces" / CAMPAIGN
        (original,) = list(folder.iterdir())
        for i in range(2, n + 1):  # copies under new names: verify re-scores each from its own files
            shutil.copytree(original, folder / f"{original.name}-copy{i}", symlinks=True)
        print(f"verify_jobs: {n} T6 runs (1 scored candidate each), {os.cpu_count()} cores")
        took, first = {}, None
        what = f"bench verify of {n} T6 runs (1 scored candidate each), {os.cpu_count()} cores"
        for jobs in (1, 2):
            span, t0 = Span(), time.monotonic()
            first = first or span
            done = bench(["verify", str(folder), "--quiet", "--jobs", str(jobs)], env)
            took[jobs] = time.monotonic() - t0
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
            span.figure(f"verify_jobs.jobs{jobs}", seconds(took[jobs]), f"--jobs {jobs}, {what}")
            span.figure(f"verify_jobs.jobs{jobs}.per_run", seconds(took[jobs] / n), f"--jobs {jobs}, a run, {what}")
        first.figure("verify_jobs.ratio", ratio(took[2] / took[1]), f"--jobs 2 / --jobs 1, the time, {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
