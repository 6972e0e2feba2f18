"""One run of a campaign as a job.

What state it is in, doing what it still needs, and what counts as an infrastructure failure
(retried) rather than an agent's outcome (final).

A run's state is read from its run directory (:mod:`bench.rundir`: final, running, unfinished,
stale, pending, and cut short), never from a memory of what was launched; a stale run starts over
(:func:`discard`: the directory is removed and the MLflow agent run it may have opened is deleted,
else the leaderboard would count a run that never happened).

An **infrastructure failure** is a job that ended with its run not final: its ``bench`` process
crashed or was killed (a signal, an out-of-memory kill, a lost node, a scheduler's time limit) or
stopped before a run directory existed (the data could not be fetched or verified, the tracking
store's schema could not be made: exit 1). It is retried, up to the campaign's ``retries``: the
retry resumes an unfinished run and starts a stale or pending one. So is a final run whose model API
kept failing (:func:`infra_failure`: recorded ``interrupted`` by the health check of
:mod:`bench.agents.health`): it is set aside in ``.campaign/retired/`` (:func:`retire`) and its cell
runs again, unless the API refused it with an answer that cannot heal (a refused key, a forbidden or
unknown model: :func:`blocked`), which no retry changes: that cell is not run again until the
agent's credential changes. A final run whose MLflow agent run is missing or was not closed with its
status (the store was unreachable when it ended: :func:`unrecorded`) is recorded again from its
result.json, as ``bench record`` does. Bad input is not retried: the campaign file and the machine
are checked before anything starts, and a run's process that still finds some (exit 2: a node
without the sandbox or the weights) is given up at once.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

from bench import settings
from bench.agents import credentials
from bench.campaign.spec import Campaign, RunKey
from bench.result import RunResult
from bench.rundir import RunDir
from bench.runner import run
from bench.runspec import RunSpec
from bench.tasks import get_task
from bench.tracking import schema
from bench.tracking.writer import MlflowWriter, TrackingError

CPUS_VAR = settings.CAMPAIGN_CPUS.name  # the CPU set the local executor gives a run's bench process: "0,1,2,3"


def spec_of(campaign: Campaign, key: RunKey, console: bool = False) -> RunSpec:
    """The description of one run of the campaign, its run directory named by the stable id.

    Built by :meth:`bench.runspec.RunSpec.build`: the task's budget < the file's keys < its
    agent entry.
    """
    entry = {"model": key.agent.model, "options": dict(key.agent.options)}
    return RunSpec.build(
        get_task(key.task), key.agent.name, campaign.run, entry,
        campaign=campaign.name, repeat=key.repeat, run_id=key.run_id, console=console,
    )  # fmt: skip


def execute(campaign: Campaign, key: RunKey, *, console: bool = True) -> RunResult | None:
    """Bring one run to its end in this process.

    Start it, resume it, or leave it if final (None if it is being run by a live harness). Raises
    what the runner raises (KeyboardInterrupt after a signal, DataError, ...).
    """
    from bench.resume import resume_run

    run_dir = campaign.run_dir(key)
    seen = RunDir(run_dir).seen()
    if seen.state == "final":
        print(f"[campaign] {key.run_id}: final already ({seen.status}); never redone", flush=True)
        return seen.result
    if seen.state == "running":
        print(f"[campaign] {key.run_id}: its harness is alive (another process runs it); left alone", flush=True)
        return None
    if seen.state == "unfinished":
        return resume_run(run_dir, console=console)
    if seen.state == "stale":
        discard(campaign, run_dir)
    return run(spec_of(campaign, key, console))


def discard(campaign: Campaign, run_dir: Path) -> None:
    """Remove a run directory whose harness died before the launch, and the agent run it opened.

    The agent run is found by its workspace tag; the run starts over as if it had never begun. An
    unreachable store raises TrackingError (the directory is kept: the next attempt looks again).
    """
    _delete_agent_runs(campaign, run_dir)
    print(f"[campaign] {run_dir.name}: its harness died before the agent started; starting it over", flush=True)
    shutil.rmtree(run_dir)


def infra_failure(result: RunResult) -> str | None:
    """Why a final run is an infrastructure failure rather than the agent's outcome.

    Its model API kept failing (:mod:`bench.agents.health`; recorded ``interrupted``). None for any
    other run. Such a run is set aside (:func:`retire`) and run again, as a crashed job is.
    """
    failure = (result.agent_events or {}).get("api_failure")
    if result.status != "interrupted" or not isinstance(failure, dict):
        return None
    return str(failure.get("why") or "the model API failed")


def blocked(key: RunKey, result: RunResult) -> str | None:
    """Why a final run's cell is not run again.

    Its model API refused the run with an answer that cannot heal (a refused key, a forbidden or
    unknown model: :mod:`bench.gateway.refusals`; the gateway stopped the run at once) and the
    agent's credential is the one the run was refused with (its fingerprint now,
    :func:`bench.agents.credentials.fingerprint`, equals the one recorded). The reason says what to
    do. None for any other run, and for such a run once the credential changed (or the run recorded
    none): it is then an infrastructure failure like any other (:func:`infra_failure`), set aside
    and run again.
    """
    failure = (result.agent_events or {}).get("api_failure")
    if result.status != "interrupted" or not isinstance(failure, dict) or failure.get("heals") is not False:
        return None
    agent, model = key.agent.name, key.agent.model
    if not failure.get("access") or failure["access"] != credentials.fingerprint(agent, model):
        return None
    need = credentials.need_of(agent, model)
    source = need.credential.source if need is not None and need.credential is not None else "the agent's credential"
    fix = {
        "auth": f"fix {source} (a valid key, or log in again)",
        "permission": f"give {source} access to this model and API, or use another key",
        "model": "fix the endpoint or the model the API does not know (a new model name is a new cell)",
    }.get(str(failure.get("kind")), f"fix {source}")
    return f"{failure.get('why')}; not run again until the credential changes: {fix}, then bench campaign resume"


def retire(campaign: Campaign, run_dir: Path) -> Path:
    """Set a final run aside so that its cell runs again (``--redo-cut-short``).

    The directory, evidence and all, moves to ``.campaign/retired/`` and its MLflow agent run is
    deleted (MLflow keeps deleted runs restorable: ``mlflow runs restore``), so the store still
    holds one agent run per cell. Returns where the directory went.
    """
    _delete_agent_runs(campaign, run_dir)  # first: an unreachable store raises and nothing has moved
    retired = campaign.folder / ".campaign" / "retired"
    retired.mkdir(parents=True, exist_ok=True)
    n = 1 + sum(1 for p in retired.iterdir() if p.name.startswith(f"{run_dir.name}."))
    dest = retired / f"{run_dir.name}.{n}"
    run_dir.rename(dest)
    return dest


def _delete_agent_runs(campaign: Campaign, run_dir: Path) -> None:
    writer = MlflowWriter(campaign.name)
    for found in agent_runs(campaign):
        if found.data.tags.get(schema.WORKSPACE) == str(run_dir):
            writer.delete_run(found.info.run_id)


def unrecorded(campaign: Campaign, results: list[RunResult]) -> list[RunResult]:
    """The final runs whose agent run is missing, still RUNNING or without the result's status.

    Such a run found the store unreachable at its end. One search for the whole campaign;
    TrackingError if the store is unreachable.
    """
    closed = {r.info.run_id: r.data.tags.get(schema.STATUS) for r in agent_runs(campaign) if r.info.status != "RUNNING"}
    return [r for r in results if not r.mlflow_run_id or closed.get(r.mlflow_run_id) != r.status]


def agent_runs(campaign: Campaign) -> list:
    """The campaign's active MLflow agent runs (a read: none if its experiment does not exist yet).

    TrackingError if the store cannot be reached.
    """
    from bench.tracking import store

    try:
        client = store.client()
        exp = client.get_experiment_by_name(campaign.name)
        if exp is None:
            return []
        kind = f"tags.`{schema.KIND}` = '{schema.KIND_AGENT}'"
        return list(client.search_runs([exp.experiment_id], filter_string=kind, max_results=50000))
    except Exception as e:  # a read of the store: any failure means it cannot be reached now
        raise TrackingError(f"tracking store {store.tracking_uri()} unavailable: {e}") from e


def record_again(result: RunResult) -> None:
    """Record a final run from its result.json (``bench record``).

    TrackingError if the store is still down.
    """
    from bench.pipeline.record import load_run, record

    result, ws = load_run(Path(result.run_dir))
    result.mlflow_run_id = record(MlflowWriter(result.run.campaign), result, ws)
    result.write(ws.result_file)
    print(f"[campaign] {ws.run_dir.name}: recorded in MLflow as {result.mlflow_run_id}", flush=True)


def job_main(campaign: Campaign, run_id: str, *, console: bool = True) -> int:
    """``bench campaign job FILE RUN_ID``: the process of one run.

    Started by an executor, never by hand.

    It takes the CPU set the local executor gave it (``BENCH_CAMPAIGN_CPUS``: inherited by the
    agent and the scorer) and ignores SIGUSR2, the signal submitit asks Slurm to send before a time
    limit (its default action would end the harness, and the scorer and the agent, which inherit
    the setting, mid-step): submitit's own process handles it (:mod:`bench.campaign.slurm`). 0: the
    run is final; 1: it is not (an infrastructure failure); 130: stopped by a signal after what it
    could finish.
    """
    cpus = settings.CAMPAIGN_CPUS.get()
    if cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(cpus))
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    key = campaign.key(run_id)
    result = execute(campaign, key, console=console)
    return 0 if result is not None else 1
