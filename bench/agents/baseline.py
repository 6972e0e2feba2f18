"""The ``baseline`` agent: runs the task's own train.py, unchanged (the paper's Baseline row)."""

from __future__ import annotations

import sys

from bench.agents.base import Agent, LaunchContext


class BaselineAgent(Agent):
    """The task's own baseline: ``train.py`` run once, the reference agents are scored against."""

    name = "baseline"
    description = "runs the task's baseline train.py once (no model API needed)"
    offline = True  # no key, no network
    seeded = True  # each repeat trains from its own recorded seed (RunSpec.seed): repeats measure the task's noise

    def command(self, ctx: LaunchContext) -> list[str]:
        """``python train.py`` in the workspace."""
        return [sys.executable, "train.py"]
