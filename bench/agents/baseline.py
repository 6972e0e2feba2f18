"""The ``baseline`` agent: runs the task's own train.py, unchanged (the paper's Baseline row)."""

from __future__ import annotations

import sys

from bench.agents.base import LaunchContext


class BaselineAgent:
    name = "baseline"
    option_names: tuple[str, ...] = ()
    description = "runs the task's baseline train.py once (no model API needed)"

    passthrough: tuple[str, ...] = ()  # offline: no key, no network

    def endpoints(self, ctx: LaunchContext) -> tuple[str, ...]:
        return ()

    def command(self, ctx: LaunchContext) -> list[str]:
        return [sys.executable, "train.py"]

    def env(self, ctx: LaunchContext) -> dict[str, str]:
        return {}
