"""Benchmark: what ``bench run`` costs over running the training script by hand (prints figures; not a test).

    python tests/benchmarks/run_overhead.py [--runs 5] [--keep DIR] [--print-commands] [--smoke]

On T6 with generated ETTh1-shaped data (``tests/conftest.py``'s generator, the real task folder):

- A: ``bench run --agent command --agent-command 'python train.py' --task t6`` (the whole harness: workspace,
  sandbox, tracer, relay, collection, the official evaluation, the audit, MLflow), as a new process;
- B: ``python train.py`` in a folder holding the task's files and the prepared data.

They run in turn, A B A B ..., ``--runs`` times each; the figure is the median of the pairwise ratios A/B (pairs keep
the ratio meaningful when the machine's speed drifts). Issue #16 measured 14.0 s vs 7.3 s (1.9x); target <= 1.3x;
the README gives the latest figures.
``--print-commands`` sets everything up and prints the two commands with their environment, for another timer;
``--smoke`` runs one pair and no warm-up (to check that the script works).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.figures import Span, add_smoke, ratio, seconds  # noqa: E402

TASK_FOLDER = "t6_time_series_forecasting"


class _Env:
    """``generated_task`` sets its variables through a pytest monkeypatch; here straight into os.environ."""

    def setenv(self, name: str, value: str) -> None:
        os.environ[name] = value


def setup(base: Path) -> tuple[list[str], list[str], Path, dict[str, str]]:
    """The generated task, its prepared data, a plain folder for B; returns (A, B, B's folder, the environment)."""
    from tests.conftest import generated_task, write_etth1_like

    os.environ.pop("MLFLOW_TRACKING_URI", None)
    os.environ["BENCH_MLRUNS_DIR"] = str(base / "mlruns")
    os.environ["BENCH_WORKSPACES_DIR"] = str(base / "workspaces")
    task = generated_task(base, _Env(), TASK_FOLDER, write_etth1_like)
    from bench.tasks import data

    prepared = data.prepare(task, progress=False)
    plain = base / "plain"
    plain.mkdir(exist_ok=True)
    for name in ("train.py", *task.locked_files):
        shutil.copyfile(task.file(name), plain / name)
    if not (plain / "data").exists():
        (plain / "data").symlink_to(prepared, target_is_directory=True)
    bench = str(Path(sys.executable).parent / "bench")
    a = [bench, "run", "--agent", "command", "--agent-command", "python train.py", "--task", "t6"]
    a += ["--campaign", "run-overhead"]  # not --quiet: the script's lines time its end
    b = [sys.executable, "train.py"]
    keys = ("BENCH_TASKS_DIR", "BENCH_DATA_MIRROR", "BENCH_CACHE_DIR", "BENCH_MLRUNS_DIR", "BENCH_WORKSPACES_DIR")
    return a, b, plain, {k: os.environ[k] for k in keys}


def _timed(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """(seconds to the script's last validation line, seconds to the command's exit), from outside the command.

    The first is the harness's start-up and the script's own time inside it (``bench run`` prints the script's
    lines as they come); the second adds what follows the agent: evaluation, audit, record, the summary."""
    t = time.perf_counter()
    last, lines = None, []
    with subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            lines.append(line)
            if "val_mse" in line:
                last = time.perf_counter() - t
    wall = time.perf_counter() - t
    if proc.returncode != 0 or last is None:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{''.join(lines)[-3000:]}")
    return last, wall


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5, help="runs of each command (default 5), after one warm-up each")
    p.add_argument("--keep", type=Path, help="set up here and keep it (reused when present)")
    p.add_argument("--print-commands", action="store_true", help="set up, print the two commands, measure nothing")
    add_smoke(p)
    args = p.parse_args()
    runs = 1 if args.smoke else args.runs
    base = (args.keep or Path(tempfile.mkdtemp(prefix="bench-run-overhead-"))).resolve()
    base.mkdir(parents=True, exist_ok=True)
    try:
        a, b, plain, env = setup(base)
        if args.print_commands:
            exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
            print(f"A (in {plain}): {exports} {shlex.join(a)}\nB (in {plain}): {shlex.join(b)}")
            return 0
        if not args.smoke:
            _timed(a, plain), _timed(b, plain)  # warm-up: page cache, the first MLflow schema, __pycache__
        times_a, times_b = [], []
        span = Span()
        for i in range(runs):
            times_a.append(_timed(a, plain))
            times_b.append(_timed(b, plain))
            print(
                f"pair {i + 1}: bench run {times_a[-1][1]:.2f} s (last validation at {times_a[-1][0]:.2f} s), "
                f"python train.py {times_b[-1][1]:.2f} s (at {times_b[-1][0]:.2f} s)",
                flush=True,
            )
        print(f"\nmachine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end")
        for what, k, fid in (("to the script's last validation", 0, "startup"), ("whole command", 1, "whole")):
            xs, ys = [x[k] for x in times_a], [y[k] for y in times_b]
            ratios = [x / y for x, y in zip(xs, ys, strict=True)]
            print(
                f"{what}: bench run {statistics.median(xs):.2f} s vs python train.py {statistics.median(ys):.2f} s "
                f"(medians); ratio median {statistics.median(ratios):.2f}x (min {min(ratios):.2f}, "
                f"max {max(ratios):.2f})"
            )
            pairs = f"{what}, median of {runs} pairs"
            span.figure(f"run_overhead.{fid}.bench_run", seconds(statistics.median(xs)), f"bench run, {pairs}")
            span.figure(f"run_overhead.{fid}.script", seconds(statistics.median(ys)), f"python train.py, {pairs}")
            span.figure(f"run_overhead.{fid}.ratio", ratio(statistics.median(ratios)), f"bench run / script, {pairs}")
        return 0
    finally:
        if args.keep is None and not args.print_commands:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
