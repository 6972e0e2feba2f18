"""The ``bench`` command: parse arguments, then call the pipeline or the analysis."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench import preflight, run_flags
from bench.agents import AGENTS
from bench.durations import parse_duration
from bench.errors import BenchError, InputError
from bench.result import ResultError, RunResult
from bench.tasks import all_tasks, get_task


def _tasks(key: str):
    if key.strip() != "all" and not all(k.strip() for k in key.split(",")):
        raise InputError(f"--task {key!r} has an empty task id: give ids like t6, a comma list t1,t6, or all")
    return all_tasks() if key.strip() == "all" else [get_task(k) for k in key.split(",")]


def cmd_tasks(args: argparse.Namespace) -> int:
    """``bench tasks``: the tasks with budget, metric, direction, data (``check``: conformance)."""
    from bench.tasks import data, weights

    if getattr(args, "tasks_command", None) == "check":  # bench tasks check DIR (bench/conformance/check.py)
        from bench.conformance.check import check_main

        return check_main(args.dir, keep=args.keep)
    tasks = all_tasks()  # an id declared twice is said before any line is printed
    # each column as wide as its longest value (a pack's task id or name can be longer than the
    # built-in ones)
    wid = max([2, *(len(t.id) for t in tasks)])
    wname = max([4, *(len(t.name) for t in tasks)])
    wmetric = max([6, *(len(t.metric) for t in tasks)])
    print(
        f"{'id':{wid}} {'name':{wname}} {'budget':>7} {'metric':>{wmetric}} {'dir':>4} {'split':>6} {'baseline':>9}  "
        "data  [source]"
    )
    for t in tasks:
        status = data.data_status(t)
        if t.weights:
            n = sum(weights.installed(w) is not None for w in t.weights)
            status += f"; weights {n}/{len(t.weights)} installed"
        print(
            f"{t.id:{wid}} {t.name:{wname}} {t.budget_minutes:>5g} m {t.metric:>{wmetric}} {t.direction:>4} "
            f"{t.eval_split:>6} {t.baseline_score:>9.3f}  {status}  [{t.source.describe()}]"
        )
    return 0


def cmd_weights(args: argparse.Namespace) -> int:
    """``bench weights``: the provided weights' status, or ``install`` checked files."""
    from bench.tasks import weights

    if args.weights_command == "install":
        return weights.main(args.files, hash_check=not args.no_hash_check)
    return weights.main([])


def cmd_agents(args: argparse.Namespace) -> int:
    """``bench agents``: the dispatch table, or ``install`` / ``check`` the agents' CLIs."""
    if getattr(args, "agents_command", None) == "install":
        from bench.agents.install import install_main

        return install_main(args.names)
    if getattr(args, "agents_command", None) == "check":
        from bench.agents.check import check_main

        if args.model and not args.names:
            raise InputError("bench agents check --model needs the agent(s) it is for: e.g. check codex --model M")
        return check_main(args.names, {n: args.model for n in args.names} if args.model else None)
    for name, agent in sorted(AGENTS.items()):
        print(f"{name:14} {agent.description}")
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    """``bench data prepare``: download (or copy from the mirror), verify and prepare."""
    from bench.tasks import data

    for t in _tasks(args.task):
        path = data.prepare(t, force=args.force)
        print(f"{t.id}: prepared data in {path}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """``bench run``: an agent's runs on tasks (``--resume``: first those whose harness died)."""
    from bench import runspec
    from bench.runner import run

    results, done = [], set()
    if args.resume is not None:  # first finish the runs whose harness died (bench/resume.py)
        from bench import resume

        results, go_on = resume.for_cli(
            args.resume, campaign=args.campaign, agent=args.agent, task=args.task, console=not args.quiet
        )
        if go_on is None:
            if results:
                _print_summary(results)
                _campaign_summaries(results, args)
            return _exit_status(results)
        args.campaign, done = go_on, resume.finished_runs(go_on, args.agent or "")
    if not args.agent or not args.task:
        raise InputError("bench run needs --agent and --task (or --resume [CAMPAIGN|RUN_DIR] to finish runs)")
    flags = run_flags.layer(args)  # the command line's layer of each run's description (flags made from the model)
    if args.agent_command is not None:
        if args.agent != "command":
            raise InputError(f"--agent-command is for --agent command only; the {args.agent} agent would ignore it")
        flags["options"] = {**(flags["options"] or {}), "command": args.agent_command}
    tasks = _tasks(args.task)
    if args.api_fail_window is not None:  # read by bench.agents.health (bench.settings: beats BENCH_API_FAIL_WINDOW)
        from bench import settings

        try:  # judged by the settings' model, as the variable's text is
            settings.pin(BENCH_API_FAIL_WINDOW=float(args.api_fail_window))
        except settings.SettingError:
            raise InputError("--api-fail-window must be a positive duration: e.g. 3m (the default) or 90s") from None
    preflight.check_repeats(args.repeats)
    if flags["seed"] is not None and args.repeats > 1:
        raise InputError(
            "--seed gives every repeat the same seed, so repeats would measure no noise: leave it out (a seeded "
            "agent draws one per repeat and records it), or run one repeat with the seed a run recorded"
        )
    specs = [  # every run's description, judged by its model (RunSpec.build), before anything is created
        runspec.RunSpec.build(task, args.agent, flags, campaign=args.campaign, repeat=repeat, console=not args.quiet)
        for task in tasks
        for first in [_first_repeat(args, task.id)]
        for repeat in range(first, first + args.repeats)
    ]
    preflight.check_run(tasks, specs[0])  # the machine's side: the agent, its credential, weights, sandbox
    for spec in specs:
        if (spec.task, spec.repeat) in done:  # never redo a finished run
            print(f"[bench] {spec.label}: finished in {args.campaign} already, skipped")
            continue
        results.append(run(spec))
    _print_summary(results)
    _campaign_summaries(results, args)
    return _exit_status(results)


def _first_repeat(args: argparse.Namespace, task_id: str) -> int:
    """``--first-repeat`` when given; with ``--resume`` 1 (its grid skips the finished runs).

    Else the next repeat free in the campaign (:func:`bench.rundir.next_repeat`), so a second
    ``bench run`` is r2, not another r1.
    """
    if args.first_repeat is not None or args.resume is not None:
        return 1 if args.first_repeat is None else args.first_repeat  # 0: the model refuses it
    from bench import rundir
    from bench.pipeline.workspace import campaign_dir

    return rundir.next_repeat(campaign_dir(args.campaign), task_id, args.agent)


def _campaign_summaries(results: list[RunResult], args: argparse.Namespace) -> None:
    """The campaign summary of each campaign the runs went into, unless ``--no-summary``."""
    if getattr(args, "no_summary", False) or not results:
        return
    from analysis.report_cli import write_summaries

    write_summaries(r.run.campaign for r in results)


def _exit_status(results: list[RunResult]) -> int:
    """0 only when every run succeeded and is recorded in MLflow.

    A run that is not: ``bench record RUN_DIR``.
    """
    return 0 if all(r.status == "success" and r.tracking_error is None for r in results) else 1


def _print_summary(results: list[RunResult]) -> None:
    print(
        "\n" + f"{'task':5} {'agent':12} {'rep':>3} {'status':13} {'metric':>9} {'score':>8} {'baseline':>9} "
        f"{'wall':>7}  run dir"
    )
    for r in results:
        score = f"{r.score:.4f}" if r.score is not None else "-"
        print(
            f"{r.run.task:5} {r.run.agent:12} {r.run.repeat:>3} {r.status:13} {r.metric:>9} {score:>8} "
            f"{r.baseline_score:>9g} {r.wall_time_s:>6.0f}s  {r.run_dir}"
        )


def cmd_record(args: argparse.Namespace) -> int:
    """``bench record RUN_DIR``: (re)record a run in MLflow; one without result.json is finished."""
    if not Path(args.run_dir).is_dir():
        raise InputError(f"no run directory {args.run_dir}: give the run dir bench run printed")
    from bench.pipeline.record import load_run, record
    from bench.tracking.writer import MlflowWriter

    if not (Path(args.run_dir) / "result.json").is_file():
        return _finish_from_spool(Path(args.run_dir))
    result, ws = load_run(Path(args.run_dir))
    result.mlflow_run_id = record(MlflowWriter(result.run.campaign), result, ws)
    result.write(ws.result_file)
    print(f"recorded {ws.run_dir} as MLflow run {result.mlflow_run_id}")
    return 0


def _finish_from_spool(run_dir: Path) -> int:
    """A run directory without result.json.

    Its harness died before the result existed, so there is nothing to record yet. Everything needed
    to make it is in the directory (run.json, the spool, relay.json, the evidence), so the run is
    finished here exactly as ``bench run --resume`` finishes it, which also records it in MLflow.
    """
    from bench import resume
    from bench.rundir import RUNNING, UNFINISHED, RunDir
    from bench.tracking.writer import MlflowWriter

    seen = RunDir(run_dir).seen()
    if seen.state not in (RUNNING, UNFINISHED) and not seen.note:  # stale: nothing was launched there
        raise ResultError(f"{run_dir} has no result.json and no run.json: no run of bench run was launched there")
    if seen.state == UNFINISHED:  # a live one (or an unreadable run.json): resume_run refuses it in one line
        print(
            f"bench record: {run_dir} has no result.json (its harness died); finishing the run from its spool and "
            "relay state, as bench run --resume does",
            flush=True,
        )
    result = resume.resume_run(run_dir, by="bench record")
    # record.save said so if the store refused: the agent run is then still open, and the exit
    # status says it
    writer = MlflowWriter(result.run.campaign)
    if not result.mlflow_run_id or writer.get_run(result.mlflow_run_id).info.status == "RUNNING":
        return 1
    print(f"recorded {run_dir} as MLflow run {result.mlflow_run_id} ({result.status})")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """``bench demo``: the baseline on T6 and a short T1, then a leaderboard."""
    from bench.demo import demo

    return demo(t1_budget_s=args.t1_budget, campaign=args.campaign)


def cmd_ui(args: argparse.Namespace) -> int:
    """``bench ui`` (bench/tracking/ui.py).

    A busy port or an unknown campaign is one line before anything starts.
    """
    from bench.tracking import ui

    try:
        return ui.serve(args.host, args.port, args.experiment)
    except LookupError as e:
        raise InputError(f"ui --experiment: {e}") from e  # printed after "bench: "
    except ui.PortBusy as e:
        raise InputError(f"bench ui: {e}") from e


def build_parser() -> argparse.ArgumentParser:
    """The ``bench`` command line: every subcommand and its flags."""
    p = argparse.ArgumentParser(prog="bench", description="Run the 1GC-7RC benchmark for AI coding agents.")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("tasks", help="list the tasks with budget, metric, direction and data status")
    s.set_defaults(func=cmd_tasks)
    tsub = s.add_subparsers(dest="tasks_command")
    t = tsub.add_parser("check", help="check a task folder's promises on its small generated data (conformance)")
    t.add_argument("dir", help="the task folder (task.toml, program.md, prepare.py, train.py, smalldata.py)")
    t.add_argument("--keep", action="store_true", help="keep the check's temporary folder (its path is printed)")
    s = sub.add_parser("agents", help="list the agents of the dispatch table (or install their CLIs)")
    s.set_defaults(func=cmd_agents)
    asub = s.add_subparsers(dest="agents_command")
    a = asub.add_parser("install", help="install pinned agent CLIs into the cache (npm / a private venv)")
    a.add_argument("names", nargs="+", help="claude-code, codex, opencode, gemini, aider, or all")
    a.set_defaults(func=cmd_agents)
    a = asub.add_parser(
        "check",
        help="per agent: CLI installed, credential found (kind and where, never the value), endpoint answering",
    )
    a.add_argument("names", nargs="*", help="agents to check (default: all); exit 1 if one of them is not ready")
    a.add_argument("--model", help="the model to look for in the endpoint's list (default: each agent's)")
    a.set_defaults(func=cmd_agents)

    s = sub.add_parser("data", help="download, verify and prepare task data")
    dsub = s.add_subparsers(dest="data_command", required=True)
    d = dsub.add_parser("prepare", help="download (or copy from $BENCH_DATA_MIRROR), verify and prepare")
    d.add_argument("task", help="task id (t6), folder name, comma list, or 'all'")
    d.add_argument("--force", action="store_true", help="rebuild the prepared data even if present")
    d.set_defaults(func=cmd_data)

    s = sub.add_parser("weights", help="pretrained weights the tasks provide (T3's DINOv3): status, install")
    s.set_defaults(func=cmd_weights, weights_command=None)
    wsub = s.add_subparsers(dest="weights_command")
    w = wsub.add_parser("install", help="check user-downloaded files (hash + strict load) and install them")
    w.add_argument("files", nargs="+", help="the official DINOv3 .pth files (names as released)")
    w.add_argument("--no-hash-check", action="store_true", help="skip the file-name hash check (keys still checked)")
    w.set_defaults(func=cmd_weights)

    s = sub.add_parser("run", help="run an agent on tasks under the benchmark protocol")
    s.add_argument("--agent", help=f"one of: {', '.join(sorted(AGENTS))} (required unless --resume)")
    s.add_argument("--task", help="task id (t6), comma list, or 'all' (required unless --resume)")
    s.add_argument(
        "--resume",
        nargs="?",
        const="",
        metavar="CAMPAIGN|RUN_DIR",
        help="finish runs whose harness died (default: --campaign's), then run the --agent/--task grid if given, "
        "skipping finished runs",
    )
    s.add_argument("--repeats", type=int, default=1, help="independent runs per task (paper: 5)")
    s.add_argument(
        "--first-repeat",
        type=int,
        help="index of the first repeat (default: the next one free in the campaign for this agent and task)",
    )
    s.add_argument("--campaign", default="1gc-7rc", help="campaign = MLflow experiment name")
    s.add_argument("--agent-command", help="shell command for the 'command' agent")
    s.add_argument(
        "--api-fail-window",
        type=parse_duration,
        metavar="DURATION",
        help="end a run whose model API keeps failing this long (auth errors, no route): an infrastructure "
        "failure, recorded interrupted (default 3m)",
    )
    s.add_argument("--quiet", action="store_true", help="do not stream the agent's output")
    s.add_argument(
        "--no-summary",
        action="store_true",
        help="skip the campaign summary at the end (MLflow runs with Agg per entry and the report as artifacts)",
    )
    run_flags.add_flags(s)  # --budget, --grace, --model, --tag, --memory, ...: the fields of RunSpec and Limits
    s.set_defaults(func=cmd_run)

    s = sub.add_parser(
        "record",
        help="(re)record a run directory in MLflow, e.g. after an outage (one whose harness died: finished first)",
    )
    s.add_argument("run_dir")
    s.set_defaults(func=cmd_record)

    s = sub.add_parser("demo", help="baseline agent on T6 (full) and T1 (reduced budget), then a leaderboard")
    s.add_argument("--t1-budget", type=parse_duration, default=parse_duration("8m"), help="T1 budget (default 8m)")
    s.add_argument("--campaign", default="demo")
    s.set_defaults(func=cmd_demo)

    from bench.agents.price_map import add_cli as add_prices

    add_prices(sub)  # bench prices [refresh]: the price table, generated from LiteLLM's model cost map
    from bench.campaign.cli import add_cli as add_campaign

    add_campaign(sub)  # bench campaign run | resume | status CAMPAIGN.toml

    from analysis.report_cli import add_cli as add_report
    from baselines.cli import add_cli as add_baselines

    add_report(sub)  # bench report
    add_baselines(sub)  # bench baselines tune | optuna-dashboard
    from bench.tracking.server import add_cli as add_server

    add_server(sub)  # bench server: a shared MLflow server on PostgreSQL
    from bench.sandbox.doctor import add_cli as add_sandbox

    add_sandbox(sub)  # bench sandbox view: the view a run's sandboxes get, and why
    from bench.selftest.cli import add_cli as add_selftest

    add_selftest(sub)  # bench selftest: the GPU proof kit (make gpu-proof)
    from bench.bundle.verify_cli import add_cli as add_verify

    add_verify(sub)  # bench verify RUN|CAMPAIGN|BUNDLE: re-scored and re-audited from what it recorded
    from bench.bundle.cli import add_cli as add_bundle

    add_bundle(sub)  # bench export / bench import: a campaign as one bundle (docs/publishing.md)

    s = sub.add_parser("ui", help="open the MLflow UI on the tracking store (lean: 1 worker)")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=5000)
    s.add_argument(
        "--experiment",
        action="append",
        metavar="NAME",
        help="campaign to link (repeatable; default: every experiment with agent runs, latest first)",
    )
    s.set_defaults(func=cmd_ui)
    return p


def _command_parser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The (sub-)command's own parser that ``argv`` names.

    ``bench campaign resume ...``: resume's.
    """
    for token in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs and token in subs[0].choices:
            parser = subs[0].choices[token]
    return parser


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line, a mistyped flag answered by its command's usage and the nearest flag.

    argparse before 3.14 prints the top-level usage and no suggestion.
    """
    import difflib

    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        command = _command_parser(parser, list(sys.argv[1:] if argv is None else argv))
        flags = [s for a in command._actions for s in a.option_strings if s.startswith("--")]
        near = [m for x in extra if x.startswith("-") for m in difflib.get_close_matches(x.split("=")[0], flags, 1)]
        hint = f"; did you mean {' or '.join(dict.fromkeys(near))}?" if near else f"; {command.prog} --help lists them"
        command.error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    return args


def main(argv: list[str] | None = None) -> int:
    """``bench``: the command's exit status.

    Every error of the toolkit is one message and its kind's exit code.

    An :class:`~bench.errors.InputError` (a bad argument, file or setting, refused before anything
    was created) exits 2; any other :class:`~bench.errors.BenchError` (the work could not finish:
    data, tracking, a sandbox) 1; an interrupt 130.
    """
    args = _parse(argv)
    try:
        return args.func(args)
    except BenchError as e:
        print(f"bench: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
