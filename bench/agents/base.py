"""What every agent adapter provides: how to start it, in which environment.

An adapter is small on purpose: the runner owns the workspace, the watchdog, the tracing,
collection, evaluation, audit and recording, identically for every agent.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from bench.tasks import Task


class AgentError(ValueError):
    """An agent that cannot be started as asked (unknown name, missing option)."""


@dataclass(frozen=True)
class LaunchContext:
    """Everything an adapter may use to build its command line."""

    task: Task
    workspace: Path  # the agent's working directory
    prompt: str  # the standard prompt (bench.agents.prompt)
    budget_s: float
    home: Path  # a private HOME for CLIs that keep state there, outside the workspace
    model: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    # base-URL variable -> the metering gateway's URL inside the sandbox (bench.agents.gateway): the adapter points
    # its CLI there instead of at the API; empty when the run has no gateway (unsandboxed, BENCH_GATEWAY=0)
    base_urls: dict[str, str] = field(default_factory=dict)

    def base_url(self, variable: str) -> str | None:
        """The base URL the CLI is given for ``variable``: the gateway's when there is one, else the harness's."""
        return self.base_urls.get(variable) or os.environ.get(variable) or None


class Agent(Protocol):
    name: str
    description: str
    # names or glob patterns of the harness's environment variables the agent may receive (its key, its base
    # URL); everything else is withheld (bench.sandbox.environment)
    passthrough: tuple[str, ...]

    def command(self, ctx: LaunchContext) -> list[str]:
        """argv of the agent process, started with cwd = the workspace."""
        ...

    def env(self, ctx: LaunchContext) -> dict[str, str]:
        """Extra environment variables for the agent process."""
        ...

    def endpoints(self, ctx: LaunchContext) -> tuple[str, ...]:
        """URLs the agent's sandbox may reach (its model API); () for an offline agent: no network at all."""
        ...

    # optional: ``gateway_var(ctx) -> str | None``, the base-URL variable through which the CLI can be pointed at the
    # metering gateway (bench.agents.gateway), None when it cannot for this run (a login served by another host)
    # optional: ``login_files(ctx) -> tuple[(Path, Path), ...]``, the user's login files the CLI reads (source, its
    # place in the private home), bound read-only into this run's sandbox only (bench.agents.credentials)
    # optional: ``own_hosts``, hosts the CLI asks by itself (update checks, telemetry), which the audit does not
    # count against the run (they are refused all the same)
    # optional: ``writable(ctx) -> tuple[Path, ...]``, folders outside the workspace the agent must write (the
    # optuna agent's study storage); an agent without it writes only its workspace and its private home
    # optional: ``option_names``, the ``--agent-option`` keys it knows (any other is refused before a run starts),
    # and ``check(options, model) -> None``, raising AgentError for options or a model it cannot run with; both
    # are asked by bench.preflight before anything is created (``command(ctx)`` keeps its own checks)


def api_endpoints(variables: tuple[str, ...], default: str | None) -> tuple[str, ...]:
    """The base URLs set in the harness's environment under ``variables`` (a gateway, the test mock), else the
    vendor's own API (``default``): what a CLI configured by these variables will connect to."""
    urls = tuple(dict.fromkeys(os.environ[v] for v in variables if os.environ.get(v)))
    return urls or ((default,) if default else ())
