"""``bench run --resume``.

Finish runs whose harness died (SIGKILL, an out-of-memory kill, a lost node).

A run directory holds everything needed without the harness that started it: ``run.json`` (the spec,
the run token, the launch; :mod:`bench.pipeline.state`), the spool and the relay's progress
(``relay.json``), the evidence (checkpoint arrivals, launches), the agent's ``events.jsonl``.
Resuming one:

1. a run with a complete ``result.json`` is left alone (finished runs are never redone); a run whose
   harness is still alive (the pid and start time in ``run.json``) is refused;
2. what of the run is still alive (found by its token; an ``--unsandboxed`` agent survives its
   harness) is noted in the evidence, then ended;
3. the shared end of the pipeline (:func:`bench.runner.finish`) runs: every spooled event is relayed
   (the relay resumes from ``relay.json``; script runs left open are closed as KILLED), the
   checkpoints are collected (placed in time by when the harness first saw their content, else their
   mtime), evaluated, audited, and the result is written and recorded with status ``interrupted``
   and the reason (a scored best checkpoint still makes it a success). It runs under the run's own
   limits, recorded in ``run.json`` at the launch (the evaluation budget, the predictor's memory and
   processes, the settings ``result.json`` shows). Its API budget (``--max-cost``, also in
   ``run.json``) is recorded as the run would have (``limits.hit`` ``api-cost``, the
   ``bench.api_budget`` tag).

For a campaign, every run directory with ``run.json`` and no ``result.json`` is resumed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import psutil

from bench.durations import fmt_s
from bench.errors import BenchError
from bench.evidence import Arrival, Evidence
from bench.markup import one_line
from bench.pipeline import state, workspace
from bench.pipeline.arrivals import look
from bench.pipeline.record import relay_for
from bench.pipeline.state import RunState, RunStateError
from bench.pipeline.watch import Watched
from bench.processes import TOKEN_VAR, describe, end_tree, find_tree, running
from bench.result import ResultError, RunResult
from bench.rundir import RunDir
from bench.runner import Ended, Run, finish
from bench.tasks import data, packs
from bench.termination import Termination
from bench.tracking import schema
from bench.tracking.writer import MlflowWriter

T = TypeVar("T")

# files the live harness writes while the run goes on: their last change is its last sign of life
_HEARTBEATS = ("relay.json", "agent.log", "events.jsonl")


class ResumeError(BenchError, RuntimeError):
    """A run that cannot or must not be resumed; the message says why in one line."""


def finished(run_dir: Path) -> RunResult | None:
    """The run's result if ``result.json`` is there and complete; None if there is none."""
    try:
        return RunDir(run_dir).result()
    except ResultError as e:  # written atomically, so this is a newer schema or a hand-edited file: leave it
        raise ResumeError(f"{run_dir} has a result.json that cannot be read ({e}); it is not redone") from None


def resume_run(run_dir: Path, *, console: bool = True, by: str = "bench run --resume") -> RunResult:
    """Finish one run directory whose harness died.

    Returns its result (also in result.json and MLflow).

    ``by``: the command that finished it, named in the run's reason (``bench record`` also finishes
    such a run).
    """
    run_dir = Path(run_dir).resolve()
    if not run_dir.is_dir():
        raise ResumeError(f"no run directory {run_dir}")
    done = finished(run_dir)
    if done is not None:
        how = "" if done.mlflow_run_id else f"; to record it in MLflow: bench record {run_dir}"
        print(f"[bench] {done.run.label}: already finished ({done.status}); finished runs are never redone{how}")
        return done
    st = state.read(run_dir)
    if st.harness_alive():
        raise ResumeError(f"{run_dir} is still being run by bench (pid {st.harness_pid}); nothing to resume")
    spec = replace(st.spec, console=console)  # the run's description as it launched (run.json)
    task = spec.resolve_task()  # the folder the run ran, when it is still there
    ws = workspace.Workspace(run_dir, task)
    evidence = Evidence(run_dir)
    if st.harness_died_at is None:  # before anything here touches the run's files
        st.harness_died_at = _last_sign_of_life(run_dir, st)
        state.write(run_dir, st)
    ended_pids = _end_leftovers(st, evidence)

    died_s = round(min(max(0.0, st.harness_died_at - st.started_at), spec.budget_s + spec.grace_s), 3)
    failed: list[str] = []  # what of the run's record could not be rebuilt (named in its reason)
    if st.watched is not None:  # it died after the agent's time had ended: that time is the run's, as the watch saw it
        watched, when = Watched(**st.watched), "after the agent's time"
    else:  # it died while the agent worked: the agent's time ended with it
        watched, when = Watched(died_s, None, died_s >= spec.budget_s, True), f"at ~{fmt_s(died_s)} ({died_s:.0f} s)"
    ended = Ended(
        started_at=st.started_at,
        argv=list(st.agent_argv),
        endpoints=tuple(st.endpoints),
        sandboxed=spec.sandbox,
        watched=watched,
        arrivals=_rebuilt("the checkpoints' arrivals", lambda: _arrivals(ws, evidence), dict, failed),
        launches=_rebuilt("the launches", lambda: _launches(evidence), list, failed),
        agent_events=_rebuilt("the agent's events", lambda: _agent_events(ws), dict, failed),
        note=f"the harness died {when}; finished by {by}" + "".join(f"; {f}" for f in failed),
    )
    left = f"; ended {len(ended_pids)} process(es) of the run still running" if ended_pids else ""
    print(f"[bench] {spec.label}: resuming {run_dir} (its harness died ~{died_s:.0f} s into the run{left})", flush=True)
    # the run's own limits and API budget (its cap and tag recorded as the run would have); the
    # task's source
    spec = replace(spec, task=task, task_source=spec.task_source or packs.provenance(task))
    data_dir = Path(st.data_dir)
    if not data_dir.is_dir():  # the cache moved or was cleared since: prepare it again (verified as for a run)
        data_dir = data.prepare(task, progress=console)
    writer = MlflowWriter(spec.campaign)
    base = schema.run_tags(spec.campaign, spec.agent, spec.task, spec.repeat)
    relay = relay_for(writer, st.mlflow_run_id, ws, base)
    locked = evidence.locked_at_start(task.locked_files)
    run = Run(spec, ws, data_dir, list(st.partial_notes), locked, writer, relay)
    with Termination(launched=True) as term:  # a SIGTERM now lets the result be written first (bench.termination)
        result = finish(run, ended)
    if term.pending:
        raise KeyboardInterrupt
    return result


def resume_campaign(campaign: str, *, console: bool = True) -> list[RunResult]:
    """Resume every run of ``campaign`` with run.json and no result.json, one line each."""
    folder = workspace.campaign_dir(campaign)
    todo = sorted(d for d in (folder.iterdir() if folder.is_dir() else ()) if _to_resume(d))
    print(f"[bench] campaign {campaign}: {len(todo)} unfinished run(s) to resume in {folder}", flush=True)
    results = []
    for run_dir in todo:
        try:
            results.append(resume_run(run_dir, console=console))
        except (ResumeError, RunStateError) as e:
            print(f"[bench] {run_dir.name}: not resumed: {e}", flush=True)
    return results


def _to_resume(run_dir: Path) -> bool:
    """Launched and without a result.

    Unfinished, or running: refused by :func:`resume_run` with its reason.
    """
    if not RunDir(run_dir).launched():
        return False
    try:
        return finished(run_dir) is None
    except ResumeError as e:
        print(f"[bench] {run_dir.name}: not resumed: {e}", flush=True)
        return False


def finished_runs(campaign: str, agent: str) -> set[tuple[str, int]]:
    """(task, repeat) pairs of ``campaign`` that ``agent`` has a complete result.json for."""
    folder, out = workspace.campaign_dir(campaign), set()
    for result_file in folder.glob("*/result.json") if folder.is_dir() else ():
        with suppress(ResultError):
            result = RunResult.load(result_file)
            if result.run.agent == agent:
                out.add((result.run.task, result.run.repeat))
    return out


def _rebuilt(what: str, fn: Callable[[], T], empty: Callable[[], T], failed: list[str]) -> T:
    """What a resume rebuilds from the run directory, or the empty value if that raises.

    Whatever the agent left there may make it raise: the failure is named in ``failed``. A resume
    must end with the run recorded, never fall into the same crash every time (a campaign would call
    that an infrastructure failure and give the run up).
    """
    try:
        return fn()
    except Exception as e:
        why = f"{what} could not be rebuilt ({one_line(f'{type(e).__name__}: {e}', 200)})"
        print(f"[bench] resume: {why}; the run is finished without them", flush=True)
        failed.append(why)
        return empty()


def _last_sign_of_life(run_dir: Path, st: RunState) -> float:
    """About when the harness died; never before the launch.

    When it last wrote one of the files it keeps writing while a run goes on (the relay saves its
    progress every ~2 s).
    """
    times = [st.started_at]
    for path in [*(run_dir / name for name in _HEARTBEATS), *(run_dir / "evidence").glob("*.jsonl")]:
        with suppress(OSError):
            times.append(path.stat().st_mtime)
    return max(times)


def _end_leftovers(st: RunState, evidence: Evidence) -> list[int]:
    """End what of the run still runs (noted in the evidence first, for the audit).

    The pids ended.
    """
    root = st.agent_pid if _carries_token(st.agent_pid, st.token) else 0  # 0: a reused pid is not ours, token only
    alive = [p for p in find_tree(root, st.token) if running(p)]
    if not alive:
        return []
    evidence.note_processes("resume", describe(alive))
    ended = end_tree(root, st.token)
    with suppress(ChildProcessError, OSError):  # an agent re-parented to this process (a subreaper) is collected
        if root:
            os.waitpid(root, os.WNOHANG)
    return ended


def _carries_token(pid: int, token: str) -> bool:
    with suppress(psutil.Error, OSError):
        return psutil.Process(pid).environ().get(TOKEN_VAR) == token
    return False


def _arrivals(ws: workspace.Workspace, evidence: Evidence) -> dict[Path, Arrival]:
    """Each checkpoint as the harness recorded it (first sight; its content's time and identity).

    A file written after the harness died is placed at its modification time (nobody was looking);
    one whose bytes changed since the last record, at its mtime but never before that record. Both
    are added to the evidence (a change is an overwrite: rule 6), so the audit sees them and a
    second resume reads them back.
    """
    files = evidence.arrivals(ws.path)
    if ws.checkpoints.is_dir():
        locked = ws.task.locked_files if ws.task is not None else ()
        look(
            ws.checkpoints,
            files,
            on_new=lambda p, a: evidence.note_arrival(ws.path, p, a, locked),
            clock=lambda st, _known: st.st_mtime,
            fallback="mtime",
        )
    return files


def _launches(evidence: Evidence) -> list[dict]:
    """The scripts the launch monitor saw running.

    As the live run's ``launches_observed`` has them.
    """
    out: dict[tuple, dict] = {}
    for rec in evidence.lines("launches.jsonl"):
        if rec.get("script"):
            key = (rec.get("pid"), rec.get("started"))
            out.setdefault(key, {k: rec.get(k) for k in ("pid", "script", "started", "argv")})
    return list(out.values())


def _agent_events(ws: workspace.Workspace) -> dict:
    """The agent's event summary, rebuilt from events.jsonl.

    {} for an agent whose output is not parsed.
    """
    if not ws.events.is_file():
        return {}
    from bench.agents.events import Tally

    return Tally.replay(ws.events).summary()


def for_cli(target: str, *, campaign: str, agent: str | None, task: str | None, console: bool):
    """``bench run --resume [TARGET]``.

    (results, the campaign to go on running the grid of, or None).
    """
    from bench.errors import InputError  # what the user gave names nothing to resume: bad input, exit 2

    if target and RunDir(target).is_run_dir():
        if agent or task:
            raise InputError("--resume RUN_DIR finishes that run only: leave out --agent and --task")
        was_finished = finished(Path(target)) is not None
        result = resume_run(Path(target), console=console)  # a finished run: says so, does nothing
        return ([] if was_finished else [result]), None
    if target and (os.sep in target or Path(target).exists()):  # a path, not a campaign name
        raise InputError(f"{target} is not a run directory of bench run (no run.json, result.json or workspace/)")
    name = target or campaign
    if not (agent or task) and not workspace.campaign_dir(name).is_dir():  # with a grid: a new campaign may start
        raise InputError(
            f"--resume {name}: no campaign {name!r} here ({workspace.campaign_dir(name)}): give a campaign's name or "
            "the run dir bench run printed"
        )
    results = resume_campaign(name, console=console)
    return results, (name if agent or task else None)
