"""``bench selftest``.

Run the measurements in order, judge them, write the report (see the package docstring).

Each measurement runs on its own: one that fails is recorded under ``errors`` with its message and
the others still run, so a short GPU call always brings back everything it could measure. The work
(data cache, MLflow store, workspaces, run directories) goes to a private folder, never the user's
own store.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench import settings
from bench.selftest import measure, report

PASS, FAIL, NA, INFO = "pass", "FAIL", "n/a", "info"
T1_STEPS = {"cuda": 300, "cpu": 150}
T1_BUDGET_S = {"cuda": 240.0, "cpu": 300.0}
GPU_RATIO_FLOOR = 0.8  # inside bench run, T1 keeps at least 80 % of its bare speed on a GPU
EVAL_RATIO_TARGET = 2.0  # the trusted evaluation costs under twice the in-process one


def selftest(
    device: str,
    out: Path,
    *,
    work: Path | None = None,
    t1_steps: int | None = None,
    keep: bool = False,
    eval_runs: int = 1,
) -> dict:
    """Every measurement, its checks and the report files in ``out``; returns the report dict."""
    t_start = time.time()
    private = work is None
    work = Path(work or tempfile.mkdtemp(prefix="bench-selftest-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    # the toolkit's cache, store and workspaces in ``work`` (a user's own store stays untouched)
    with settings.override(BENCH_CACHE_DIR=work / "cache", BENCH_MLRUNS_DIR=work / "mlruns", BENCH_WORKSPACES_DIR=None):
        rep = _measure(device, work, t1_steps=t1_steps, eval_runs=eval_runs)
    rep["seconds"] = time.time() - t_start
    report.write(rep, out)
    if private and not keep:
        shutil.rmtree(work, ignore_errors=True)
    return rep


def _measure(device: str, work: Path, *, t1_steps: int | None, eval_runs: int) -> dict:
    """Every measurement and its checks, in order (the report without its time)."""
    from bench.tasks import get_task

    figures: dict = {}
    errors: dict[str, str] = {}
    rep = {"device": device, "work": str(work), "figures": figures, "errors": errors}

    def step(name: str, fn, *args, **kw):
        print(f"[selftest] {name} ...", flush=True)
        t0 = time.perf_counter()
        try:
            value = fn(*args, **kw)
        except Exception as e:  # noqa: BLE001 - recorded; the other measurements still run
            print(f"[selftest] {name} failed: {type(e).__name__}: {e}", flush=True)
            errors[name] = f"{type(e).__name__}: {e}"[:2000]
            return None
        print(f"[selftest] {name}: {time.perf_counter() - t0:.1f} s", flush=True)
        return value

    rep["environment"] = step("environment", measure.environment, device) or {}
    figures["cuda_in_sandbox"] = step("cuda_in_sandbox", measure.cuda_in_sandbox, work)
    t6, t1 = get_task("t6"), get_task("t1")
    prepared = step("prepare_data", measure.prepare_data, [t6, t1]) or {}
    figures["prepare_data"] = prepared
    done = step("t6_baseline", measure.baseline_run, t6, device) if "t6" in prepared else None
    t6_result = None
    if done:
        figures["t6_baseline"], t6_result = done
    if "t1" in prepared:
        steps = t1_steps or T1_STEPS[device]
        budget = T1_BUDGET_S[device]
        figures["t1_throughput"] = step(
            "t1_throughput", measure.t1_throughput, t1, Path(prepared["t1"]["dir"]), work, device, steps, budget
        )
    if t6_result is not None and "t6" in prepared:
        figures["evaluation"] = step(
            "evaluation", measure.evaluation_cost, t6, t6_result, Path(prepared["t6"]["dir"]), work, device, eval_runs
        )
    if t6_result is not None and "t6" in prepared:
        figures["replay_epsilon"] = step(
            "replay_epsilon", measure.replay_epsilon, t6, t6_result, Path(prepared["t6"]["dir"]), work, device
        )
    t1_fig = figures.get("t1_throughput") or {}
    figures["gpu_metrics"] = dict(t1_fig.get("system") or {})
    figures["gpu_processes"] = step("gpu_processes", measure.gpu_processes)
    rep["checks"] = checks(device, figures, errors)
    return rep


def _check(name: str, verdict: str, detail: str) -> dict:
    return {"name": name, "verdict": verdict, "detail": detail}


def checks(device: str, fig: dict, errors: dict) -> list[dict]:
    """Each figure judged against what the kit exists to prove.

    ``n/a`` where the device cannot show it (no GPU).
    """
    gpu = device == "cuda"
    out = []
    sb = fig.get("cuda_in_sandbox") or {}
    inside = (sb.get("inside") or {}).get("available")
    predictor = (sb.get("inside_predictor") or {}).get("available")
    agree = inside is not None and inside == predictor == sb.get("host_available") and (inside or not gpu)
    detail = f"agent's sandbox {inside}, predictor's {predictor}, host {sb.get('host_available')}"
    detail = detail if sb else errors.get("cuda_in_sandbox", "-")
    out.append(_check("CUDA inside the sandbox", PASS if agree else FAIL, detail))
    t6 = fig.get("t6_baseline") or {}
    score = t6.get("score")
    ok = t6.get("status") == "success" and isinstance(score, float) and math.isfinite(score)
    out.append(
        _check(
            "T6 baseline under the full protocol",
            PASS if ok else FAIL,
            f"{t6.get('status')}: mse {score}" if t6 else errors.get("t6_baseline", "-"),
        )
    )
    t1 = fig.get("t1_throughput") or {}
    ratio = t1.get("ratio")
    ok = ratio is not None and (ratio >= GPU_RATIO_FLOOR or not gpu)
    floor = f" (floor {GPU_RATIO_FLOOR} on a GPU)" if gpu else " (no floor on a CPU)"
    out.append(
        _check(
            "T1 steps/s inside bench run vs bare",
            PASS if ok else FAIL,
            f"ratio {ratio:.3f}{floor}" if ratio is not None else errors.get("t1_throughput", "-"),
        )
    )
    ev = fig.get("evaluation") or {}
    a, b = ev.get("in_process_value"), ev.get("scorer_value")
    same = a is not None and b is not None and abs(a - b) <= 1e-3 * max(1.0, abs(a))
    out.append(
        _check(
            "official evaluation = in-process value",
            PASS if same else FAIL,
            f"{b} vs {a}" if ev else errors.get("evaluation", "-"),
        )
    )
    r = ev.get("ratio")
    judged = (PASS if r and r < EVAL_RATIO_TARGET else FAIL) if gpu else INFO  # a CPU's T6 is start-up bound
    out.append(
        _check(
            f"official evaluation under {EVAL_RATIO_TARGET:g}x in-process",
            judged,
            f"{r:.2f}x" if r else errors.get("evaluation", "-"),
        )
    )
    rp = fig.get("replay_epsilon") or {}
    eps, allowed = rp.get("replay_max_relative"), (rp.get("tolerance") or {}).get("replay")
    out.append(
        _check(
            "cold replays within the task's tolerance (T6)",
            PASS if eps is not None and allowed is not None and eps <= allowed else FAIL,
            f"max relative {eps:.3g} (bitwise {rp.get('bitwise')}), tolerance {allowed:g}, batch probe "
            f"{rp.get('batch_probe_max_relative'):.3g}; suggested cuda_replay_tolerance "
            f"{rp.get('suggested_cuda_replay_tolerance'):.3g}"
            if eps is not None
            else errors.get("replay_epsilon", "-"),
        )
    )
    gm = fig.get("gpu_metrics") or {}
    samples = gm.get("samples") or 0
    out.append(_check("system metrics sampled (T1 run)", PASS if samples > 0 else FAIL, f"{samples} samples"))
    if gpu:
        peak = gm.get("gpu_memory_peak_mb") or 0
        out.append(
            _check(
                "GPU metrics non-zero (NVML)",
                PASS if peak > 0 else FAIL,
                f"peak {peak} MB, mean util {gm.get('gpu_utilization_mean_percent')} %; {gm.get('why', '')}",
            )
        )
    else:
        out.append(
            _check("GPU metrics non-zero (NVML)", NA, f"no GPU; {gm.get('why') or 'nvml ' + str(gm.get('nvml'))}")
        )
    left = fig.get("gpu_processes") or {}
    if left.get("tool"):
        procs = left.get("processes", [])
        out.append(_check("no GPU process left", PASS if not procs else FAIL, "; ".join(procs) or "none"))
    else:
        out.append(_check("no GPU process left", FAIL if gpu else NA, "no nvidia-smi"))
    return out


def main(device: str, out: Path, work: Path | None, t1_steps: int | None, keep: bool, eval_runs: int) -> int:
    """Run ``bench selftest``: 0 when no check failed, 1 otherwise.

    The report is written either way.
    """
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print(
                "bench selftest --device cuda: torch sees no GPU here; use --device cpu to test the kit itself",
                file=sys.stderr,
            )
            return 2
    rep = selftest(device, out, work=work, t1_steps=t1_steps, keep=keep, eval_runs=eval_runs)
    print(report.markdown(rep))
    print(f"report: {out / report.JSON_NAME}, {out / report.MD_NAME}")
    return 1 if any(c["verdict"] == FAIL for c in rep["checks"]) else 0
