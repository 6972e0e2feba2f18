"""The proof kit's measurements, one function each.

Each returns plain figures (a dict) for the report.

Every measurement runs the toolkit the way a user does (the sandbox, ``bench run``'s runner, the
trusted scorer) and compares it with the same work done bare, in one process, on the same machine
and in the same call, so that a ratio never mixes two machines. Nothing here decides pass or fail:
:mod:`bench.selftest.kit` does.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.errors import BenchError
from bench.pipeline.evaluate import _last_json
from bench.tasks import Task


class MeasureError(BenchError, RuntimeError):
    """A measurement could not be taken; the kit records its message and takes the others."""


# T1's throughput script: the task's own train.py with a config override, stopped after MAX steps
# (the log line of step MAX is the last). Written into the workspace by the command agent and run
# bare the same way.
PROOF_SCRIPT = "run_proof.py"
_PROOF = """import json, sys
import train
config = {**train.CONFIG, **json.loads(sys.argv[1])}
last = int(sys.argv[2])
_log = train.log_metrics
def log_metrics(step, **values):
    _log(step, **values)
    if step >= last:
        raise SystemExit(0)
train.log_metrics = log_metrics
train.main(config)
"""
# On a GPU: the task's model as it is (the paper's T1 baseline), no validation pass between the
# timed steps. On a CPU: a model small enough for a CI run; the figure proves the kit, not the card.
T1_CONFIG = {
    "cuda": {"eval_every": 10**9, "log_every": 10},
    "cpu": {
        "n_layer": 1,
        "n_head": 2,
        "d_model": 128,
        "block_size": 128,
        "batch_size": 16,
        "dropout": 0.0,
        "eval_every": 10**9,
        "log_every": 10,
    },
}
_STEP_LINE = re.compile(r"^step (\d+) \| loss [-\d.naif]+ \| elapsed_s ([\d.]+)", re.M)


def environment(device: str) -> dict:
    """What ran: Python, torch, the card and its driver (nvidia-smi), the toolkit's commit."""
    import torch

    out = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "device": device,
        "cuda_available": torch.cuda.is_available(),
        "card": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "driver": None,
        "commit": _git_commit(),
    }
    smi = shutil.which("nvidia-smi")
    if smi:
        done = subprocess.run(
            [smi, "--query-gpu=driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        out["driver"] = done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None
    return out


def _git_commit() -> str | None:
    root = Path(__file__).resolve().parents[2]
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
    except OSError:
        return None
    return done.stdout.strip() or None


def cuda_in_sandbox(work: Path) -> dict:
    """``torch.cuda.is_available()`` inside the agent's sandbox and a predictor's, and here.

    In a process of the agent's sandbox (its allow-listed view, its PID namespace) and of a
    predictor's (its seccomp profile), beside the same question asked here: the views must bind
    exactly what CUDA needs and the filters deny nothing it calls, so the answers agree.
    """
    import torch

    from bench.sandbox import Policy, Sandbox, default_hidden, default_readable

    ws = work / "sandbox-cuda"
    ws.mkdir(parents=True, exist_ok=True)
    code = (
        "import json, torch; ok = torch.cuda.is_available(); "
        "y = (torch.ones(256, 256, device='cuda') @ torch.ones(256, 256, device='cuda'))[0, 0].item() if ok else None; "
        "print(json.dumps({'available': ok, 'count': torch.cuda.device_count(), "
        "'name': torch.cuda.get_device_name(0) if ok else None, 'matmul': y}))"
    )
    t0 = time.perf_counter()
    out: dict = {"host_available": torch.cuda.is_available()}
    # the agent's sandbox, and the predictor's (its seccomp profile denies file locks, watches and
    # more: CUDA must work under it, bench.sandbox.seccomp)
    for key, writable, profile in (("inside", (ws,), "agent"), ("inside_predictor", (), "predictor")):
        readable = (*default_readable(), ws)
        policy = Policy(cwd=ws, writable=writable, readable=readable, hidden=default_hidden(), seccomp=profile)
        box = Sandbox(policy)
        try:
            done = subprocess.run(
                box.wrap([sys.executable, "-c", code]), cwd=ws, capture_output=True, text=True, timeout=300
            )
        finally:
            box.close()
        out[key] = _last_json(done.stdout) or {"error": (done.stderr or done.stdout)[-800:]}
    return {**out, "seconds": time.perf_counter() - t0}


def prepare_data(tasks: list[Task]) -> dict:
    """Each task's prepared data from the carried mirror (``BENCH_DATA_MIRROR``), timed."""
    from bench.tasks import data

    out = {}
    for task in tasks:
        t0 = time.perf_counter()
        folder = data.prepare(task, progress=False)
        out[task.id] = {"dir": str(folder), "seconds": time.perf_counter() - t0}
    return out


def baseline_run(task: Task, device: str) -> tuple[dict, object]:
    """The task's baseline under the full protocol; its figures and the RunResult.

    It runs as ``bench run --agent baseline``: the task's budget, the sandbox, the trusted scorer,
    the audit, MLflow. The RunResult is for the evaluation comparison.
    """
    from bench.runner import RunSpec, run

    result = run(RunSpec(task=task, agent="baseline", campaign="selftest", device=device, console=False))
    best = result.best
    figures = {
        "status": result.status,
        "reason": result.reason,
        "score": result.score,
        "paper_baseline": task.baseline_score,
        "wall_time_s": result.wall_time_s,
        "device": result.run.device,
        "evaluation_s": (best.official.raw.get("eval_wall_s") or best.official.raw.get("seconds")) if best else None,
        "system": (result.scripts or {}).get("system", {}),
        "run_dir": result.run_dir,
    }
    return figures, result


def steps_per_second(log: str) -> dict:
    """T1's training speed from its ``step N | loss L | elapsed_s S`` lines.

    The median over consecutive log intervals (robust to the first, which holds start-up, and to an
    epoch's end, which holds a validation pass).
    """
    points = [(int(s), float(e)) for s, e in _STEP_LINE.findall(log)]
    rates = [(s2 - s1) / (e2 - e1) for (s1, e1), (s2, e2) in zip(points, points[1:], strict=False) if e2 > e1]
    return {
        "steps": points[-1][0] if points else 0,
        "intervals": len(rates),
        "steps_per_s": statistics.median(rates) if rates else None,
    }


def t1_throughput(task: Task, data_dir: Path, work: Path, device: str, steps: int, budget_s: float) -> dict:
    """T1's steps per second for ``python run_proof.py`` bare and inside ``bench run``.

    Bare: a copy of the task's files, no harness. Inside ``bench run``: the command agent runs the
    same script in the sandbox, traced, sampled, relayed to MLflow. Their ratio is the harness's and
    tracer's cost on this device, measured in one call.
    """
    from bench.runner import RunSpec, run

    config = json.dumps(T1_CONFIG["cuda" if device == "cuda" else "cpu"])
    ws = work / "t1-bare"
    ws.mkdir(parents=True, exist_ok=True)
    for name in ("prepare.py", "train.py", *task.extra_locked):
        shutil.copyfile(task.file(name), ws / name)
    if not (ws / "data").exists():
        os.symlink(data_dir, ws / "data")
    (ws / PROOF_SCRIPT).write_text(_PROOF)
    t0 = time.perf_counter()
    bare = subprocess.run(
        [sys.executable, PROOF_SCRIPT, config, str(steps)],
        cwd=ws,
        capture_output=True,
        text=True,
        timeout=budget_s + 120,
    )
    bare_s = time.perf_counter() - t0
    if bare.returncode != 0:
        raise MeasureError(f"bare T1 run failed (exit {bare.returncode}): {bare.stderr[-800:]}")
    command = f"cat > {PROOF_SCRIPT} <<'EOF'\n{_PROOF}EOF\npython {PROOF_SCRIPT} {shlex.quote(config)} {steps}"
    spec = RunSpec(
        task=task,
        agent="command",
        campaign="selftest",
        device=device,
        console=False,
        budget_s=budget_s,
        grace_s=10.0,
        options={"command": command},
    )
    result = run(spec)
    log = Path(result.run_dir, "agent.log")
    inside = steps_per_second(log.read_text(errors="replace") if log.exists() else "")
    outside = steps_per_second(bare.stdout)
    ratio = inside["steps_per_s"] / outside["steps_per_s"] if inside["steps_per_s"] and outside["steps_per_s"] else None
    return {
        "config": json.loads(config),
        "bare": {**outside, "wall_s": bare_s},
        "bench_run": {**inside, "wall_s": result.wall_time_s, "status": result.status, "run_dir": result.run_dir},
        "ratio": ratio,
        "system": (result.scripts or {}).get("system", {}),
    }


def evaluation_cost(task: Task, result, data_dir: Path, work: Path, device: str, runs: int = 1) -> dict:
    """The official evaluation of the baseline run's best checkpoint.

    ``python -I -m bench.scoring.scorer`` (the trusted scorer with its sandboxed predictor and a
    prober, on ``device``) against the task's in-process evaluation (``prepare.py --eval``, what a
    script's own evaluation does), alternately, ``runs`` times each.
    """
    from bench.pipeline.evaluate import CHECKPOINT, stage

    best = result.best
    if best is None:
        raise MeasureError(f"the {task.id} baseline run has no best checkpoint: {result.reason}")
    ckpt = Path(best.path)
    ws = Path(result.workspace)
    eval_dir = stage(task, ws, work / f"eval-{task.id}", ckpt)
    before = [sys.executable, "prepare.py", "--eval", str(ckpt), "--device", device, "--data-dir", str(data_dir)]
    if task.eval_split != "val":
        before += ["--split", task.eval_split]
    after = [sys.executable, "-I", "-m", "bench.scoring.scorer", "--task-dir", str(task.folder)]
    after += ["--data-dir", str(data_dir), "--eval-dir", str(eval_dir), "--checkpoint", CHECKPOINT]
    after += ["--script", best.script, "--device", device]
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root}
    times: dict[str, list[float]] = {"in_process": [], "scorer": []}
    values: dict[str, float | None] = {}
    for _ in range(runs):
        for name, argv, cwd in (("in_process", before, ws), ("scorer", after, work)):
            t0 = time.perf_counter()
            done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env, timeout=1200)
            times[name].append(time.perf_counter() - t0)
            printed = _last_json(done.stdout) or {}
            if done.returncode != 0 or printed.get("error"):
                raise MeasureError(f"{name} evaluation failed: {printed.get('error') or done.stderr[-800:]}")
            values[name] = printed.get("value")
    inp, sc = statistics.median(times["in_process"]), statistics.median(times["scorer"])
    return {
        "checkpoint": ckpt.name,
        "runs": runs,
        "in_process_s": inp,
        "scorer_s": sc,
        "ratio": sc / inp,
        "in_process_value": values["in_process"],
        "scorer_value": values["scorer"],
    }


def replay_epsilon(task: Task, result, data_dir: Path, work: Path, device: str, batches: int = 400) -> dict:
    """How far a cold replay on ``device`` lies from the scored predictor's answers.

    For the baseline run's best checkpoint: the epsilon the scorer's probes must allow on this task
    (``[scoring] cuda_replay_tolerance`` in its task.toml;
    :func:`bench.scoring.scorer.task_tolerance`), measured the way the scorer probes.

    A sandboxed predictor answers the feed's first ``batches`` batches in order (the scored one);
    after it ended a fresh one replays the second half of them cold, then the batch probe's shape (8
    consecutive samples, reversed, one fewer, in one batch). Each is compared as
    :func:`bench.scoring.checks.disagreement` does: max |a - b| over the max |b| of the scored
    answers. ``bitwise`` says whether every replayed answer was identical.
    """
    import numpy as np

    from bench.pipeline.evaluate import CHECKPOINT, stage
    from bench.scoring.scorer import load_task_module, sandbox_wrap, task_tolerance
    from bench.scoring.session import Session

    best = result.best
    if best is None:
        raise MeasureError(f"the {task.id} baseline run has no best checkpoint: {result.reason}")
    eval_dir = stage(task, Path(result.workspace), work / f"replay-{task.id}", Path(best.path))
    prepare = load_task_module(task.folder)
    feed = [x for x, _ in prepare.eval_batches(prepare.EVAL_SPLIT, str(data_dir), prepare.FEED_BATCH_SIZE)]
    feed = feed[:batches]
    half = len(feed) // 2
    rows = [(b, r) for b in range(half, len(feed)) for r in range(len(next(iter(feed[b].values()))))][:8][::-1][:-1]
    probe = {k: np.concatenate([feed[b][k][r : r + 1] for b, r in rows]) for k in feed[0]}
    box = sandbox_wrap(eval_dir, device)

    def session() -> Session:
        log = eval_dir.with_suffix(".replay.log")
        return Session(eval_dir, CHECKPOINT, best.script, device=device, timeout_s=900, log=log, wrap=box.wrap)

    try:
        with session() as scored:
            outputs = [scored.predict(x).astype(np.float64) for x in feed]
        with session() as fresh:
            replays = [fresh.predict(x).astype(np.float64) for x in feed[half:]]
            batch = fresh.predict(probe).astype(np.float64)
    finally:
        box.close()
        box.limits.remove()

    def relative(got: np.ndarray, expected: np.ndarray) -> float:
        return float(np.abs(got - expected).max(initial=0.0)) / max(float(np.abs(expected).max(initial=0.0)), 1e-6)

    replay = max(relative(g, e) for g, e in zip(replays, outputs[half:], strict=True))
    expected = np.concatenate([outputs[b][r : r + 1] for b, r in rows])
    allowed = task_tolerance(task.folder, device)
    return {
        "checkpoint": Path(best.path).name,
        "batches": len(feed),
        "replayed": len(feed) - half,
        "replay_max_relative": replay,
        "bitwise": all(np.array_equal(g, e) for g, e in zip(replays, outputs[half:], strict=True)),
        "batch_probe_max_relative": relative(batch, expected),
        "tolerance": {"replay": allowed.replay, "batch": allowed.batch},
        # what to write into the task's task.toml: ten times the measured noise, never under 1e-6
        "suggested_cuda_replay_tolerance": max(10 * replay, 1e-6),
    }


def gpu_processes() -> dict:
    """The compute processes on the GPU now (nvidia-smi); the kit runs this last.

    None may be left.
    """
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {"tool": None, "processes": []}
    done = subprocess.run(
        [smi, "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        return {"tool": "nvidia-smi", "error": done.stderr.strip()[-300:], "processes": []}
    rows = [line.strip() for line in done.stdout.splitlines() if line.strip() and "No running" not in line]
    return {"tool": "nvidia-smi", "processes": rows}
