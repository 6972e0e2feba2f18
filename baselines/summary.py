"""The study's summary for the agent run's artifacts (``.bench/artifacts/``, logged by the harness under ``agent/``).

study.json (the best trial, states, stop reason, every trial's record), best_config.json, best_params.json and
trials.csv after every trial; importances.json, the plots and a copy of the study's journal file at the end.
"""

from __future__ import annotations

import csv
import json
import shutil
import time
import warnings
from dataclasses import asdict
from pathlib import Path

TRIALS_CSV = (
    "number",
    "script",
    "state",
    "value",
    "epochs",
    "epochs_suggested",
    "duration_s",
    "predicted_s",
    "startup_s",
    "progress_epochs",
    "reports",
    "exit_code",
    "reason",
)
ROUNDED = ("duration_s", "predicted_s", "startup_s")


def write_summary(driver, *, final: bool) -> dict:
    """study.json, best_config.json, trials.csv (every time); importances and plots (final only, if time allows).

    ``driver``: the ``baselines.driver.Driver`` whose study and trial records are summarised (not imported
    here: the driver imports this module).
    """
    out = driver.ws.artifacts
    out.mkdir(parents=True, exist_ok=True)
    study, records = driver.study, driver.clock.records
    by_number = {r.number: r for r in records}
    states: dict[str, int] = {}
    for r in records:
        states[r.state] = states.get(r.state, 0) + 1
    ours = [r for r in records if r.value is not None and r.state in ("COMPLETE", "CUT")]
    best = driver.ws.direction.best(ours, key=lambda r: r.value)
    summary = {
        "task": driver.space.task,
        "metric": driver.ws.metric,
        "direction": driver.ws.direction.value,
        "study_name": study.study_name,
        "storage": driver.storage_url,
        "sampler": type(study.sampler).__name__,
        "pruner": type(study.pruner).__name__,
        "seed": driver.seed,
        "budget_s": driver.budget_s,
        "deadline": driver.clock.deadline,
        "trials": len(records),
        "states": states,
        "pruned": states.get("PRUNED", 0),
        "stop_reason": driver.stop_reason,
        "final": final,
        "best": None,
    }
    if best is not None:
        summary["best"] = {
            "trial": best.number,
            "script": best.script,
            "value": best.value,
            "params": best.params,
            "config": best.config,
            "epochs": best.epochs,
            "duration_s": round(best.duration_s or 0.0, 2),
            "state": best.state,
        }
        (out / "best_config.json").write_text(json.dumps(best.config, indent=2, default=str))
        (out / "best_params.json").write_text(json.dumps(best.params, indent=2, default=str))
    with open(out / "trials.csv", "w", newline="", encoding="utf-8") as f:
        names = sorted({k for r in records for k in r.params})
        w = csv.writer(f)
        w.writerow([*TRIALS_CSV, *(f"params_{n}" for n in names)])
        for r in records:
            row = asdict(r)
            for key in ROUNDED:
                row[key] = None if row[key] is None else round(row[key], 2)
            w.writerow([*(row[key] for key in TRIALS_CSV), *(r.params.get(n, "") for n in names)])
    if final:
        summary["importances"] = importances(study, out)
        if time.time() < driver.clock.deadline + 10:  # the harness's grace period is 30 s: plots take a few
            summary["plots"] = plots(study, out)
        journal = driver.journal_path
        if journal is not None and journal.is_file():
            shutil.copy2(journal, out / journal.name)
    summary["trial_records"] = [asdict(by_number[n]) for n in sorted(by_number)]
    (out / "study.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary


def importances(study, out: Path) -> dict | str:
    """fANOVA parameter importances into importances.json; why not, when they cannot be computed."""
    import optuna

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            imp = optuna.importance.get_param_importances(study)
    except Exception as e:  # too few completed trials, a single value, ...
        return f"not computed: {type(e).__name__}: {e}"
    imp = {k: float(v) for k, v in imp.items()}
    (out / "importances.json").write_text(json.dumps(imp, indent=2))
    return imp


def plots(study, out: Path) -> list[str]:
    """Optimisation history, intermediate values and importances as PNGs (``<name>.txt`` says why one is missing)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as vis

    made = []
    for name, fn in (
        ("optimization_history.png", vis.plot_optimization_history),
        ("intermediate_values.png", vis.plot_intermediate_values),
        ("param_importances.png", vis.plot_param_importances),
    ):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ax = fn(study)
                fig = (ax if not hasattr(ax, "flat") else ax.flat[0]).figure
                fig.set_size_inches(8, 5)
                fig.tight_layout()
                fig.savefig(out / name, dpi=100)
                plt.close(fig)
            made.append(name)
        except Exception as e:  # e.g. importances with fewer than two completed trials
            (out / (name + ".txt")).write_text(f"not drawn: {type(e).__name__}: {e}\n")
        plt.close("all")
    return made
