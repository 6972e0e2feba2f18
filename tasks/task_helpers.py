# =============================================================================
# task_helpers.py: the checkpoint and logging helpers of every task. LOCKED.
# Do not modify: the harness evaluates with the original copy of this file.
#
# Every task's prepare.py imports these, so your training scripts get them
# from prepare as before:
#     from prepare import log_metrics, save_checkpoint
# They are the output contract (paper rule 7): every training script saves its
# models through save_checkpoint() so that the harness can find them, rank them
# by the validation score the script reports, and rebuild them for the
# official evaluation:
#     model = build_model(payload["config"]); model.load_state_dict(sd, strict=True)
# The two helpers that need the task's metric and evaluation, save_checkpoint()
# and self_check(), are given them by prepare.py.
# =============================================================================

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time

import torch
import torch.nn as nn

CHECKPOINT_DIR = "checkpoints"  # where the harness looks for your checkpoints
CHECKPOINT_FORMAT = "1gc-7rc/checkpoint-v1"


def run_seed(default: int) -> int:
    """The seed to train with: the harness's seed for this run when it gave one
    (BENCH_SEED: each repeat of the baseline draws its own, so that repeats
    measure the task's run-to-run noise), else your CONFIG's."""
    value = os.environ.get("BENCH_SEED", "")
    return int(value) if value.isdigit() else default


# ---------------------------------------------------------------------------
# Logging: your metrics reach MLflow through the harness
# ---------------------------------------------------------------------------

_spool = None  # the open spool file (one line-buffered append per event: microseconds, no MLflow)


def _trace(event: dict) -> None:
    """Append one event to the harness's spool file, if the harness set one.

    Standard library only and a no-op outside the harness, so it costs nothing
    when you run a script by hand. The harness relays these lines to MLflow.
    """
    global _spool
    path = os.environ.get("BENCH_SPOOL_FILE")
    if not path:
        return
    try:
        if _spool is None or _spool.name != path:
            _spool = open(path, "a", buffering=1, encoding="utf-8")
        _spool.write(json.dumps(event, default=str) + "\n")
    except OSError:
        pass  # tracing must never break training


def log_metrics(step: int, **metrics: float) -> None:
    """Trace one set of metrics at full precision, then print it (`step 100 | loss 1.2300 | val_bpb 2.3100`)."""
    values = {k: float(v) for k, v in metrics.items()}
    _trace({"ev": "metrics", "t": time.time(), "step": int(step), "metrics": values})
    print(f"step {step} | " + " | ".join(f"{k} {v:.4f}" for k, v in values.items()), flush=True)


# ---------------------------------------------------------------------------
# Checkpoints: saved by your scripts, rebuilt by the evaluation
# ---------------------------------------------------------------------------


def save_checkpoint(
    model: nn.Module,
    config: dict,
    val_score: float,
    metric: str,
    *,
    step: int | None = None,
    path: str | None = None,
) -> str:
    """Save a scored checkpoint into checkpoints/ and return its path.

    `config` must be plain Python values (numbers, strings, lists, dicts): it is
    stored beside the weights and passed back to your script's build_model().
    `val_score` is your own measurement of `metric` (the task's METRIC) on the
    validation split. The state dict is saved as is: evaluation loads it with
    strict=True, so a torch.compile()d model must be saved via model._orig_mod.
    """
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "unknown"
    if path is None:
        os.makedirs(CHECKPOINT_DIR, exist_ok=True)
        stem = os.path.splitext(script)[0]
        tag = f"step{step}_" if step is not None else ""
        path = os.path.join(CHECKPOINT_DIR, f"{stem}_{tag}{metric}{float(val_score):.4f}_{time.time_ns()}.pt")
    payload = {
        "format": CHECKPOINT_FORMAT,
        "state_dict": model.state_dict(),
        "config": config,
        "script": script,
        "val_score": float(val_score),
        "metric": metric,
        "step": step,
        "time": time.time(),
    }
    tmp = path + ".tmp"
    torch.save(payload, tmp)
    os.replace(tmp, path)  # atomic: the harness never sees half a file
    has_parameters = any(True for _ in model.parameters())
    _trace(
        {
            "ev": "checkpoint",
            "t": time.time(),
            "path": os.path.abspath(path),
            "val_score": float(val_score),
            "metric": metric,
            "step": step,
            "config": config,
            "n_params": sum(p.numel() for p in model.parameters()),
            "device": str(next(model.parameters()).device) if has_parameters else "cpu",
        }
    )
    return path


def load_checkpoint(path: str) -> dict:
    """Load a checkpoint payload (weights_only: a checkpoint cannot run code)."""
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(payload, dict) or "state_dict" not in payload or "config" not in payload:
        raise ValueError(f"{path} is not a checkpoint saved by save_checkpoint(): it needs 'state_dict' and 'config'")
    return payload


def load_build_model(script_path: str):
    """Import build_model from a training script without running its training."""
    spec = importlib.util.spec_from_file_location("_scored_script", script_path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script_path)))
    spec.loader.exec_module(module)  # scripts must guard training with `if __name__ == "__main__":`
    if not hasattr(module, "build_model"):
        raise AttributeError(f"{script_path} has no build_model(config) function (rule 7)")
    return module.build_model


def rebuild_model(payload: dict, script_path: str) -> nn.Module:
    """build_model(config) + load_state_dict(strict=True): exactly what the official evaluation does."""
    model = load_build_model(script_path)(payload["config"])
    try:
        model.load_state_dict(payload["state_dict"], strict=True)
    except RuntimeError as e:
        hint = ""
        if any(str(k).startswith("_orig_mod.") for k in payload["state_dict"]):
            hint = (
                " The keys start with '_orig_mod.': the model was saved after torch.compile();"
                " save the original module, save_checkpoint(model._orig_mod, ...)."
            )
        raise ValueError(
            f"the saved state_dict does not fit build_model(config) from {script_path} "
            f"under strict=True.{hint} Details: {e}"
        ) from e
    return model


# ---------------------------------------------------------------------------
# Your own check of a checkpoint (prepare.py --eval)
# ---------------------------------------------------------------------------


def self_check(
    checkpoint: str,
    script: str | None,
    split: str,
    *,
    evaluate,
    task_id: str,
    metric: str,
    direction: str,
    **eval_options,
) -> dict:
    """Your own check of one checkpoint: rebuilt as the harness rebuilds it, scored by the task's evaluate() in this
    process (with `eval_options`: data_dir, device, batch_size...); the result names the task, its metric and
    which way the metric improves.

    The official score comes from the harness, not from here: a sandboxed process runs the model and a
    separate scorer, which never runs your code, holds the labels (of a test split: outside your workspace).
    """
    start = time.time()
    if not os.path.isfile(checkpoint):
        raise FileNotFoundError(f"checkpoint {checkpoint} does not exist")
    try:
        payload = load_checkpoint(checkpoint)
    except Exception as e:
        raise ValueError(f"cannot read checkpoint {checkpoint}: {e} (save it with prepare.save_checkpoint())") from e
    given, script = script, script or payload.get("script")
    if not script or not os.path.isfile(script):
        named = f"--script names {given!r}" if given else f"the checkpoint names {payload.get('script')!r}"
        raise FileNotFoundError(f"training script not found: {named}; pass --script PATH to the script that saved it")
    model = rebuild_model(payload, script)
    result = evaluate(model.to(eval_options.get("device", "cpu")), split, **eval_options)
    return {
        "task": task_id,
        "metric": metric,
        "value": result[metric],
        "direction": direction,
        "split": split,
        "checkpoint": checkpoint,
        "script": script,
        "seconds": round(time.time() - start, 3),
        "n": result["n"],
    }
