"""Record (pipeline step 7): a finished run's result.json and files -> its MLflow agent run.

``result.json`` is written first (:meth:`~bench.result.RunResult.write`), so a tracking outage loses
nothing. The MLflow side works from files only (``result.json``, the spool, the log, the scripts),
so a run whose tracking failed is recorded later, unchanged, by ``bench record RUN_DIR``.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from bench import protocol, untrusted
from bench.gateway import metering, transcript
from bench.markup import md_text
from bench.pipeline import state, traces, uploads
from bench.pipeline.workspace import Workspace
from bench.result import RunResult
from bench.tasks import TaskError, packs
from bench.tracking import accounting, relay_state, schema, sysmetrics
from bench.tracking.relay import Relay
from bench.tracking.writer import MlflowWriter, TrackingError

# the audit's evidence files logged with the agent run (the manifests and copied sources stay in the
# run directory)
EVIDENCE_ARTIFACTS = (
    "network.jsonl",
    "processes.jsonl",
    "launches.jsonl",
    "arrivals.jsonl",
    "commands.jsonl",
    "llm.jsonl",  # the metering gateway's line per LLM request (bench.gateway.proxy): no bodies, no keys
)


def relay_for(writer: MlflowWriter, run_id: str | None, ws: Workspace, result_tags: dict[str, str]) -> Relay:
    """The relay of a run's spool.

    Uploads only from its ``checkpoints/``, diffs against the task's own train.py, keeps its
    progress in the run directory (out of the agent's reach).
    """
    return Relay(
        writer,
        run_id,
        ws.spool_dir,
        result_tags,
        ws.task.file("train.py").read_text(),
        checkpoints_dir=ws.checkpoints,
        state_file=ws.relay_state,
    )


def open_agent_run(
    writer: MlflowWriter, name: str, tags: dict[str, str], start_time: float | None = None
) -> str | None:
    """Create the agent run at the start, so the UI shows it live.

    None (and one line) if tracking is down. ``start_time``: when the run began (before the agent's
    launch), whenever the store answers.
    """
    try:
        return writer.create_run(name, tags, start_time=start_time)
    except TrackingError as e:
        print(f"[bench] tracking unavailable, the run goes on and is recorded at the end: {e}", flush=True)
        return None


def save(result: RunResult, writer: MlflowWriter, ws: Workspace) -> RunResult:
    """Write result.json, then record it in MLflow.

    An unreachable store only costs a message saying what to do, a disk that refuses result.json
    (full) a :class:`~bench.pipeline.state.RunStateError` saying what to do.

    The agent's files to upload are copied through the hostile-input boundary first
    (:mod:`~bench.pipeline.uploads`), so that what it refused is counted in the first
    ``result.json`` already, tracking or not.
    """
    with tempfile.TemporaryDirectory(prefix="bench-upload-") as tmp:
        staged = _stage(result, ws, Path(tmp))
        _write(result, ws)
        try:
            result.mlflow_run_id = record(writer, result, ws, staged)
        except TrackingError as e:
            _tracking_failed(result, ws, e)
    _write(result, ws)
    return result


def _stage(result: RunResult, ws: Workspace, tmp: Path) -> uploads.Staged:
    staged = uploads.stage(ws, tmp)
    _bound_lists(result, staged.tally)
    result.hostile_inputs = staged.tally.to_dict() if staged.tally else {}
    return staged


MAX_REJECTED = 200  # rejected checkpoints listed in result.json (the rest counted): 150,000 files made it 50 MB


def _bound_lists(result: RunResult, tally: untrusted.Tally) -> None:
    """Keep result.json small whatever the agent made.

    Past ``MAX_REJECTED`` the collect step's rejections are one counted line, and a ``too-many``
    finding; each listed path and reason is one printable line.
    """
    rejected = result.rejected_checkpoints
    if len(rejected) > MAX_REJECTED and not (rejected[-1].get("more") if isinstance(rejected[-1], dict) else False):
        more = len(rejected) - MAX_REJECTED
        tally.add(untrusted.Finding("checkpoints/", untrusted.TOO_MANY, f"{len(rejected)} files rejected"))
        rejected = [
            *rejected[:MAX_REJECTED],
            {"path": "...", "reason": f"{more} more rejected, not listed", "more": more},
        ]
    result.rejected_checkpoints = [
        {k: untrusted.plain(v, 500) if isinstance(v, str) else v for k, v in r.items()} if isinstance(r, dict) else r
        for r in rejected
    ]


def _tracking_failed(result: RunResult, ws: Workspace, e: TrackingError) -> None:
    result.tracking_error = str(e)[:2000]  # the run's exit status says it: a campaign sees what to record
    print(
        f"[bench] could not record in MLflow ({e}); everything is in {result.result_file}. "
        f"Record it later with: bench record {ws.run_dir}",
        flush=True,
    )


def _write(result: RunResult, ws: Workspace) -> None:
    try:
        result.write()
    except OSError as e:  # ENOSPC, a read-only mount: one line (free space, then resume), no traceback
        for tmp in ws.run_dir.glob(".result.json.*.tmp"):
            tmp.unlink(missing_ok=True)
        raise state.disk_error(result.result_file, e, ws.run_dir) from e


def record(writer: MlflowWriter, result: RunResult, ws: Workspace, staged: uploads.Staged | None = None) -> str:
    """Write everything about the run to MLflow and return the agent run id.

    Raises TrackingError; clears ``result.tracking_error``. ``staged``: the agent's files already
    copied through the boundary (by :func:`save`); without it (``bench record``) they are staged
    here and ``result.hostile_inputs`` is set from that copy.
    """
    if staged is None:
        with tempfile.TemporaryDirectory(prefix="bench-upload-") as tmp:
            return record(writer, result, ws, _stage(result, ws, Path(tmp)))
    run_id = result.mlflow_run_id
    if not run_id:
        relay_state.check(ws.spool_dir, ws.relay_state)  # an older toolkit's relay: refused before a run is opened
        tags = schema.agent_run_tags(
            result.run.campaign, result.run.agent, result.run.model, result.run.task, result.run.repeat, result.run_dir
        )
        run_id = writer.create_run(result.run.label, tags, start_time=result.started_at)
    base = schema.run_tags(result.run.campaign, result.run.agent, result.run.task, result.run.repeat)
    relay = relay_for(writer, run_id, ws, base)
    relay.finalize()
    relay.keep([(e.path, e.script) for e in result.evaluations])  # the scored files, whatever the upload cap left
    scripts = result.scripts = relay.summary()  # result.json is written again after this (save)

    writer.log_params(
        run_id,
        {
            **schema.spec_params(result.run.to_dict()),  # the run's description (bench.runspec)
            schema.PARAM_METRIC: result.metric,
            schema.PARAM_DIRECTION: str(result.direction),
            schema.PARAM_EVAL_SPLIT: result.split,
            schema.PARAM_PREPARE_SHA256: result.audit.locked_sha256.get("prepare.py", ""),
            schema.PARAM_AGENT_ARGV: " ".join(result.agent_argv),
        },
    )
    metrics = {
        schema.SUCCESS: 1.0 if result.status == "success" else 0.0,
        schema.WALL_TIME: result.wall_time_s,
        schema.BUDGET_UTILISATION: result.budget_utilisation,
        schema.SCRIPTS_LAUNCHED: scripts["launched"],
        schema.CHECKPOINTS: result.checkpoints_found,
        schema.LAUNCHES_OBSERVED: len(result.launches_observed),
        **accounting.metrics(scripts),  # what the relay dropped or left, counted (issue 21)
        **sysmetrics.agent_metrics(scripts),  # the tree's GPU memory peak and mean utilisation (absent without NVML)
    }
    try:
        task = packs.task_for_run(result.run.task, result.run.task_source)
        task_budget_s, reference = task.budget_s, task.reference
    except TaskError:  # a pack's task no longer installed: the run is still recorded, against its own budget
        task_budget_s, reference = result.run.budget_s, None
    found = deviations(result, task_budget_s)
    metrics[schema.TASK_BASELINE] = result.baseline_score
    if result.score is not None:
        metrics[schema.SCORE] = result.score
        if result.baseline_score:  # paper Eq. 1's term: comparable across tasks, higher is better on all
            metrics[schema.REL_IMPROVEMENT] = result.direction.relative(result.score, result.baseline_score)
        if reference is not None:  # MLRC-Bench's gap closed beside Eq. 1: NaN (not logged) unless r beats b
            metrics[schema.TASK_REFERENCE] = reference.score
            gap = result.direction.gap_closed(result.score, result.baseline_score, reference.score)
            if math.isfinite(gap):
                metrics[schema.GAP_CLOSED] = gap
        metrics[schema.official_metric(result.metric)] = result.score
        metrics[schema.BEST_VAL] = result.outcome.best_val_score
    writer.log_metrics(run_id, [(k, v, 0, None) for k, v in metrics.items()])
    _record_evaluations(writer, run_id, result, base)

    agent_metrics = result.agent_events.get("metrics") or {}
    # the metering gateway's series over the run (cumulative; their last points are the totals),
    # else one value
    llm = metering.series(
        metering.read(metering.log_path(ws.run_dir)),
        result.started_at,
        cost=str(result.agent_events.get("cost_source") or "").startswith("gateway"),
    )
    over_time = {k for k, *_ in llm}
    writer.log_metrics(
        run_id, [(k, v, 0, None) for k, v in agent_metrics.items() if v is not None and k not in over_time]
    )
    writer.log_metrics(run_id, llm)
    # what the agent printed or ran may hold a key it echoed: the store gets copies without the
    # harness's secrets
    with tempfile.TemporaryDirectory(prefix="bench-redacted-") as tmp:
        redact = transcript.Redactor(transcript.env_secrets())

        def clean(f: Path, sub: str, shown: bool = False) -> Path:
            (Path(tmp) / sub).mkdir(exist_ok=True)
            return transcript.redacted_copy(f, Path(tmp) / sub, redact, shown=shown)

        for f in (ws.log, ws.events):  # agent.log as a person reads it: through the console filter (bench.markup)
            if f.is_file():
                writer.log_artifact(run_id, clean(f, "run", shown=f == ws.log))
        writer.log_artifact(run_id, ws.result_file)
        evidence = ws.run_dir / "evidence"  # the audit's evidence that a person reads beside audit.json (small files)
        for name in EVIDENCE_ARTIFACTS:
            if (evidence / name).is_file():
                writer.log_artifact(run_id, clean(evidence / name, "evidence"), "evidence")
        for script in staged.scripts:  # harness-owned copies made through bench.untrusted (uploads.stage)
            writer.log_artifact(run_id, clean(script, "scripts"), "scripts")
    # files an agent adapter leaves for its run (e.g. the optuna agent's study summary), copied the
    # same way
    for f, folder in staged.artifacts:
        writer.log_artifact(run_id, f, folder)
    writer.set_tags(
        run_id,
        {
            schema.RUN_NOTE: _note(result, scripts, found),
            schema.STATUS: result.status,
            schema.REASON: result.reason[:500],
            schema.PARTIAL_DATA: str(result.partial_data).lower(),
            schema.SANDBOXED: str(result.sandboxed).lower(),
            schema.RELAY_DROPPED: "\n".join(accounting.lines(scripts))[:5000],
            schema.GPU_METRICS: sysmetrics.note(scripts)[:500],
            schema.COST_SOURCE: str(result.agent_events.get("cost_source") or "unknown"),
            schema.API_BUDGET: metering.budget_tag(result.agent_events, result.started_at)[:500],
            schema.LIMITS_HIT: ",".join(dict.fromkeys(str(h.get("limit")) for h in result.limits.get("hit", []))),
            schema.ENTRY: schema.entry_label(result.run.agent, result.run.model),
            schema.GROUP: schema.group_label(result.run.task, schema.entry_label(result.run.agent, result.run.model)),
            **schema.protocol_tags(
                budget_s=result.run.budget_s,
                task_budget_s=task_budget_s,
                hardware=_hardware(result),
                device=result.run.device,
                deviations=found,
            ),
            schema.PARTIAL_NOTES: "\n".join(result.partial_data_notes)[:5000],
            schema.TOO_SHORT: too_short(result)[:500],
            **schema.audit_tags(result.audit.violations),
            **schema.task_source_tags(result.run.task_source),
            **schema.spec_tags(result.run.to_dict()),
        },
    )
    writer.log_text(run_id, json.dumps(result.audit.to_dict(), indent=2), schema.AUDIT_ARTIFACT)
    # the agent's conversation (LLM requests and tool calls) as one MLflow trace; a failure only
    # tags the run
    writer.set_tags(run_id, {schema.TRACE: traces.record(writer, run_id, result, ws.run_dir, ws.events)})
    mlflow_status = {"success": "FINISHED", "interrupted": "KILLED"}.get(result.status, "FAILED")
    writer.end_run(run_id, mlflow_status, result.started_at + result.wall_time_s)
    result.tracking_error = None
    return run_id


def deviations(result: RunResult, task_budget_s: float) -> list[protocol.Deviation]:
    """How the run left the paper's protocol (budget, hardware, sandbox, data, cut short).

    Empty when it did not.
    """
    return protocol.deviations(
        budget_s=result.run.budget_s,
        task_budget_s=task_budget_s,
        hardware=_hardware(result),
        sandboxed=result.sandboxed,
        partial_data=result.partial_data,
        cut_short_at_s=result.wall_time_s if result.interrupted else None,
    )


def _hardware(result: RunResult) -> str:
    return result.hardware  # the evaluation device in words, as the runner recorded it (bench.protocol)


SHORT_AGENTS = ("baseline",)  # agents whose whole job is the task's own train.py: stopped by the budget, it was cut


def too_short(result: RunResult) -> str:
    """Why the run is too short to compare ("" when it is not).

    The budget, not the training's end, stopped the task's own baseline training (the demo's
    8-minute T1 on a CPU reaches a fraction of the steps it needs), so its score is that of a model
    trained for a fraction of its schedule, not the baseline's. The steps: the last scored
    checkpoint's.
    """
    if result.run.agent not in SHORT_AGENTS or not result.timed_out:
        return ""
    steps = [e.step for e in result.evaluations if e.step is not None]
    reached = f"step {max(steps)}" if steps else "no scored step"
    return (
        f"the {result.run.budget_s / 60:g} min budget ended the baseline's own training at {reached}, before its "
        "train.py finished: the score is of a model trained for part of its schedule, not comparable with the "
        "baseline's"
    )


def _note(result: RunResult, scripts: dict, found: list[protocol.Deviation]) -> str:
    """The run page's description.

    The outcome in two lines of Markdown, then how it left the protocol. Every text that can carry
    an agent's choice (the reason names its checkpoints and scripts) goes in escaped
    (:func:`bench.markup.md_text`): a checkpoint named like a link or an HTML tag shows as its name.
    """
    score = f"{result.score:.4f}" if result.score is not None else "-"
    notes = result.partial_data_notes
    partial = "\n\n**Partial data** (not comparable with the paper): " + md_text("; ".join(notes)) if notes else ""
    if short := too_short(result):
        partial += "\n\n**Too short to compare**: " + short  # the harness's own words
    if found:  # the harness's own words (hardware from nvidia-smi or /proc/cpuinfo): no agent text
        partial += "\n\n**Non-standard** (left out of comparisons with the paper): " + md_text(
            "; ".join(map(str, found))
        )
    if relayed := accounting.lines(scripts):
        partial += "\n\n**Relay** (values or checkpoints that did not reach MLflow; details in result.json): "
        partial += "; ".join(relayed)  # the relay's own words and counts: no agent-chosen text
    if hit := result.limits.get("hit"):
        partial += "\n\n**Limits hit**: " + md_text(", ".join(str(h.get("limit")) for h in hit))
    if (gpu := sysmetrics.note(scripts)) not in ("", "nvml"):
        partial += "\n\n**System metrics**: " + gpu  # the harness's own words (no agent text): "no GPU metrics ..."
    return (
        f"**{result.status}**: {md_text(result.metric)} {score} on {md_text(result.split)} "
        f"(baseline {result.baseline_score:g}); {scripts['launched']} script{'' if scripts['launched'] == 1 else 's'} "
        "launched, "
        f"{result.wall_time_s / 60:.1f} of {result.run.budget_s / 60:g} min used.\n\n{md_text(result.reason)}{partial}"
    )


def _record_evaluations(writer: MlflowWriter, run_id: str, result: RunResult, base: dict) -> None:
    """One eval child run per evaluated checkpoint.

    The anytime curve as a metric series on the agent run.
    """
    seen: dict[str, str] = {}
    first: dict[str, str] = {}  # path -> the label it was first evaluated under (best, best-unloadable, window-k)
    anytime = []
    for e in result.evaluations:
        official = e.official
        if e.path not in seen:
            tags = {**base, schema.KIND: schema.KIND_EVAL, schema.CANDIDATE: e.candidate, schema.SCRIPT: e.script}
            if not official.ok:
                tags[schema.REASON] = official.why_not[:500]
            eval_run = writer.create_run(f"eval {Path(e.path).name}"[:250], tags, parent=run_id)
            rows = [
                (schema.EVAL_VAL_SCORE, e.val_score, 0, None),
                (schema.EVAL_SAVED_MINUTES, e.saved_s / 60, 0, None),
            ]
            if official.value is not None:
                rows.append((schema.official_metric(result.metric), official.value, 0, None))
            writer.log_metrics(eval_run, rows)
            writer.log_text(eval_run, json.dumps(official.to_dict(), indent=2), "official.json")
            scored = Path(official.raw.get("staged", "")) / e.script
            if official.raw.get("staged") and scored.is_file():  # the exact source the predictor ran, as staged
                writer.log_artifact(eval_run, scored, "source")
            writer.end_run(eval_run, "FINISHED" if official.ok else "FAILED")
            seen[e.path], first[e.path] = eval_run, e.candidate
        else:
            writer.set_tags(seen[e.path], {schema.CANDIDATE: f"{first[e.path]},{e.candidate}"})
        if e.candidate.startswith("window-") and official.ok and math.isfinite(official.value):
            anytime.append((schema.ANYTIME, official.value, int(math.ceil(e.saved_s / 60)), None))
    writer.log_metrics(run_id, anytime)


def load_run(run_dir: Path) -> tuple[RunResult, Workspace]:
    """Read a run directory back (for ``bench record``)."""
    result = RunResult.load(Path(run_dir))
    return result, Workspace(Path(run_dir), packs.task_for_run(result.run.task, result.run.task_source))
