"""The ``optuna`` agent: a time-budgeted Optuna search over the task's baseline knobs, run as an agent.

The harness starts this module in the agent's workspace (``python -m baselines.agent --task t6``) exactly as
it starts an LLM agent's CLI: same workspace, watchdog, tracer, collection, evaluation and audit. It reads
its time from ``BENCH_BUDGET_S`` and ``BENCH_STARTED_AT`` and, for each trial (``baselines.driver``):

1. asks the study (TPE, fixed seed) for a configuration from the task's search space (``baselines.spaces``),
   with the epochs cut to what the time left can hold (seconds per unit of work measured on earlier trials);
2. writes ``run_<k>.py`` = the workspace's ``train.py`` with only its ``CONFIG`` values changed
   (``baselines.rewrite``) and launches ``python run_<k>.py`` with its output in ``run_<k>.log`` (the tracer
   makes it a child MLflow run);
3. reads the validation scores (and epochs) that the script logs through ``prepare.log_metrics`` from the
   tracer's spool file of its process (``baselines.spool``), reports them to the pruner on a common grid of
   epochs (``baselines.pruning``), and ends the script with its whole process tree when the pruner says so
   or when the budget runs out (``baselines.trial_process``); the trial's value is the best validation score
   it logged;
4. marks a pruned (or cut) script's run with the reason, through the trace of that script.

It stops launching when the time left cannot hold a trial plus a margin (``baselines.timing``): the 0.75
quantile of the completed trials' durations or, if shorter, a trial of the space's minimum epochs at the
median epoch time measured (the next trial's epochs are fitted to the time left); the first trial always
starts. The harness then evaluates the best checkpoint by validation score, like any agent's. The study's
summary (best params, importances, optimisation history, trials) goes to ``.bench/artifacts/``
(``baselines.summary``), which the harness logs on the agent run.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import warnings
from pathlib import Path

from baselines.driver import Driver
from baselines.spaces import get_space
from baselines.summary import write_summary
from baselines.timing import TimeKeeper
from baselines.trial_process import default_threads
from baselines.trial_workspace import TrialWorkspace
from bench import protocol
from bench.pipeline.workspace import OPTUNA_JOURNAL


def open_storage(spec: str | None, ws: TrialWorkspace):
    """(storage for optuna, its URL or path for people, the journal file if it is one).

    An RDB URL (``sqlite:///...``, ``postgresql+psycopg://...``) is used as is; anything else is the path of
    a journal file (relative: to the workspace); nothing means the workspace's ``OPTUNA_JOURNAL``.
    """
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    if spec and "://" in spec:
        return rdb_storage(spec), spec, None
    path = Path(spec) if spec else ws.journal
    path = path if path.is_absolute() else (ws.path / path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(str(path))), str(path), path


def rdb_storage(url: str):
    """Optuna's storage on the database ``url``, its tables created once under the lock MLflow's schema is created
    under (:func:`bench.tracking.store.schema_lock`; the database itself made if missing on PostgreSQL).

    Why: workers starting together on a fresh database each create the tables and collide (a UniqueViolation on
    PostgreSQL). Optuna needs a database of its own, not MLflow's: both keep their schema version in a table named
    ``alembic_version``, and Optuna refuses a database whose version is MLflow's ("no longer compatible with the
    table schema"); on one PostgreSQL server, ``.../mlflow`` and ``.../optuna``.
    """
    import optuna

    from bench.tracking import store

    with store.schema_lock(url):
        return optuna.storages.RDBStorage(url)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m baselines.agent", description=__doc__.split("\n\n")[0])
    p.add_argument("--task", help="task id (default: TASK_ID of the workspace's prepare.py)")
    p.add_argument(
        "--trials", type=int, default=10_000, help="at most this many trials (default: until the time is up)"
    )
    p.add_argument("--seed", type=int, default=0, help="TPE sampler seed")
    p.add_argument("--storage", help=f"Optuna storage: an RDB URL or a journal file (default: {OPTUNA_JOURNAL})")
    p.add_argument("--study", help="study name (default: <task>-<run directory>); an existing study is continued")
    p.add_argument("--pruner", choices=["median", "none"], default="median")
    p.add_argument("--prune-after", type=int, help="completed trials before pruning starts (default: the space's)")
    p.add_argument("--max-epochs", type=int, help="cap every trial's epochs (quick runs and tests)")
    p.add_argument(
        "--threads", type=int, help="OMP/MKL threads of each trial (default: half the cores; 0: leave the env alone)"
    )
    p.add_argument("--budget", type=float, help="seconds (default: $BENCH_BUDGET_S, set by the harness)")
    p.add_argument(
        "--reserve", type=float, help="seconds kept for the summary at the end (default: 3%% of the budget, 5-30 s)"
    )
    args = p.parse_args(argv)

    import optuna

    ws = TrialWorkspace(Path.cwd())
    task = args.task or str(ws.prepare_constants.get("TASK_ID", ""))
    space = get_space(task)
    budget = args.budget if args.budget is not None else float(protocol.from_harness(protocol.BUDGET_VAR) or 0)
    if budget <= 0:
        p.error("no budget: run under the harness (BENCH_BUDGET_S) or pass --budget SECONDS")
    started = float(protocol.from_harness(protocol.STARTED_AT_VAR) or time.time())
    reserve = args.reserve if args.reserve is not None else min(30.0, max(5.0, 0.03 * budget))
    clock = TimeKeeper(started + budget, reserve)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    storage, storage_url, journal = open_storage(args.storage, ws)
    run_name = ws.path.parent.name if ws.path.name == "workspace" else ws.path.name  # <task>-optuna-r1-<time>
    name = args.study or (run_name if run_name.startswith(f"{task}-") else f"{task}-{run_name}")
    pruner = (
        optuna.pruners.MedianPruner(
            n_startup_trials=space.prune_after if args.prune_after is None else args.prune_after,
            n_warmup_steps=int(round(space.warmup_epochs * space.grid)),
        )
        if args.pruner == "median"
        else optuna.pruners.NopPruner()
    )
    study = optuna.create_study(
        storage=storage,
        study_name=name,
        direction=ws.direction.optuna,
        sampler=optuna.samplers.TPESampler(seed=args.seed, n_startup_trials=space.tpe_startup),
        pruner=pruner,
        load_if_exists=True,
    )
    if not study.trials:
        for params in space.first(ws.base_config):
            study.enqueue_trial(params, skip_if_exists=True)
    study.set_user_attr("task", task)
    study.set_user_attr("metric", ws.metric)

    driver = Driver(
        ws,
        space,
        study,
        clock,
        storage_url=storage_url,
        journal_path=journal,
        seed=args.seed,
        budget_s=budget,
        max_epochs=args.max_epochs,
        threads=default_threads() if args.threads is None else args.threads,
    )
    driver.say(
        f"{task}: study {name!r} on {storage_url}; budget {budget:.0f} s, {clock.left():.0f} s left for trials; "
        f"metric {ws.metric} ({ws.direction.value}); knobs {', '.join(space.knobs)}; "
        f"{driver.threads or 'default'} thread(s) per trial"
    )

    if not ws.traced:
        driver.say(
            "the tracer is off (BENCH_SPOOL_DIR or BENCH_WORKSPACE unset): the trials' validation scores are read "
            "from their traces, so none can be read, pruned or scored; run under the harness"
        )

    def on_term(signum, frame):  # only a flag: the trial loop looks at it twice a second
        driver.stopping = True

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        driver.search(args.trials)
    finally:
        signal.signal(signal.SIGTERM, previous)  # a second SIGTERM while summarising ends us, as it should
    summary = write_summary(driver, final=True)
    if summary["best"]:
        b = summary["best"]
        driver.say(
            f"best: trial {b['trial']} ({b['script']}) {driver.key} {b['value']:.4f}; params {json.dumps(b['params'])}"
        )
    driver.say(f"{summary['trials']} trials: {summary['states']}; summary in {ws.artifacts}")
    return 0 if summary["best"] else 1


if __name__ == "__main__":
    sys.exit(main())
