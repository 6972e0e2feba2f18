"""``bench baselines tune``: tune a task's baseline outside a campaign, under the benchmark's own protocol.

Tuning is one run of the ``optuna`` agent through ``bench.runner.run``: the same workspace, watchdog,
tracer, checkpoint selection, isolated official evaluation and audit as any agent, logged to MLflow (its
own campaign, ``baselines`` by default). The study lives in an Optuna storage (SQLite beside the MLflow
store by default, or any RDB URL), so it can be watched with ``bench baselines optuna-dashboard``.

The outcome is written to ``baselines/results/<task>.json``: the best configuration, its validation score
and the official score of its checkpoint, the trial counts, the budget, the hardware and the date. These
files are the calibration rows of ``bench report`` (Baseline, Optuna-tuned, agents).
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

from bench.paths import mlruns_dir
from bench.pipeline.workspace import ARTIFACTS
from bench.result import RunResult
from bench.runspec import GRACE_S

RESULTS_DIR = Path(__file__).resolve().parent / "results"
RESULT_KEYS = (  # what `bench report` reads; more keys may follow them
    "task",
    "metric",
    "direction",
    "config",
    "val_score",
    "official_score",
    "trials",
    "pruned",
    "budget_s",
    "hardware",
    "date",
    "mlflow_run_id",
    "storage",
)


def default_storage() -> str:
    """The Optuna storage of ``bench baselines tune``: SQLite in a folder of its own beside the MLflow store
    (``mlruns/optuna/optuna.db``). Its own folder, because the sandboxed optuna agent must write it (and SQLite
    its journal beside it) while the tracking store stays out of the sandbox's reach."""
    return f"sqlite:///{mlruns_dir() / 'optuna' / 'optuna.db'}"


def hardware() -> str:
    """One line: the accelerator (or CPU model and cores), torch version, CUDA or not."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        import torch

        torch_v = torch.__version__
        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_name(0)
            return f"{gpu} (CUDA {torch.version.cuda}), {cpu} x{cores}, torch {torch_v}"
        return f"{cpu}, {cores} cores, no GPU (CPU only), torch {torch_v}"
    except ImportError:
        return f"{cpu}, {cores} cores, torch not installed"


def load_results(results_dir: Path | None = None) -> dict[str, dict]:
    """task id -> committed tuned result (``baselines/results/<task>.json``), for ``bench report``."""
    folder = Path(results_dir) if results_dir else RESULTS_DIR
    out = {}
    for f in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        data = json.loads(f.read_text())
        out[data.get("task", f.stem)] = data
    return out


def tune(
    task_key: str,
    *,
    budget_s: float | None = None,
    trials: int | None = None,
    storage: str | None = None,
    campaign: str = "baselines",
    seed: int = 0,
    study: str | None = None,
    out: Path | None = None,
    write: bool = True,
    console: bool = True,
    grace_s: float = GRACE_S,
    options: dict[str, str] | None = None,
) -> dict:
    """Run the optuna agent on one task and return (and write) the tuned result."""
    from bench.runner import RunSpec, run
    from bench.tasks import get_task

    task = get_task(task_key)
    storage = storage or default_storage()
    if storage.startswith("sqlite:///"):
        Path(storage.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    study = study or f"{task.id}-tune-{time.strftime('%Y%m%d-%H%M%S')}"
    extra_options, options = options, {"seed": str(seed), "storage": storage, "study": study}
    if trials:
        options["trials"] = str(trials)
    options.update(extra_options or {})
    result = run(
        RunSpec(
            task=task,
            agent="optuna",
            campaign=campaign,
            budget_s=budget_s,
            grace_s=grace_s,
            options=options,
            console=console,
        )
    )
    tuned = summarise(result, storage=storage, study=study, seed=seed)
    if write and tuned.get("official_score") is not None:
        path = Path(out) if out else RESULTS_DIR / f"{task.id}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(tuned, indent=2) + "\n")
        tuned["written_to"] = str(path)
    return tuned


def summarise(result: RunResult, *, storage: str, study: str, seed: int) -> dict:
    """The results file's content from a finished optuna agent run (its result and study summary)."""
    summary_file = Path(result.workspace) / ARTIFACTS / "study.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    best = result.best
    records = {r["script"]: r for r in summary.get("trial_records", [])}
    record = records.get(best.script) if best else None
    config = dict(record["config"]) if record else {}
    states = summary.get("states", {})
    return {
        "task": result.run.task,
        "metric": result.metric,
        "direction": str(result.direction),
        "config": config,
        "val_score": best.val_score if best else None,
        "official_score": result.score,
        "trials": summary.get("trials", result.scripts.get("launched", 0)),
        "pruned": states.get("PRUNED", 0),
        "budget_s": result.run.budget_s,
        "hardware": hardware(),
        "date": time.strftime("%Y-%m-%d", time.localtime(result.started_at)),
        "mlflow_run_id": result.mlflow_run_id,
        "storage": storage,
        # more detail for people (bench report reads only the keys above)
        "study_name": study,
        "seed": seed,
        "split": result.split,
        "paper_baseline_score": result.baseline_score,
        "status": result.status,
        "campaign": result.run.campaign,
        "best_trial": record["number"] if record else None,
        "script": best.script if best else None,
        "params": record["params"] if record else {},
        "states": states,
        "wall_time_s": result.wall_time_s,
        "eval_device": result.run.device,
        "stop_reason": summary.get("stop_reason", ""),
        "run_dir": result.run_dir,
    }
