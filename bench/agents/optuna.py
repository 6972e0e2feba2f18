"""The ``optuna`` agent: a time-budgeted Optuna search over the task's baseline knobs (the calibration row).

No model API: the "agent" is ``python -m baselines.agent`` running in the workspace. Each trial is a
``run_<k>.py`` (the baseline ``train.py`` with the trial's CONFIG) launched like any agent's script, so it
goes through the same workspace, watchdog, tracer, collection, evaluation and audit (see ``baselines/``).

Options (``RunSpec.options``, strings): ``trials`` (at most this many), ``seed`` (TPE seed, default 0),
``storage`` (an Optuna RDB URL or a journal file; default a journal in the workspace's ``.bench/optuna/``),
``study`` (study name; an existing one is continued), ``pruner`` (``median`` or ``none``), ``prune_after``
(completed trials before pruning starts), ``max_epochs`` (a cap on every trial's epochs: quick runs, tests),
``threads`` (OMP/MKL threads per trial; default half the cores, 0 leaves the environment as it is).
"""

from __future__ import annotations

import os
import sys

from bench.agents.base import AgentError, LaunchContext
from bench.paths import ROOT

OPTIONS = ("trials", "seed", "storage", "study", "pruner", "prune_after", "max_epochs", "threads")


class OptunaAgent:
    name = "optuna"
    description = "Optuna search over the baseline's knobs, one run_<k>.py per trial (no model API needed)"

    passthrough: tuple[str, ...] = ()  # offline: no key, no network

    def endpoints(self, ctx: LaunchContext) -> tuple[str, ...]:
        return ()

    def command(self, ctx: LaunchContext) -> list[str]:
        argv = [sys.executable, "-m", "baselines.agent", "--task", ctx.task.id]
        unknown = sorted(set(ctx.options) - set(OPTIONS) - {"command"})
        if unknown:
            raise AgentError(f"the optuna agent does not know the option(s) {', '.join(unknown)}; known: {OPTIONS}")
        for key in OPTIONS:
            value = ctx.options.get(key)
            if value not in (None, ""):
                argv += [f"--{key.replace('_', '-')}", str(value)]
        return argv

    def env(self, ctx: LaunchContext) -> dict[str, str]:
        # The driver imports ``baselines`` from this checkout (installed or not); it keeps that entry off
        # the PYTHONPATH of the scripts it launches, so they see exactly what any agent's scripts see.
        path = [str(ROOT), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
        return {"PYTHONPATH": os.pathsep.join(path)}
