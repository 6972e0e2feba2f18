"""``bench campaign run|resume|status|plan CAMPAIGN.toml``.

A campaign from its file to its last run.

``run`` and ``resume`` do the same thing, from wherever the campaign is: every run of the matrix
that is not final is brought to its end (a run whose harness died is finished by
:func:`bench.resume.resume_run`, the others run), final runs are never redone, and a final run that
MLflow did not get is recorded. ``resume`` says so when there is nothing to resume (the campaign
never started). Both check the whole file and the machine before anything starts (exit 2 with one
line). Exit status: 0 when every run is final and recorded (whatever the agents' outcomes: a failed
agent is a result), 1 when some are not (given up after their retries, or not recorded), 130 when a
signal stopped the campaign.
"""

from __future__ import annotations

import argparse
import shutil
from collections import Counter

from bench import preflight, rundir
from bench.campaign import spec
from bench.campaign.spec import Campaign
from bench.durations import fmt_s
from bench.errors import InputError


def add_cli(sub: argparse._SubParsersAction) -> None:
    """The ``campaign`` subcommand of ``bench``."""
    s = sub.add_parser("campaign", help="a matrix of agents x tasks x repeats from a TOML file: local GPUs or Slurm")
    csub = s.add_subparsers(dest="campaign_command", required=True, metavar="{run,resume,status,plan}")
    for name, what in (
        ("run", "run every run of the campaign that is not final (finished runs are never redone)"),
        ("resume", "the same, for a campaign that was stopped or killed: finishes the runs whose harness died"),
        ("status", "each run's state, the campaign's progress and an ETA from the budgets"),
    ):
        c = csub.add_parser(name, help=what, description=what)
        c.add_argument("file", metavar="CAMPAIGN.toml")
        if name != "status":
            c.add_argument(
                "--redo-cut-short",
                action="store_true",
                help="run again the cells whose run the harness cut short (Ctrl-C, scancel, preemption, a dead "
                "harness): the old run directory moves to .campaign/retired/, its MLflow run is deleted",
            )
        c.set_defaults(func=cmd_campaign)
    what = "runs (per agent and task), GPU-hours, wall-clock and expected API cost, before anything starts"
    p = csub.add_parser("plan", help=what, description=what + ": reads the file only, creates nothing")
    p.add_argument("file", metavar="CAMPAIGN.toml")
    p.add_argument(
        "--measured",
        metavar="EXPERIMENT",
        help="price the API from the token use of a pilot campaign's recorded runs (per budget-minute, scaled to "
        "this file's budgets) instead of published figures",
    )
    p.set_defaults(func=cmd_plan)
    j = csub.add_parser("job")  # one run's process, started by an executor (bench.campaign.job.job_main)
    j.add_argument("file")
    j.add_argument("run_id")
    j.set_defaults(func=cmd_campaign)


def cmd_campaign(args: argparse.Namespace) -> int:
    """``bench campaign run|resume|status`` and a job's own process: the file checked first."""
    from bench.campaign import job  # the pipeline: imported when a campaign command runs, not for every `bench`

    try:
        campaign = spec.load(args.file)
    except InputError as e:
        if args.campaign_command not in ("run", "resume") or not getattr(e, "agents", ()):
            raise
        raise with_agent_problems(e, e.agents) from None
    if args.campaign_command == "job":
        return job.job_main(campaign, args.run_id)
    if args.campaign_command == "status":
        return status(campaign)
    return start(campaign, resume=args.campaign_command == "resume", redo_cut_short=args.redo_cut_short)


def cmd_plan(args: argparse.Namespace) -> int:
    """``bench campaign plan``: the file checked and its cost printed.

    No machine check, nothing created.
    """
    from bench.campaign import plan

    campaign = spec.load(args.file)
    if args.measured is None:
        print(plan.render(campaign))
        return 0
    from analysis.runs import agent_runs  # a command line may read the store through analysis/

    rows = agent_runs(args.measured).to_dict("records")
    if not rows:
        raise InputError(f"--measured {args.measured}: no agent run in that experiment (bench report lists them)")
    use = plan.measured_use(rows, campaign, args.measured)
    if not use:
        raise InputError(f"--measured {args.measured}: none of its agent runs recorded tokens (the metering gateway)")
    print(plan.render(campaign, use, measured=args.measured))
    return 0


def with_agent_problems(file_problems: InputError, agents) -> InputError:
    """A file refused for its own mistakes, with its agents' keys, endpoints and models asked too.

    Those of the agents it names well: a researcher learns of a typo and a missing key in one try,
    not two.
    """
    problems = preflight.Collect()
    with problems.check():
        raise file_problems
    with problems.check():
        preflight.check_api([(agent.name, agent.model) for agent in agents])
    try:
        problems.raise_any()
    except InputError as e:
        return e
    return file_problems


def check_machine(campaign: Campaign) -> None:
    """Every agent's checks of ``bench run``, the executor's needs, then every endpoint.

    The checks: folders, weights, sandbox, options, credentials; then every LLM agent's endpoint,
    key and model, asked in parallel (:func:`bench.preflight.check_api`). Every check runs whatever
    the others found: one :class:`~bench.errors.Problems` lists them all (exit 2).
    """
    from bench.campaign import job

    slurm = campaign.executor == "slurm"
    problems = preflight.Collect()
    for key in {k.agent: k for k in campaign.runs()}.values():  # each agent's first run: its description
        problems.lines += preflight.run_problems(
            campaign.tasks(),
            job.spec_of(campaign, key),  # an unpriced model under a budget is refused here, before any job starts
            endpoints=False,  # all agents at once, below
            sandbox=campaign.spec.sandbox and not slurm,  # a login node may lack what the compute nodes have
        )
    if slurm:
        try:
            import submitit  # noqa: F401
        except ImportError:
            problems.add("executor = \"slurm\" needs submitit: pip install 'onegc-7rc[cluster]'")
        if campaign.slurm.cluster == "slurm" and shutil.which("sbatch") is None:
            problems.add('executor = "slurm": no sbatch here; run on a Slurm login node (or slurm.cluster = "local")')
    with problems.check():  # a missing credential found above again: Problems says each line once
        preflight.check_api([(agent.name, agent.model) for agent in campaign.agents])
    for agent in campaign.agents if not campaign.spec.sandbox else ():
        with problems.check():
            preflight.check_unsandboxed_login(agent.name, agent.model)
    problems.raise_any()


def start(campaign: Campaign, *, resume: bool, redo_cut_short: bool = False) -> int:
    """``bench campaign run`` / ``resume`` (module docstring)."""
    from bench.campaign.retry import CampaignLock

    if resume and not campaign.folder.is_dir():
        raise InputError(
            f"campaign {campaign.name} has not started ({campaign.folder}): bench campaign run {campaign.file}"
        )
    check_machine(campaign)
    with CampaignLock(campaign):
        keys = campaign.runs()
        seen = {k: rundir.inspect(campaign.run_dir(k)) for k in keys}
        if redo_cut_short:
            seen.update(_retire_cut_short(campaign, seen))
        elif resume and (hint := cut_short_hint(campaign, seen)):
            print(f"[campaign] {hint}", flush=True)
        seen.update(_retire_infra_failures(campaign, seen))
        final = [k for k in keys if seen[k].state == "final"]
        todo = [k for k in keys if seen[k].state != "final"]
        unfinished = sum(seen[k].state == "unfinished" for k in todo)
        alive = sum(seen[k].state == "running" for k in todo)
        print(
            f"[campaign] {campaign.name}: {len(keys)} runs ({len(campaign.agents)} agent(s) x {len(campaign.task_ids)} "
            f"task(s) x {campaign.repeats} repeat(s)); {len(final)} final, {unfinished} to finish (harness died), "
            + (f"{alive} held by a live harness (waited for), " if alive else "")
            + f"{len(todo) - unfinished - alive} to run; {campaign.folder}",
            flush=True,
        )
        if campaign.executor == "slurm":
            from bench.campaign.slurm import SlurmExecutor

            outcome = SlurmExecutor(campaign).run(todo, done_before=len(final))
        else:
            from bench.campaign.local import LocalExecutor, slots_for

            outcome = LocalExecutor(campaign, slots_for(campaign)).run(todo, done_before=len(final))
        seen = {k: rundir.inspect(campaign.run_dir(k)) for k in keys}
        unrecorded = _record_missing(campaign, seen)
        if any(s.state == "final" for s in seen.values()):  # the summary runs and the report, once per campaign
            from analysis.report_cli import write_summaries

            write_summaries([campaign.name], prefix="[campaign]")
    statuses = Counter(s.status for s in seen.values() if s.state == "final")
    n_final = sum(statuses.values())
    print(
        f"[campaign] {campaign.name}: {n_final}/{len(keys)} final ("
        + (", ".join(f"{n} {st}" for st, n in sorted(statuses.items())) or "none")
        + f"); {len(outcome.gave_up)} given up, {len(unrecorded)} not recorded in MLflow",
        flush=True,
    )
    refused = _blocked(seen)
    for run_id, why in {**outcome.gave_up, **refused}.items():
        print(f"[campaign] {run_id}: {why}", flush=True)
    if outcome.stopped:
        print(f"[campaign] stopped; go on with: bench campaign resume {campaign.file}", flush=True)
        if hint := cut_short_hint(campaign, seen):  # the run the stop interrupted is final: say how to redo it
            print(f"[campaign] {hint}", flush=True)
        return 130
    if refused:
        print(
            f"[campaign] {len(refused)} run(s) refused by their model API (not run again until the credential "
            f"changes): fix it, then bench campaign resume {campaign.file}",
            flush=True,
        )
    return 0 if n_final == len(keys) and not unrecorded and not refused else 1


def _blocked(seen: dict) -> dict[str, str]:
    """Run id -> why, for the final runs their model API refused for good.

    Refused with an answer that cannot heal, the credential unchanged since
    (:func:`bench.campaign.job.blocked`).
    """
    from bench.campaign import job

    out = {}
    for key, was in seen.items():
        if was.state == "final" and was.result and (why := job.blocked(key, was.result)):
            out[key.run_id] = why
    return out


def cut_short_hint(campaign: Campaign, seen: dict) -> str:
    """The line that names the final runs the harness cut short, and how to run them again.

    Cut short: a Ctrl-C, a harness that died ("" when there are none): final, but not a full-budget
    measurement of the agent. ``status``, ``resume`` and a stopped ``run`` print it alike, so that a
    resume never passes over them in silence.
    """
    short = [k for k, was in seen.items() if was.state == "final" and was.result and rundir.cut_short(was.result)]
    if not short:
        return ""
    return (
        f"{len(short)} run(s) cut short by the harness ({', '.join(k.run_id for k in short[:3])}"
        f"{', ...' if len(short) > 3 else ''}): final, so resume leaves them as they are; "
        f"bench campaign resume {campaign.file} --redo-cut-short runs them again"
    )


def _retire_cut_short(campaign: Campaign, seen: dict) -> dict:
    """``--redo-cut-short``: each final run the harness cut short is set aside.

    By :func:`bench.campaign.job.retire`; its cell is then pending. Returns the new states.
    """
    from bench.campaign import job

    again = {}
    for key, was in seen.items():
        if was.state == "final" and was.result and rundir.cut_short(was.result):
            moved = job.retire(campaign, campaign.run_dir(key))
            print(f"[campaign] {key.run_id}: cut short ({was.status}), runs again; the old run is in {moved}")
            again[key] = rundir.inspect(campaign.run_dir(key))
    return again


def _retire_infra_failures(campaign: Campaign, seen: dict) -> dict:
    """Final runs whose model API kept failing are set aside and run again by this one.

    Those given up by an earlier invocation (:func:`bench.campaign.job.infra_failure`); not those
    refused with an answer that cannot heal while the credential is the same
    (:func:`bench.campaign.job.blocked`: said at the end). Returns the new states.
    """
    from bench.campaign import job

    again = {}
    for key, was in seen.items():
        if was.state == "final" and was.result and (why := job.infra_failure(was.result)):
            if job.blocked(key, was.result):
                continue
            if (was.result.agent_events or {}).get("api_failure", {}).get("heals") is False:
                why = f"{why}; the credential changed since"
            moved = job.retire(campaign, campaign.run_dir(key))
            print(f"[campaign] {key.run_id}: {why}; runs again, the old run is in {moved}", flush=True)
            again[key] = rundir.inspect(campaign.run_dir(key))
    return again


def _record_missing(campaign: Campaign, seen: dict) -> list[str]:
    """Record the final runs MLflow did not get (the store was unreachable at their end).

    The run ids still not recorded (all of them, with one line, when the store cannot be reached
    now).
    """
    from bench.campaign import job
    from bench.result import ResultError
    from bench.tracking.writer import TrackingError

    results = [s.result for s in seen.values() if s.result is not None]
    if not results:
        return []
    try:
        missing = job.unrecorded(campaign, results)
    except TrackingError as e:
        print(f"[campaign] cannot check the runs in MLflow ({e}); run bench campaign resume later", flush=True)
        return [r.run_dir for r in results]
    left = []
    for result in missing:
        try:
            job.record_again(result)
        except (TrackingError, ResultError, OSError) as e:
            print(f"[campaign] {result.run_dir}: still not recorded ({e})", flush=True)
            left.append(result.run_dir)
    return left


def status(campaign: Campaign) -> int:
    """``bench campaign status``: every run's state, then the ETA of what is left."""
    from bench.campaign.retry import last_events
    from bench.campaign.view import Estimate, table

    keys = campaign.runs()
    seen = {k: rundir.inspect(campaign.run_dir(k)) for k in keys}
    jobs: dict[str, str] = {}
    if campaign.executor == "slurm":
        from bench.campaign.slurm import SlurmExecutor

        jobs = SlurmExecutor(campaign).recorded_jobs()
        slots = campaign.slurm.array_parallelism
    else:
        from bench.campaign.local import slots_for

        slots = len(slots_for(campaign))
    print(table(campaign, seen, last_events(campaign), jobs, _blocked(seen)))
    if hint := cut_short_hint(campaign, seen):
        print(hint)
    left = [k for k in keys if seen[k].state != "final"]
    if left:
        eta = Estimate(campaign).eta(left, {}, min(slots, len(left)))
        print(f"{len(left)} run(s) left: about {fmt_s(eta)} on {min(slots, len(left))} slot(s) (from the budgets)")
    return 0
