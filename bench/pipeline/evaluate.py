"""Evaluate (pipeline step 5; paper §3.3 step 5 and rule 8): the ORIGINAL prepare.py scores each candidate checkpoint.

The evaluation happens outside the agent's workspace, in a fresh folder holding the task's
original ``prepare.py`` (never the workspace copy), the agent's top-level scripts (for their
``build_model``) and nothing else; the data are read from the harness's prepared cache. It
runs in a subprocess without the tracer, and what it prints is the official result.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.pipeline.collect import Selection
from bench.pipeline.workspace import Workspace
from bench.result import Evaluation, Official
from bench.tasks import Task, data

# An agent script that trains at import time (no `if __name__ == "__main__":` guard) would hang
# the evaluation; this bounds it (BENCH_EVAL_TIMEOUT, seconds).
EVAL_TIMEOUT_S = float(os.environ.get("BENCH_EVAL_TIMEOUT", 15 * 60))


def default_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def stage(task: Task, workspace: Path, dest: Path) -> Path:
    """Build the evaluation folder: the original locked files + the workspace's scripts (not its locked copies)."""
    dest.mkdir(parents=True, exist_ok=True)
    for script in workspace.glob("*.py"):
        if script.name not in task.locked_files:
            shutil.copy2(script, dest / script.name)
    for name in task.locked_files:
        shutil.copy2(task.file(name), dest / name)
    return dest


def evaluate(
    task: Task,
    checkpoint: Path,
    eval_dir: Path,
    data_dir: Path,
    *,
    script: str | None = None,
    device: str | None = None,
    timeout_s: float = EVAL_TIMEOUT_S,
) -> Official:
    """Run ``prepare.py --eval`` in ``eval_dir``: its JSON as an :class:`Official` score, or why there is none."""
    cmd = [
        sys.executable,
        "prepare.py",
        "--eval",
        str(checkpoint),
        "--data-dir",
        str(data_dir),
        "--device",
        device or default_device(),
    ]
    if script:
        cmd += ["--script", script]
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCH_") and k != "PYTHONPATH"}
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, cwd=eval_dir, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return Official.from_dict({"error": f"evaluation exceeded {timeout_s:.0f} s", "checkpoint": str(checkpoint)})
    result = _last_json(proc.stdout)
    if result is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        result = {"error": f"prepare.py --eval printed no JSON (exit {proc.returncode}): " + " | ".join(tail)}
    elif proc.returncode != 0 and "error" not in result:
        result["error"] = f"prepare.py --eval exited {proc.returncode}"
    result.setdefault("checkpoint", str(checkpoint))
    result["eval_wall_s"] = round(time.time() - t0, 3)
    return Official.from_dict(result)


def evaluate_candidates(
    ws: Workspace, selection: Selection, data_dir: Path, device: str, console: bool = True
) -> list[Evaluation]:
    """Official evaluation of each distinct candidate (the overall best first, then each window's best).

    The prepared data are verified first: if anything changed them during the run, no candidate is scored
    against them and each evaluation carries the reason instead.
    """
    done: dict[Path, Official] = {}
    try:
        data.verify_prepared(ws.task)
    except data.DataError as e:
        done = {ckpt.path: Official.from_dict({"error": str(e)}) for _, ckpt in selection.candidates()}
    out = []
    for label, ckpt in selection.candidates():
        if ckpt.path not in done:
            eval_dir = stage(ws.task, ws.path, ws.eval_dir / f"{len(done):02d}-{ckpt.path.stem}"[:120])
            if console:
                print(f"[bench] evaluating {label}: {ckpt.path.name} (val {ckpt.val_score:.4f})", flush=True)
            done[ckpt.path] = evaluate(ws.task, ckpt.path, eval_dir, data_dir, device=device)
        out.append(Evaluation(candidate=label, official=done[ckpt.path], **ckpt.to_dict()))
    return out


def _last_json(stdout: str) -> dict | None:
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None
