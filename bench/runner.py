"""One agent run on one task, top to bottom as in the paper's Figure 2:

    workspace -> launch -> watch -> collect -> evaluate -> audit -> record

Every step after the launch runs whatever happened before it (a crashed agent, a killed
script, a Ctrl-C, an unreachable tracking server): what was produced is collected,
scored and written to ``result.json`` before MLflow is touched, so nothing is lost.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bench import checkpoints, data, evaluate, weights, workspace
from bench.agents import LaunchContext, get_agent, parser_of
from bench.audit import audit
from bench.launches import LaunchMonitor
from bench.progress import StatusLine, fmt_s
from bench.prompt import standard_prompt
from bench.record import record
from bench.stream import AgentStream
from bench.tasks import Task
from bench.tracking import HOOK_DIR, schema
from bench.tracking.relay import Relay
from bench.tracking.runs import Recorder, TrackingError
from bench.watchdog import Watchdog, become_subreaper, end_tree


@dataclass
class RunSpec:
    """What to run: one agent, one task, one repeat."""

    task: Task
    agent: str
    campaign: str = "1gc-7rc"
    repeat: int = 1
    budget_s: float | None = None  # None: the task's budget
    grace_s: float = 30.0
    model: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    device: str | None = None
    console: bool = True
    no_weights: bool = False  # run a task that provides pretrained weights without them (marked partial)

    @property
    def budget(self) -> float:
        return self.budget_s if self.budget_s is not None else self.task.budget_s


class _Interrupted(Exception):
    pass


def run(spec: RunSpec) -> dict:
    """Run the pipeline and return the result (also written to ``result.json``)."""
    task, agent = spec.task, get_agent(spec.agent)
    device = spec.device or evaluate.default_device()
    data_dir = data.prepare(task, progress=spec.console)
    weight_files = [] if spec.no_weights else weights.for_task(task)  # raises with instructions when missing
    partial_notes = data.partial_notes(task)
    if spec.no_weights and task.weights:
        partial_notes.append("the pretrained weights were not provided (--no-weights)")

    # 1. workspace
    ws = workspace.create(
        task, data_dir, campaign=spec.campaign, agent=spec.agent, repeat=spec.repeat, weights=weight_files
    )
    locked_sha = ws.locked_hashes()
    label = f"{task.id} {spec.agent} r{spec.repeat}"
    print(f"[bench] {label}: workspace {ws.path} (budget {fmt_s(spec.budget)})", flush=True)

    # tracking: the agent run is opened now so that the UI shows it live; failures only degrade
    recorder = Recorder(spec.campaign)
    tags = {
        schema.KIND: schema.KIND_AGENT,
        schema.CAMPAIGN: spec.campaign,
        schema.AGENT: spec.agent,
        schema.MODEL: spec.model or "",
        schema.TASK: task.id,
        schema.REPEAT: spec.repeat,
        schema.WORKSPACE: str(ws.run_dir),
        schema.STATUS: "running",
        schema.PARTIAL_DATA: str(bool(partial_notes)).lower(),
    }
    parent = _open_agent_run(recorder, f"{task.id}-{spec.agent}-r{spec.repeat}", tags)
    relay = Relay(
        recorder,
        parent,
        ws.spool_dir,
        base_tags={
            schema.CAMPAIGN: spec.campaign,
            schema.AGENT: spec.agent,
            schema.TASK: task.id,
            schema.REPEAT: spec.repeat,
        },
        baseline_source=(ws.path / "train.py").read_text(),
    )
    relay.start()

    # 2. launch
    ctx = LaunchContext(
        task=task,
        workspace=ws.path,
        prompt=standard_prompt(task, spec.budget, device),
        budget_s=spec.budget,
        home=ws.run_dir / "home",
        model=spec.model,
        options=spec.options,
    )
    argv = agent.command(ctx)
    token = uuid.uuid4().hex
    become_subreaper()
    status = StatusLine(label, enabled=spec.console)
    started = time.time()
    proc = subprocess.Popen(
        argv,
        cwd=ws.path,
        env=_agent_env(ws, token, agent.env(ctx), spec.budget, started),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    stream = AgentStream(proc, ws.log, ws.events, status, spec.console, parser_of(agent, ctx), spec.model).start()
    launches = LaunchMonitor(proc.pid, token, ws.path).start()

    # 3. watch
    def tick(elapsed: float, left: float) -> None:
        status.set(scripts=relay.launches)
        status.update(elapsed, left)

    watchdog = Watchdog(proc, spec.budget, grace_s=spec.grace_s, token=token, on_tick=tick)
    watchdog.start()
    interrupted = _wait(proc)
    agent_seconds = time.time() - started
    watchdog.stop(let_grace_finish=not interrupted)
    launches.scan()  # a last look before the tree is ended
    end_tree(proc.pid, token)  # the session is over: scripts it left running end with it
    launches.stop()
    stream.join(timeout=10)
    status.close()
    scripts = relay.finalize()

    # 4. collect
    found, rejected = checkpoints.scan(ws.checkpoints, started, task.metric, deadline_s=spec.budget + spec.grace_s)
    selection = checkpoints.select(found, task.higher_is_better)

    # 5. evaluate (outside the workspace, with the original prepare.py and data)
    evaluations = _evaluate(task, ws, selection, data_dir, device, spec.console)

    # 6. audit
    violations = audit(ws, locked_sha)

    # 7. record
    result = {
        "task": task.id,
        "task_name": task.name,
        "agent": spec.agent,
        "model": spec.model,
        "campaign": spec.campaign,
        "repeat": spec.repeat,
        "metric": task.metric,
        "direction": task.direction,
        "split": task.eval_split,
        "baseline_score": task.baseline_score,
        "budget_s": spec.budget,
        "grace_s": spec.grace_s,
        "started_at": started,
        "wall_time_s": round(agent_seconds, 3),
        "budget_utilisation": round(min(agent_seconds, spec.budget) / spec.budget, 4),
        "agent_argv": argv,
        "agent_exit_code": proc.returncode,
        "timed_out": watchdog.timed_out,
        "interrupted": interrupted,
        "agent_events": stream.summary(),
        "device": device,
        "prepare_sha256": locked_sha["prepare.py"],
        "locked_sha256": locked_sha,
        "partial_data": bool(partial_notes),
        "partial_data_notes": partial_notes,
        "scripts": scripts,
        "launches_observed": [launch.to_dict() for launch in launches.launches.values()],
        "checkpoints_found": len(found),
        "rejected_checkpoints": [{"path": str(r.path), "reason": r.reason} for r in rejected],
        "evaluations": evaluations,
        "violations": [v.to_dict() for v in violations],
        "workspace": str(ws.path),
        "run_dir": str(ws.run_dir),
        "mlflow_run_id": parent,
    }
    result.update(_outcome(result, evaluations, violations))
    ws.result_file.write_text(json.dumps(result, indent=2, default=str))
    try:
        result["mlflow_run_id"] = record(recorder, result, ws)
        ws.result_file.write_text(json.dumps(result, indent=2, default=str))
    except TrackingError as e:
        print(
            f"[bench] could not record in MLflow ({e}); everything is in {ws.result_file}. "
            f"Record it later with: bench record {ws.run_dir}",
            flush=True,
        )
    score = f"{result['score']:.4f}" if result.get("score") is not None else "-"
    print(f"[bench] {label}: {result['status']} | {task.metric} {score} | {result['reason']}", flush=True)
    if interrupted:
        raise KeyboardInterrupt
    return result


def _open_agent_run(recorder: Recorder, name: str, tags: dict) -> str | None:
    try:
        return recorder.create_run(name, tags)
    except TrackingError as e:
        print(f"[bench] tracking unavailable, the run goes on and is recorded at the end: {e}", flush=True)
        return None


# never inherited by an agent: a run id would make MLflow resume the parent; the tracer's own variables
_HARNESS_ONLY = ("MLFLOW_RUN_ID", "BENCH_SPOOL_FILE", "BENCH_STDOUT_TRACED", "BENCH_TEE_PIPES", "BENCH_TEE_CLAIMS")


def _agent_env(
    ws: workspace.Workspace, token: str, extra: dict[str, str], budget_s: float, started_at: float
) -> dict[str, str]:
    """The agent's environment: the tracer on PYTHONPATH, this Python first on PATH, no MLflow run id."""
    env = {k: v for k, v in os.environ.items() if k not in _HARNESS_ONLY}
    env.update(extra)
    env.update(
        {
            "BENCH_WORKSPACE": str(ws.path),
            "BENCH_SPOOL_DIR": str(ws.spool_dir),
            "BENCH_RUN_TOKEN": token,
            "BENCH_BUDGET_S": str(budget_s),
            "BENCH_STARTED_AT": str(started_at),
            "PYTHONPATH": os.pathsep.join(p for p in (str(HOOK_DIR), env.get("PYTHONPATH", "")) if p),
            "PATH": os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", ""))),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def _wait(proc: subprocess.Popen) -> bool:
    """Wait for the agent; a Ctrl-C or SIGTERM to the harness ends the run early. Returns True if interrupted."""

    def on_term(signum, frame):
        raise _Interrupted

    old = signal.signal(signal.SIGTERM, on_term) if threading.current_thread() is threading.main_thread() else None
    try:
        proc.wait()
        return False
    except (KeyboardInterrupt, _Interrupted):
        print("\n[bench] interrupted: ending the agent, then collecting and recording what it produced", flush=True)
        return True
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)


def _evaluate(
    task: Task, ws: workspace.Workspace, selection: checkpoints.Selection, data_dir: Path, device: str, console: bool
) -> list[dict]:
    """Official evaluation of each distinct candidate (the overall best first, then each window's best)."""
    done: dict[Path, dict] = {}
    out = []
    for label, ckpt in selection.candidates():
        if ckpt.path not in done:
            eval_dir = evaluate.stage(task, ws.path, ws.eval_dir / f"{len(done):02d}-{ckpt.path.stem}"[:120])
            if console:
                print(f"[bench] evaluating {label}: {ckpt.path.name} (val {ckpt.val_score:.4f})", flush=True)
            done[ckpt.path] = evaluate.evaluate(task, ckpt.path, eval_dir, data_dir, device=device)
        out.append({"candidate": label, **ckpt.to_dict(), "official": done[ckpt.path]})
    return out


def _outcome(result: dict, evaluations: list[dict], violations: list) -> dict:
    """The paper's run status: success, failed, timeout, disqualified (refused comes from agent events)."""
    best = next((e for e in evaluations if e["candidate"] == "best"), None)
    official = best["official"] if best else None
    if violations:
        return {"status": "disqualified", "score": None, "reason": violations[0].reason}
    if official is not None and "error" not in official and official.get("value") is not None:
        return {
            "status": "success",
            "score": float(official["value"]),
            "best_val_score": best["val_score"],
            "reason": f"best checkpoint {Path(best['path']).name} from {best['script']}",
        }
    if result["interrupted"]:
        return {"status": "interrupted", "score": None, "reason": "the harness was interrupted"}
    agent = result.get("agent_events") or {}
    if agent.get("refused"):
        return {"status": "refused", "score": None, "reason": "the agent refused to work on the task (over-refusal)"}
    if official is not None:
        return {"status": "failed", "score": None, "reason": f"official evaluation failed: {official['error']}"}
    why = "no scoreable checkpoint in checkpoints/"
    if agent.get("error"):
        why += f"; the agent reported an error: {str(agent['error'])[:300]}"
    if result["rejected_checkpoints"]:
        why += f" ({len(result['rejected_checkpoints'])} rejected: {result['rejected_checkpoints'][0]['reason']})"
    return {"status": "timeout" if result["timed_out"] else "failed", "score": None, "reason": why}
