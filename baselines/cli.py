"""``bench baselines ...`` and ``bench optuna-dashboard``: the command line of the tuned baselines.

Wired into ``bench/cli.py`` with ``add_cli(sub)``; every handler returns the process exit code.

    bench baselines tune --task t6 --budget 15m [--trials N] [--storage URL] [--campaign baselines]
    bench baselines noise --task t6 [--seeds 5] [--from-campaign NAME] [--small]
    bench baselines show [--task t6]
    bench baselines optuna-dashboard [--storage URL|JOURNAL|RUN_DIR] [--port 8080]
    bench optuna-dashboard ...            (the same)
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from bench.durations import parse_duration
from bench.pipeline.workspace import OPTUNA_JOURNAL


def add_cli(subparsers, *, dashboard_alias: bool = True) -> None:
    """Add ``baselines`` (tune, show, optuna-dashboard) and, by default, a top-level ``optuna-dashboard``."""
    s = subparsers.add_parser("baselines", help="Optuna-tuned reference baselines: tune, show, optuna-dashboard")
    sub = s.add_subparsers(dest="baselines_command", required=True)

    t = sub.add_parser(
        "tune",
        help="tune a task's baseline with the optuna agent under the benchmark protocol; writes baselines/results/",
    )
    t.add_argument("--task", required=True, help="task id (t6)")
    t.add_argument("--budget", type=parse_duration, help="wall-clock budget: 15m, 1h (default: the task's)")
    t.add_argument("--trials", type=int, help="at most this many trials (default: as many as the budget holds)")
    t.add_argument("--storage", help="Optuna storage URL (default: sqlite:///<mlruns>/optuna/optuna.db)")
    t.add_argument("--campaign", default="baselines", help="MLflow experiment (default: baselines)")
    t.add_argument("--seed", type=int, default=0, help="TPE seed (default 0)")
    t.add_argument("--study", help="study name (default: <task>-tune-<time>); an existing study is continued")
    t.add_argument("--out", type=Path, help="results file (default: baselines/results/<task>.json)")
    t.add_argument("--no-write", action="store_true", help="do not write the results file")
    t.add_argument("--quiet", action="store_true", help="do not stream the agent's output")
    t.set_defaults(func=cmd_tune)

    n = sub.add_parser(
        "noise",
        help="a task's noise floor: the baseline's spread over seeds (writes baselines/results/noise/<task>.json)",
    )
    n.add_argument("--task", required=True, help="task id (t6)")
    n.add_argument("--seeds", type=int, default=5, help="repeats, each with its own drawn seed (default 5)")
    n.add_argument("--campaign", help="MLflow experiment of the repeats (default: noise-<task>)")
    n.add_argument("--from-campaign", metavar="NAME", help="measure a campaign's seeded baseline runs; run nothing")
    n.add_argument("--small", action="store_true", help="on the task's small generated data with TINY (marked so)")
    n.add_argument("--budget", type=parse_duration, help="each repeat's budget (default: the task's)")
    n.add_argument("--out", type=Path, help="results file (default: baselines/results/noise/<task>.json)")
    n.add_argument("--no-write", action="store_true", help="do not write the results file")
    n.add_argument("--quiet", action="store_true", help="do not stream the agent's output")
    n.set_defaults(func=cmd_noise)

    w = sub.add_parser("show", help="the committed tuned results (baselines/results/*.json)")
    w.add_argument("--task", help="one task (default: all)")
    w.set_defaults(func=cmd_show)

    parsers = [sub.add_parser("optuna-dashboard", help="open optuna-dashboard on a study storage")]
    if dashboard_alias:
        parsers.append(subparsers.add_parser("optuna-dashboard", help="open optuna-dashboard on a study storage"))
    for d in parsers:
        d.add_argument(
            "--storage",
            help="RDB URL, journal file, or an optuna agent's run directory (default: the tune storage)",
        )
        d.add_argument("--host", default="127.0.0.1")
        d.add_argument("--port", type=int, default=8080)
        d.set_defaults(func=cmd_dashboard)


def cmd_noise(args: argparse.Namespace) -> int:
    from baselines import noise
    from baselines.tune import hardware
    from bench.errors import InputError

    if args.seeds < 2:
        raise InputError("--seeds must be at least 2: one seed has no spread (the noise floor wants 5)")
    if args.small:
        scores, data, source = noise.small(args.task, args.seeds), "small", "bench baselines noise --small"
    else:
        campaign = args.from_campaign or args.campaign or f"noise-{args.task}"
        if not args.from_campaign:
            noise.run_campaign(args.task, args.seeds, campaign, args.budget, console=not args.quiet)
        scores, data, source = noise.from_campaign(campaign, args.task), "full", f"campaign {campaign}"
    if len(scores) < 2:
        print(f"bench baselines noise: {len(scores)} seeded baseline run(s) of {args.task}: no spread to measure")
        return 1
    result = noise.summarise(args.task, scores, data=data, hardware=hardware(), source=source)
    print(
        f"{result['task']}: {result['metric']} {result['mean_score']:.4f} ± {result['std_score']:.4f} (std) over "
        f"{len(scores)} seeds; Eq. 1's term {result['mean_rel']:+.4f} ± {result['std_rel']:.4f} ({data} data)"
    )
    if not args.no_write:
        print(f"wrote {noise.write(result, args.out)}")
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from baselines.tune import tune

    tuned = tune(
        args.task,
        budget_s=args.budget,
        trials=args.trials,
        storage=args.storage,
        campaign=args.campaign,
        seed=args.seed,
        study=args.study,
        out=args.out,
        write=not args.no_write,
        console=not args.quiet,
    )
    _print_rows([tuned])
    if tuned.get("written_to"):
        print(f"wrote {tuned['written_to']}")
    print(f"study {tuned['study_name']}: bench baselines optuna-dashboard --storage {tuned['storage']}")
    return 0 if tuned.get("official_score") is not None else 1


def cmd_show(args: argparse.Namespace) -> int:
    from baselines.tune import load_results

    rows = list(load_results().values())
    if args.task:
        rows = [r for r in rows if r["task"] == args.task]
    if not rows:
        print("no tuned results" + (f" for {args.task}" if args.task else "") + " in baselines/results/")
        return 1
    _print_rows(rows)
    return 0


def _print_rows(rows: list[dict]) -> None:
    print(
        f"{'task':5} {'metric':>8} {'paper':>8} {'tuned':>8} {'val':>8} {'trials':>6} {'pruned':>6} "
        f"{'budget':>7}  date        hardware"
    )
    for r in rows:
        score = f"{r['official_score']:.4f}" if r.get("official_score") is not None else "-"
        val = f"{r['val_score']:.4f}" if r.get("val_score") is not None else "-"
        paper = r.get("paper_baseline_score")
        print(
            f"{r['task']:5} {r['metric']:>8} {paper if paper is not None else '-':>8} {score:>8} {val:>8} "
            f"{r['trials']:>6} {r['pruned']:>6} {r['budget_s'] / 60:>5.0f} m  {r['date']}  {r['hardware']}"
        )


def resolve_storage(spec: str | None) -> str:
    """An RDB URL as is; a run directory or workspace -> its agent's journal file; a file path as is."""
    from baselines.tune import default_storage

    if not spec:
        return default_storage()
    if "://" in spec:
        return spec
    path = Path(spec).expanduser()
    if path.is_dir():
        for candidate in (
            path / "workspace" / OPTUNA_JOURNAL,
            path / OPTUNA_JOURNAL,
        ):
            if candidate.is_file():
                return str(candidate)
        found = sorted(path.rglob(OPTUNA_JOURNAL.name))
        if found:
            return str(found[0])
        raise FileNotFoundError(f"no Optuna journal (study.journal) under {path}")
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    return str(path)


def dashboard_command(storage: str, host: str, port: int) -> list[str]:
    exe = Path(sys.executable).parent / "optuna-dashboard"
    program = str(exe) if exe.exists() else shutil.which("optuna-dashboard")
    if program is None:
        raise FileNotFoundError("optuna-dashboard is not installed: pip install optuna-dashboard (0.21 tested)")
    return [program, storage, "--host", host, "--port", str(port)]


def cmd_dashboard(args: argparse.Namespace) -> int:
    try:
        storage = resolve_storage(args.storage)
        cmd = dashboard_command(storage, args.host, args.port)
    except FileNotFoundError as e:
        print(f"bench: {e}", file=sys.stderr)
        return 1
    if storage.startswith("sqlite:///") and not Path(storage.removeprefix("sqlite:///")).is_file():
        print(f"bench: no study storage at {storage} yet (run `bench baselines tune` first)", file=sys.stderr)
        return 1
    print(f"optuna-dashboard on http://{args.host}:{args.port}  (storage {storage}); Ctrl-C to stop", flush=True)
    try:
        return subprocess.call(cmd)
    except KeyboardInterrupt:
        return 0
