"""The ``optuna`` agent.

A time-budgeted Optuna search over the task's baseline knobs (the calibration row).

No model API: the "agent" is ``python -m baselines.agent`` running in the workspace. Each trial is a
``run_<k>.py`` (the baseline ``train.py`` with the trial's CONFIG) launched like any agent's script,
so it goes through the same workspace, watchdog, tracer, collection, evaluation and audit (see
``baselines/``).

Options (``RunSpec.options``, strings): ``trials`` (at most this many), ``seed`` (TPE seed; default
the run's recorded seed), ``storage`` (an Optuna RDB URL or a journal file; default a journal in the
workspace's ``.bench/optuna/``), ``study`` (study name; an existing one is continued), ``pruner``
(``median`` or ``none``), ``prune_after`` (completed trials before pruning starts), ``max_epochs``
(a cap on every trial's epochs: quick runs, tests), ``threads`` (OMP/MKL threads per trial; default
half the cores, 0 leaves the environment as it is).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

from bench.agents.base import Agent, AgentError, LaunchContext
from bench.paths import ROOT
from bench.sandbox.network import parse_endpoint

DB_PORTS = {"postgresql": 5432, "postgres": 5432, "mysql": 3306}  # the default port of a database URL without one
OPTIONS = ("trials", "seed", "storage", "study", "pruner", "prune_after", "max_epochs", "threads")


class OptunaAgent(Agent):
    """An Optuna search over the baseline's knobs, one ``run_<k>.py`` per trial (no model API)."""

    name = "optuna"
    option_names = OPTIONS
    description = "Optuna search over the baseline's knobs, one run_<k>.py per trial (no model API needed)"
    offline = True  # no key; no network but a study storage on this machine (endpoints)
    seeded = True  # each repeat's trials train from its recorded seed; it is the TPE seed too unless given

    def endpoints(self, ctx: LaunchContext) -> tuple[str, ...]:
        """A study storage served on this machine is bridged port for port.

        For example ``postgresql://127.0.0.1:5432/...``. A remote database server cannot be: its
        clients do not speak through the sandbox's HTTP proxy.
        """
        url = urlsplit(ctx.options.get("storage") or "")
        if "://" not in (ctx.options.get("storage") or "") or url.scheme.startswith("sqlite") or not url.hostname:
            return ()
        endpoint = parse_endpoint(f"tcp://{url.hostname}:{url.port or DB_PORTS.get(url.scheme.split('+')[0], 0)}")
        if not endpoint.loopback or not endpoint.port:
            raise AgentError(
                f"the optuna agent's sandbox reaches a study storage only on this machine (127.0.0.1:PORT), not "
                f"{url.hostname}:{url.port or '?'}: tunnel the database to a local port, use a SQLite or journal "
                "file, or run with --unsandboxed"
            )
        return (endpoint.url,)

    def writable(self, ctx: LaunchContext) -> tuple[Path, ...]:
        """The folder of a SQLite or journal storage outside the workspace; nothing inside it.

        SQLite writes its journal beside the database file. This folder is the one harness place the
        calibration agent writes.
        """
        spec = ctx.options.get("storage") or ""
        if spec.startswith("sqlite:///") and spec != "sqlite:///:memory:":
            path = Path(spec.removeprefix("sqlite:///"))
        elif spec and "://" not in spec:
            path = Path(spec)
        else:
            return ()
        if not path.is_absolute():
            return ()  # relative to the agent's working directory: inside its workspace
        path.parent.mkdir(parents=True, exist_ok=True)
        return (path.parent.resolve(),)

    def check(self, options: dict[str, str], model: str | None) -> None:
        """Before anything is created: only the options the driver knows."""
        unknown = sorted(set(options) - set(OPTIONS) - {"command"})
        if unknown:
            raise AgentError(f"the optuna agent does not know the option(s) {', '.join(unknown)}; known: {OPTIONS}")

    def command(self, ctx: LaunchContext) -> list[str]:
        """The search driver (``python -m baselines.agent``) for the task, with the repeat seed."""
        argv = [sys.executable, "-m", "baselines.agent", "--task", ctx.task.id]
        self.check(ctx.options, ctx.model)
        options = dict(ctx.options)
        if not options.get("seed") and ctx.seed is not None:  # the repeat's own search, recorded with the run
            options["seed"] = str(ctx.seed)
        for key in OPTIONS:
            value = options.get(key)
            if value not in (None, ""):
                argv += [f"--{key.replace('_', '-')}", str(value)]
        return argv

    def env(self, ctx: LaunchContext) -> dict[str, str]:
        """PYTHONPATH with this checkout first, so that the driver imports ``baselines`` from it."""
        # The driver imports ``baselines`` from this checkout (installed or not); it keeps that
        # entry off the PYTHONPATH of the scripts it launches, so they see exactly what any agent's
        # scripts see.
        path = [str(ROOT), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
        return {"PYTHONPATH": os.pathsep.join(path)}
