"""Benchmark: what the script tracer costs a training script (prints figures; not a test).

    python tests/benchmarks/tracer_cost.py [--runs 20] [--steps 1000] [--repeats 5] [--no-tee] [--smoke]

1. Start-up: a trivial workspace script (`print(1)`) run traced and untraced, alternately,
   ``--runs`` times each; the extra start-up is the difference of the medians.
2. Per step: a 1,000-step loop that does a fixed amount of tensor work and logs three
   metrics a step through the task helper ``log_metrics`` (as the baselines do); the loop's
   own wall time, traced vs untraced, best of ``--repeats`` alternating runs each.
3. Completeness: the traced loop's spool is relayed into a fresh MLflow store and every
   logged value is counted there.

``--smoke``: 2 start-ups, 50 steps, one loop each (to check that the script works).

Targets: under 0.2 s extra start-up, under 1 % per step, every metric present.
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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.figures import Span, add_smoke  # noqa: E402

LOOP = """
import json, sys, time
import torch
from prepare import log_metrics

torch.manual_seed(0)
a, b = torch.randn(192, 192), torch.randn(192, 192)
for _ in range(20):  # warm-up
    a @ b
steps = int(sys.argv[1])
t0 = time.perf_counter()
for step in range(steps):
    for _ in range(8):  # the step's fixed work (~1-3 ms on a CPU core)
        c = a @ b
    log_metrics(step, loss=float(c[0, 0]), lr=3e-4, grad_norm=1.0)
elapsed = time.perf_counter() - t0
print("RESULT " + json.dumps({"loop_s": elapsed}), file=sys.stderr)
"""


NO_TEE = False


def env_for(ws: Path, traced: bool) -> dict[str, str]:
    from bench.tracking import HOOK_DIR

    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCH_")}
    env["OMP_NUM_THREADS"] = "1"  # one core each, so the two variants see the same machine
    if traced:
        env.update(
            {"BENCH_WORKSPACE": str(ws), "BENCH_SPOOL_DIR": str(ws / ".bench" / "spool"), "PYTHONPATH": str(HOOK_DIR)}
        )
        if NO_TEE:
            env["BENCH_TRACE_STDOUT"] = "0"
    return env


def timed(cmd: list[str], ws: Path, traced: bool) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ws, env=env_for(ws, traced), capture_output=True, text=True, check=True)
    return time.perf_counter() - t0, proc.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5, help="alternating loop runs per variant (best is kept)")
    ap.add_argument("--no-tee", action="store_true", help="trace without the stdout tee (its share of the cost)")
    add_smoke(ap)
    args = ap.parse_args()
    if args.smoke:
        args.runs, args.steps, args.repeats = 2, 50, 1
    global NO_TEE
    NO_TEE = args.no_tee
    ws = Path(tempfile.mkdtemp(prefix="tracer-bench-"))
    (ws / ".bench" / "spool").mkdir(parents=True)
    for name in ("prepare.py", "task_helpers.py"):  # prepare.py imports the shared helpers beside it
        shutil.copy(ROOT / "tasks" / "t6_time_series_forecasting" / name, ws / name)
    (ws / "run_start.py").write_text("print(1)\n")
    (ws / "run_loop.py").write_text(LOOP)

    tee = "without the output tee" if NO_TEE else "with the output tee"
    # 1. start-up
    span = Span()
    plain, traced = [], []
    for _ in range(args.runs):
        plain.append(timed([sys.executable, "run_start.py"], ws, False)[0])
        traced.append(timed([sys.executable, "run_start.py"], ws, True)[0])
    p_med, t_med = statistics.median(plain), statistics.median(traced)
    print(
        f"start-up  untraced median {p_med * 1000:7.1f} ms | traced median {t_med * 1000:7.1f} ms | "
        f"extra {1000 * (t_med - p_med):6.1f} ms  (target < 200 ms; {args.runs} runs each)"
    )
    what = f"traced {t_med * 1000:.1f} ms vs untraced {p_med * 1000:.1f} ms, medians of {args.runs}, {tee}"
    span.figure("tracer_cost.startup_extra", f"{1000 * (t_med - p_med):.1f} ms", what)

    # 2. per step
    for f in (ws / ".bench" / "spool").iterdir():
        f.unlink()
    loops = {False: [], True: []}
    span = Span()
    for _ in range(args.repeats):
        for tr in (False, True):
            if tr:
                for f in (ws / ".bench" / "spool").iterdir():
                    f.unlink()
            _, err = timed([sys.executable, "run_loop.py", str(args.steps)], ws, tr)
            line = next(x for x in err.splitlines() if x.startswith("RESULT "))
            loops[tr].append(json.loads(line[7:])["loop_s"])
    lp, lt = min(loops[False]), min(loops[True])
    print(
        f"per step  untraced {1000 * lp / args.steps:6.3f} ms | traced {1000 * lt / args.steps:6.3f} ms | "
        f"overhead {100 * (lt - lp) / lp:+5.2f} %  (target < 1 %; {args.steps} steps x 3 metrics, "
        f"best of {args.repeats})"
    )
    what = f"{args.steps} steps x 3 metrics, traced vs untraced loop, best of {args.repeats} each, {tee}"
    span.figure("tracer_cost.per_step", f"{100 * (lt - lp) / lp:+.1f} %", what)

    # 3. every metric in MLflow
    os.environ["BENCH_MLRUNS_DIR"] = str(ws / "mlruns")
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    from mlflow.tracking import MlflowClient

    from bench.tracking import schema
    from bench.tracking.relay import Relay
    from bench.tracking.writer import MlflowWriter

    span = Span()
    rec = MlflowWriter("tracer-benchmark")
    parent = rec.create_run("benchmark", {schema.KIND: schema.KIND_AGENT, schema.SYNTHETIC: "true"})
    t0 = time.perf_counter()
    relay = Relay(rec, parent, ws / ".bench" / "spool", {schema.SYNTHETIC: "true"}, state_file=ws / "relay.json")
    summary = relay.finalize()
    relay_s = time.perf_counter() - t0
    run_id = summary["scripts"][0]["run_id"]
    client = MlflowClient()
    counts = {k: len(client.get_metric_history(run_id, k)) for k in ("loss", "lr", "grad_norm")}
    total, expected = sum(counts.values()), 3 * args.steps
    print(f"MLflow    {total} of {expected} logged values present {counts} | relayed in {relay_s:.2f} s")
    span.figure("tracer_cost.metrics_present", f"{total:,} of {expected:,}", f"relayed in {relay_s:.2f} s")
    shutil.rmtree(ws, ignore_errors=True)
    return 0 if total == expected else 1


if __name__ == "__main__":
    sys.exit(main())
