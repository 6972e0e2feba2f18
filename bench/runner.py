"""One agent run on one task, top to bottom as in the paper's Figure 2.

    workspace -> launch -> watch -> collect -> evaluate -> audit -> record

Every step after the launch runs whatever happened before it (a crashed agent, a killed script, a
Ctrl-C, an unreachable tracking server): what was produced is collected, scored and written to
``result.json`` before MLflow is touched, so nothing is lost. Each step is one module of
:mod:`bench.pipeline`; this function only passes their results on. The steps after the watch are one
function, :func:`finish`, which ``bench run --resume`` (:mod:`bench.resume`) calls too for a run
whose harness died (from ``run.json``, :mod:`bench.pipeline.state`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from bench import outcome, preflight, protocol, software, termination
from bench.agents import get_agent
from bench.durations import fmt_s
from bench.evidence import Arrival, Evidence
from bench.gateway import metering
from bench.pipeline import audit, codetime, collect, evaluate, guard, launch, record, state, watch, workspace
from bench.result import Audit, Evaluation, RunResult
from bench.runspec import RunSpec, check
from bench.sandbox import evaluation_lock
from bench.tasks import Task, data, packs, weights
from bench.tracking import schema, spool_files
from bench.tracking.relay import Relay
from bench.tracking.writer import MlflowWriter


def run(spec: RunSpec) -> RunResult:
    """Run one agent on one task; returns the result (also on disk).

    workspace -> launch -> watch -> collect -> evaluate -> audit -> record.

    SIGTERM and SIGINT follow :mod:`bench.termination`: before the launch they stop the run at once;
    after it, the run is collected, evaluated, audited and recorded first, then KeyboardInterrupt is
    raised.
    """
    with termination.Termination() as term:
        result = _run(spec, term)
    if result.interrupted or term.pending:
        raise KeyboardInterrupt
    return result


def _run(spec: RunSpec, term: termination.Termination) -> RunResult:
    # bad input, an unknown agent, unwritable folders, missing weights, no sandbox: stopped before
    # anything is created
    check(spec)  # programmatic callers too (bench run and a campaign built it through RunSpec.build, checked)
    task, adapter = spec.resolve_task(), get_agent(spec.agent)
    preflight.check_run([task], spec, endpoints=False)  # asked by bench run and bench campaign before
    # the description as the run goes: its budget, device and the task folder as this run got it
    # (before the workspace copies it), so run.json and result.json say what ran
    source = spec.task_source or packs.provenance(task)
    spec = spec.launched(spec.device or evaluate.default_device(), source, seeded=adapter.seeded)
    data_dir = data.prepare(task, progress=spec.console)
    weight_files = [] if spec.no_weights else weights.for_task(task)  # raises with instructions when missing
    notes = _partial_notes(spec)  # read from the verified cache now, before any agent code runs

    ws = workspace.create(  # 1
        task,
        data_dir,
        campaign=spec.campaign,
        agent=spec.agent,
        repeat=spec.repeat,
        weights=weight_files,
        run_id=spec.run_id,
    )
    evidence = Evidence(ws.run_dir)
    locked_sha = evidence.start(ws.path, task.locked_files, audit.scorer_inputs(task))
    print(f"[bench] {spec.label}: workspace {ws.path} (budget {fmt_s(spec.budget)})", flush=True)
    writer, relay, opening = _track_live(spec, ws, notes)
    run = Run(spec, ws, data_dir, notes, locked_sha, writer, relay)

    term.launched = True  # from here a signal is noted: the run goes on to its result (bench.termination)
    # while the agent lives, other runs on this machine do not evaluate (their predictors' pages:
    # issue 38)
    with evaluation_lock.agent_alive(spec.limits.eval_s, spec.console, spec.label, ws.run_dir, lambda: term.pending):
        agent = launch.launch(adapter, ws, spec, evidence)  # 2
        relay.follow(agent.proc.pid, agent.token)  # system metrics by host pid from now (spool pids: the sandbox's)
        opening.join()  # the agent run is open by now (run.json names it); MLflow's start-up ran beside the agent's
        _save_state(run, agent)
        watched = watch.watch(  # 3
            agent, spec.budget, spec.grace_s, on_tick=_status_ticker(agent, relay), stopped=lambda: term.pending
        )
    _save_watched(ws, watched)
    if agent.gateway is not None:  # the lines of requests cut by the agent's end, written before they are read
        agent.gateway.drain()
    return finish(run, Ended.of(agent, watched))


@dataclass(frozen=True)
class Run:
    """One run's context, as the steps after the launch take it.

    Its description, its workspace and what the start made for it (the prepared data, the
    partial-data notes, the locked files' hashes, the tracking).
    """

    spec: RunSpec  # as launched: budget, device and task source filled in
    ws: workspace.Workspace
    data_dir: Path
    notes: list[str]  # why the run's data falls short of the paper's (empty: full data)
    locked_sha: dict[str, str]  # each locked file's sha256 at the start
    writer: MlflowWriter
    relay: Relay

    @property
    def task(self) -> Task:
        """The task the run ran (the spec's, resolved)."""
        return self.spec.resolve_task()

    # Each step's input, built here only: an option a step needs is a field of its input, set here
    # from the run.
    def collect_input(self, ended: Ended, scripts: set[str]) -> collect.CollectInput:
        """Step 4's input.

        The checkpoints' folder, placed in time from the agent's start, up to budget + grace.
        """
        task = self.task
        return collect.CollectInput(
            directory=self.ws.checkpoints,
            started_at=ended.started_at,
            metric=task.metric,
            direction=task.direction,
            deadline_s=self.spec.budget + self.spec.grace_s,
            arrivals=dict(ended.arrivals),
            scripts=frozenset(scripts),
            code=codetime.Index.of(self.ws),  # the scripts as they were when each checkpoint's content was seen
        )

    def evaluation_input(self, collected: collect.Collected) -> evaluate.EvaluationInput:
        """Step 5's input: the collected candidates, scored on the run's device under its limits."""
        return evaluate.EvaluationInput(
            ws=self.ws,
            selection=collected.selection,
            data_dir=self.data_dir,
            device=self.spec.device,
            console=self.spec.console,
            sandboxed=self.spec.sandbox,
            budget_s=self.spec.limits.eval_s,  # one budget for every candidate of the run
            limits=self.spec.limits,
            label=self.spec.label,
        )

    def audit_input(
        self, ended: Ended, collected: collect.Collected, evaluations: list[Evaluation]
    ) -> audit.AuditInput:
        """Step 6's input.

        What the rules judge beside the evidence (the scores, the agent's argv, the rejections).
        """
        return audit.AuditInput(
            ws=self.ws,
            locked_sha256=dict(self.locked_sha),
            evaluations=tuple(evaluations),
            started_at=ended.started_at,
            budget_s=self.spec.budget,
            agent_argv=tuple(ended.argv),
            rejected=tuple(collected.rejected),
            offline=not ended.endpoints,
            own_hosts=tuple(get_agent(self.spec.agent).own_hosts),
        )


@dataclass(frozen=True)
class Ended:
    """What the agent's time left behind.

    From the live watch, or rebuilt from the run directory by ``--resume``.
    """

    started_at: float
    argv: list[str]
    endpoints: tuple[str, ...]
    sandboxed: bool
    watched: watch.Watched
    arrivals: dict[Path, Arrival]  # each checkpoint: when the harness first saw it and its current content
    launches: list[dict]  # the scripts the launch monitor saw running (Launch.to_dict())
    agent_events: dict  # AgentStream.summary()
    note: str = ""  # why the run was finished late (``--resume``): added to the outcome's reason

    @classmethod
    def of(cls, agent: launch.LaunchedAgent, watched: watch.Watched) -> Ended:
        """What a live run's agent and its watch left behind."""
        return cls(
            started_at=agent.started_at,
            argv=agent.argv,
            endpoints=tuple(agent.endpoints),
            sandboxed=agent.sandboxed,
            watched=watched,
            arrivals=dict(agent.arrivals.files),
            launches=[seen.to_dict() for seen in agent.monitor.launches.values()],
            agent_events=agent.stream.summary(),
        )


def finish(run: Run, ended: Ended) -> RunResult:
    """The steps after the watch, shared by :func:`run` and ``bench run --resume``.

    From :mod:`bench.resume` too: the spool relayed (script runs left open closed as KILLED) ->
    collect -> evaluate -> audit -> record.
    """
    spec, ws, relay, writer, task = run.spec, run.ws, run.relay, run.writer, run.task
    steps = guard.StepGuard(ws.run_dir, spec.label)  # a step that raises anyway: named, the run goes on (guard.py)
    scripts = steps.run("relay", relay.finalize, lambda: guard.relay_summary(relay))
    ran = _scripts_that_ran(ended.launches, scripts)
    collected = steps.run(
        "collect",
        lambda: collect.collect(run.collect_input(ended, ran)),  # 4
        lambda: collect.Collected([], [], collect.Selection(None, {})),
    )
    # 5 (alone on this machine: evaluation_lock)
    evaluations = steps.run("evaluate", lambda: evaluate.evaluate_candidates(run.evaluation_input(collected)), list)
    ended = _after_signal(ended, evaluations, ws, spec.label)
    steps.run("evidence", lambda: Evidence(ws.run_dir).end(ws.path, task.locked_files), lambda: None)
    audited = steps.run(
        "audit",
        lambda: audit.audit(run.audit_input(ended, collected, evaluations)),  # 6
        lambda: Audit(locked_sha256=dict(run.locked_sha)),
    )
    audited = steps.audit(audited)
    result = _result(run, ended, scripts, collected, evaluations, audited)
    result.outcome = steps.outcome(result.outcome)
    failed = lambda: guard.record_failed(result, writer, ws.run_dir)  # noqa: E731 (result.json written, run closed)
    steps.run("record", lambda: record.save(result, writer, ws), failed)  # 7
    guard.close_left_open(writer, result.mlflow_run_id or relay.parent_run)

    score = f"{result.score:.4f}" if result.score is not None else "-"
    print(f"[bench] {spec.label}: {result.status} | {task.metric} {score} | {result.reason}", flush=True)
    if audited.violations:
        print(f"[bench] {spec.label}: {audit.summary(audited)[:2000]}", flush=True)
    return result


def _after_signal(ended: Ended, evaluations: list[Evaluation], ws: workspace.Workspace, label: str) -> Ended:
    """A signal that came after the agent's wait (:mod:`bench.termination`).

    The run goes on and its reason says so; but with a failed evaluation the scorer may have been
    stopped by the same signal, so nothing is recorded from it: KeyboardInterrupt, and run.json
    stays for ``bench run --resume``.
    """
    term = termination.current()
    if term is None or not term.pending:
        return ended
    if any(not e.official.ok for e in evaluations):
        print(
            f"[bench] {label}: {term.describe()} during the evaluation, which did not complete; nothing is recorded "
            f"from it. Finish the run with: bench run --resume {ws.run_dir}",
            flush=True,
        )
        raise KeyboardInterrupt
    if ended.watched.interrupted:  # the signal ended the agent: the outcome says interrupted already
        return ended
    late = f"bench got {term.describe()} after the agent's time and finished the run first"
    return replace(ended, note=f"{ended.note}; {late}" if ended.note else late)


def _save_state(run: Run, agent: launch.LaunchedAgent) -> None:
    """run.json.

    What ``bench run --resume`` needs if this harness dies; a disk that refuses costs one line.
    """
    try:
        state.write(
            run.ws.run_dir,
            state.RunState(
                spec=run.spec,  # limits, API budget, options...: a resume runs under the run's own
                token=agent.token,
                agent_pid=agent.proc.pid,
                started_at=agent.started_at,
                agent_argv=list(agent.argv),
                endpoints=list(agent.endpoints),
                mlflow_run_id=run.relay.parent_run,
                partial_notes=list(run.notes),
                data_dir=str(run.data_dir),
            ),
        )
    except state.RunStateError as e:
        print(f"[bench] the run goes on but cannot be resumed if the harness dies: {e}", flush=True)


def _save_watched(ws: workspace.Workspace, watched: watch.Watched) -> None:
    """How the agent's time ended, into run.json.

    A harness that dies after this (while evaluating, say) did not cut the agent short, and
    ``--resume`` must not say it did.
    """
    try:
        st = state.read(ws.run_dir)
        st.watched = asdict(watched)
        state.write(ws.run_dir, st)
    except state.RunStateError as e:
        print(f"[bench] a resume would not know how the agent's time ended: {e}", flush=True)


def _partial_notes(spec: RunSpec) -> list[str]:
    """Why this run's data falls short of the paper's (empty: full data)."""
    task = spec.resolve_task()
    notes = data.partial_notes(task)
    if spec.no_weights and task.weights:
        notes.append("the pretrained weights were not provided (--no-weights)")
    return notes


def _scripts_that_ran(launches: list[dict], scripts: dict) -> set[str]:
    """The scripts a checkpoint may name for its ``build_model``.

    Top-level workspace scripts the tracer or the process monitor saw running, and the baseline
    train.py: the only code a checkpoint may name.
    """
    traced = {s["script"] for s in scripts.get("scripts", [])}
    return traced | {str(seen["script"]) for seen in launches if seen.get("script")} | {"train.py"}


def _status_ticker(agent: launch.LaunchedAgent, relay: Relay) -> watch.Tick:
    def tick(elapsed: float, left: float) -> None:
        # the gateway's tokens and cost move between the CLI's events (Codex says its usage at its
        # turn's end only)
        agent.status.set(scripts=relay.launches, **agent.stream.status_fields())
        agent.status.update(elapsed, left)

    return tick


def _result(
    run: Run,
    ended: Ended,
    scripts: dict,
    collected: collect.Collected,
    evaluations: list[Evaluation],
    audited: Audit,
) -> RunResult:
    """Everything the steps produced, as one :class:`RunResult` with its outcome decided."""
    spec, ws, task, watched = run.spec, run.ws, run.task, ended.watched
    # the metering gateway's tokens, cost and API budget (evidence/llm.jsonl) beside the CLI's own
    # figures
    agent_events = metering.merge(ended.agent_events, metering.log_path(ws.run_dir), spec.max_cost)
    rejected = [{"path": str(r.path), "reason": r.reason} for r in collected.rejected]
    decided = outcome.decide(
        evaluations,
        audited,
        interrupted=watched.interrupted,
        timed_out=watched.timed_out,
        agent_events=agent_events,
        rejected=rejected,
    )
    if ended.note:  # finished by --resume: the outcome says so (an interrupted run's reason is the note itself)
        why = ended.note if decided.status == "interrupted" else f"{decided.reason}; {ended.note}"
        decided = replace(decided, reason=why)
    if tampered := spool_files.note(scripts):  # the agent's act on the tracer's files, named (also a rule 7 flag)
        decided = replace(decided, reason=f"{decided.reason}; {tampered}")
    if watched.ended_why:  # a limit ended the agent's time before its budget
        decided = replace(decided, reason=f"{decided.reason}; the harness ended the agent early: {watched.ended_why}")
    limits = {"settings": spec.limits.to_dict(), "hit": [], **watched.limits}
    if hit := evaluate.budget_hit(evaluations, spec.limits.eval_s):
        limits["hit"] = [*limits["hit"], hit]
    limits["hit"] = [*limits["hit"], *evaluate.predictor_hits(evaluations)]  # the predictor OOM-killed, forks refused
    if capped := metering.cap_hit(agent_events):  # the API budget (--max-cost) refused the agent's requests
        limits["hit"] = [*limits["hit"], capped]
        decided = replace(decided, reason=f"{decided.reason}; {capped['detail']}")
    return RunResult(
        run=spec,
        task_name=task.name,
        metric=task.metric,
        direction=task.direction,
        split=task.eval_split,
        baseline_score=task.baseline_score,
        started_at=ended.started_at,
        wall_time_s=watched.wall_time_s,
        budget_utilisation=round(min(watched.wall_time_s, spec.budget) / spec.budget, 4),
        agent_argv=ended.argv,
        agent_exit_code=watched.exit_code,
        timed_out=watched.timed_out,
        interrupted=watched.interrupted,
        hardware=protocol.describe_hardware(spec.device),
        software=software.versions(),
        workspace=str(ws.path),
        run_dir=str(ws.run_dir),
        outcome=decided,
        audit=audited,
        evaluations=evaluations,
        agent_events=agent_events,
        scripts=scripts,
        launches_observed=list(ended.launches),
        checkpoints_found=len(collected.found),
        rejected_checkpoints=rejected,
        mlflow_run_id=run.relay.parent_run,
        partial_data=bool(run.notes),
        partial_data_notes=run.notes,
        sandboxed=ended.sandboxed,
        limits=limits,
    )


def _track_live(
    spec: RunSpec, ws: workspace.Workspace, notes: list[str]
) -> tuple[MlflowWriter, Relay, threading.Thread]:
    """Open the agent run (the UI shows it live) and relay the scripts' spool into it.

    Failures only degrade.

    The run is opened in a thread, beside the agent's launch: MLflow's import, client and schema
    check take ~2 s (issue #16), which the agent's own start-up covers. The relay exists before the
    agent starts (its state file must) and starts relaying once the run is open (the spool keeps
    what comes before); join the thread before anything needs the run's id.
    """
    writer = MlflowWriter(spec.campaign)
    tags = {
        **schema.agent_run_tags(spec.campaign, spec.agent, spec.model, spec.task, spec.repeat, str(ws.run_dir)),
        schema.STATUS: "running",
        schema.PARTIAL_DATA: str(bool(notes)).lower(),
        schema.SANDBOXED: str(spec.sandbox).lower(),
        **schema.spec_tags(spec.to_dict()),
    }
    base = schema.run_tags(spec.campaign, spec.agent, spec.task, spec.repeat)
    relay = record.relay_for(writer, None, ws, base)
    # the run starts now, before the agent's launch, not when the thread gets the store (seconds
    # later on a loaded machine): MLflow's Duration is then the agent's wall time and the launch,
    # never less than wall_time_s
    now = time.time()
    opening = threading.Thread(
        target=lambda: relay.attach(record.open_agent_run(writer, spec.label, tags, start_time=now)),
        name="bench-open-run",
        daemon=True,
    )
    opening.start()
    return writer, relay, opening
