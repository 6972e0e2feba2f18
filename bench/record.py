"""Record (paper Fig. 2, last step): a finished run's result.json and files -> its MLflow agent run.

Works from files only (``result.json``, the spool, the log, the scripts), so a run whose
tracking failed is recorded later, unchanged, by ``bench record RUN_DIR``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from bench.tracking import schema
from bench.tracking.relay import Relay
from bench.tracking.runs import Recorder
from bench.workspace import Workspace


def record(recorder: Recorder, result: dict, ws: Workspace) -> str:
    """Write everything about the run to MLflow and return the agent run id (raises TrackingError)."""
    tags = {
        schema.KIND: schema.KIND_AGENT,
        schema.CAMPAIGN: result["campaign"],
        schema.AGENT: result["agent"],
        schema.MODEL: result.get("model") or "",
        schema.TASK: result["task"],
        schema.REPEAT: result["repeat"],
        schema.WORKSPACE: result["run_dir"],
    }
    run_id = result.get("mlflow_run_id")
    if not run_id:
        name = f"{result['task']}-{result['agent']}-r{result['repeat']}"
        run_id = recorder.create_run(name, tags, start_time=result["started_at"])
    base = {k: tags[k] for k in (schema.CAMPAIGN, schema.AGENT, schema.TASK, schema.REPEAT)}
    scripts = Relay(recorder, run_id, ws.spool_dir, base, (ws.path / "train.py").read_text()).finalize()

    recorder.log_params(
        run_id,
        {
            "agent": result["agent"],
            "model": result.get("model") or "",
            "task": result["task"],
            "repeat": result["repeat"],
            "budget_minutes": result["budget_s"] / 60,
            "grace_s": result["grace_s"],
            "metric": result["metric"],
            "direction": result["direction"],
            "eval_split": result["split"],
            "device": result["device"],
            "prepare_sha256": result["prepare_sha256"],
            "agent_argv": " ".join(result["agent_argv"]),
        },
    )
    metrics = {
        schema.SUCCESS: 1.0 if result["status"] == "success" else 0.0,
        schema.WALL_TIME: result["wall_time_s"],
        schema.BUDGET_UTILISATION: result["budget_utilisation"],
        schema.SCRIPTS_LAUNCHED: scripts["launched"],
        schema.CHECKPOINTS: result["checkpoints_found"],
        schema.LAUNCHES_OBSERVED: len(result.get("launches_observed", [])),
    }
    if result.get("score") is not None:
        metrics[schema.SCORE] = result["score"]
        metrics[schema.official_metric(result["metric"])] = result["score"]
        metrics[schema.BEST_VAL] = result["best_val_score"]
    recorder.log_metrics(run_id, [(k, v, 0, None) for k, v in metrics.items()])
    _record_evaluations(recorder, run_id, result, base)

    agent_metrics = (result.get("agent_events") or {}).get("metrics") or {}
    recorder.log_metrics(run_id, [(k, v, 0, None) for k, v in agent_metrics.items() if v is not None])
    for f in (ws.log, ws.events, ws.result_file):
        recorder.log_artifact(run_id, f)
    for script in ws.scripts():
        recorder.log_artifact(run_id, script, "scripts")
    extra = ws.path / ".bench" / "artifacts"  # files an agent adapter leaves for its run (e.g. a study summary)
    for f in sorted(extra.rglob("*")) if extra.is_dir() else []:
        if f.is_file():
            recorder.log_artifact(run_id, f, str(Path("agent") / f.parent.relative_to(extra)).rstrip("/."))
    recorder.set_tags(run_id, {schema.RUN_NOTE: _note(result, scripts)})
    recorder.set_tags(
        run_id,
        {
            schema.STATUS: result["status"],
            schema.REASON: result["reason"][:500],
            schema.PARTIAL_DATA: str(bool(result.get("partial_data"))).lower(),
            schema.PARTIAL_NOTES: "\n".join(result.get("partial_data_notes") or [])[:5000],
        },
    )
    mlflow_status = {"success": "FINISHED", "interrupted": "KILLED"}.get(result["status"], "FAILED")
    recorder.end_run(run_id, mlflow_status, result["started_at"] + result["wall_time_s"])
    return run_id


def _note(result: dict, scripts: dict) -> str:
    """The run page's description: the outcome in two lines of Markdown."""
    score = f"{result['score']:.4f}" if result.get("score") is not None else "-"
    notes = result.get("partial_data_notes") or []
    partial = "\n\n**Partial data** (not comparable with the paper): " + "; ".join(notes) if notes else ""
    return (
        f"**{result['status']}**: {result['metric']} {score} on {result['split']} "
        f"(baseline {result['baseline_score']:g}); {scripts['launched']} scripts launched, "
        f"{result['wall_time_s'] / 60:.1f} of {result['budget_s'] / 60:g} min used.\n\n{result['reason']}{partial}"
    )


def _record_evaluations(recorder: Recorder, run_id: str, result: dict, base: dict) -> None:
    """One eval child run per evaluated checkpoint; the anytime curve as a metric series on the agent run."""
    seen: dict[str, str] = {}
    anytime = []
    for e in result["evaluations"]:
        official = e["official"]
        value = official.get("value")
        if e["path"] not in seen:
            tags = {**base, schema.KIND: schema.KIND_EVAL, schema.CANDIDATE: e["candidate"], schema.SCRIPT: e["script"]}
            if "error" in official:
                tags[schema.REASON] = str(official["error"])[:500]
            eval_run = recorder.create_run(f"eval {Path(e['path']).name}"[:250], tags, parent=run_id)
            rows = [
                (schema.EVAL_VAL_SCORE, e["val_score"], 0, None),
                (schema.EVAL_SAVED_MINUTES, e["saved_s"] / 60, 0, None),
            ]
            if value is not None:
                rows.append((schema.official_metric(result["metric"]), value, 0, None))
            recorder.log_metrics(eval_run, rows)
            recorder.log_text(eval_run, json.dumps(official, indent=2), "official.json")
            recorder.end_run(eval_run, "FAILED" if "error" in official else "FINISHED")
            seen[e["path"]] = eval_run
        else:
            recorder.set_tags(seen[e["path"]], {schema.CANDIDATE: "best," + e["candidate"]})
        if e["candidate"].startswith("window-") and value is not None and math.isfinite(value):
            anytime.append((schema.ANYTIME, value, int(math.ceil(e["saved_s"] / 60)), None))
    recorder.log_metrics(run_id, anytime)


def load_result(run_dir: Path) -> tuple[dict, Workspace]:
    """Read a run directory back (for ``bench record``)."""
    from bench.tasks import get_task

    result = json.loads((Path(run_dir) / "result.json").read_text())
    return result, Workspace(Path(run_dir), get_task(result["task"]))
