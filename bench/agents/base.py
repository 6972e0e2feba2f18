"""What every agent adapter is.

:class:`Agent`, the one base every adapter derives from, and what it is given.

An adapter is small on purpose: the runner owns the workspace, the watchdog, the tracing,
collection, evaluation, audit and recording, identically for every agent. It says how to start its
agent (:meth:`Agent.command`, the one method it must write) and declares what its run needs beyond
the workspace; every such capability is a member of the base with a default that asks for nothing
(no variable, no network, no login, no extra folder), so the harness calls each one on every adapter
and an adapter overrides only what it needs. One spelling per capability; nothing is found by
``hasattr``.

Errors: a member that cannot answer for the run it is asked about raises :class:`AgentError` with
one line saying what to change (an unknown option, a model it cannot be configured for, a missing
config file). The members taking ``ctx`` are called at the launch (``bench.pipeline.launch``);
``validate``/``check`` before anything of a run is created (``bench.preflight``); the class
attributes by anyone, without a run.
"""

from __future__ import annotations

import abc
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from bench.errors import InputError
from bench.tasks import Task


class AgentError(InputError):
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
    # base-URL variable -> the metering gateway's URL inside the sandbox (bench.gateway.proxy): the
    # adapter points its CLI there instead of at the API; empty when the run has no gateway
    # (unsandboxed, BENCH_GATEWAY=0)
    base_urls: dict[str, str] = field(default_factory=dict)
    seed: int | None = None  # the run's recorded seed (RunSpec.seed): what a seeded agent's search starts from

    def base_url(self, variable: str) -> str | None:
        """The base URL the CLI is given for ``variable``.

        The gateway's when there is one, else the harness's.
        """
        return self.base_urls.get(variable) or os.environ.get(variable) or None


class Agent(abc.ABC):
    """One agent adapter.

    Subclasses set ``name`` and ``description`` and write :meth:`command`; the rest is optional,
    each member's default being what an offline agent that writes only its workspace needs.
    """

    name: ClassVar[str]  # the --agent name, the key of bench.agents.AGENTS
    description: ClassVar[str]  # one line for `bench agents`
    # the model when --model is not given (shown by `bench campaign plan`); None: the agent has no
    # model, or takes it from elsewhere (the generic agent's config)
    default_model: ClassVar[str | None] = None
    # the --agent-option keys it knows: any other is refused before a run starts (validate)
    option_names: ClassVar[tuple[str, ...]] = ()
    # hosts its CLI asks by itself (update checks, telemetry): refused by the sandbox like any other
    # request, but not held against the run by the audit (rule 3), since the agent's code did not
    # ask for them
    own_hosts: ClassVar[tuple[str, ...]] = ()
    # an agent that calls no model API (it gets no key: passthrough is empty): priced at $0 and not
    # counted among the LLM runs by `bench campaign plan`
    offline: ClassVar[bool] = False
    # True: a repeat without a seed draws one at the launch (RunSpec.launched), recorded and passed
    # to its processes (bench.protocol.SEED_VAR); an agent whose training the model decides (a CLI
    # agent) has none unless given
    seeded: ClassVar[bool] = False

    @abc.abstractmethod
    def command(self, ctx: LaunchContext) -> list[str]:
        """The argv of the agent process, started with cwd = the workspace.

        Raises AgentError for options or a model it cannot start with (it keeps its own checks: a
        launch without preflight gets the same answer).
        """

    def env(self, ctx: LaunchContext) -> dict[str, str]:
        """Extra environment variables for the agent process.

        They are its CLI's settings and a private HOME's folders; the harness sets HOME to
        ``ctx.home`` beneath them. Default: none.
        """
        return {}

    def passthrough(self, ctx: LaunchContext) -> tuple[str, ...]:
        """Names or glob patterns of the harness's environment variables the agent may receive.

        They are its key, its base URL; everything else is withheld (bench.sandbox.environment).
        Default: none (an offline agent).
        """
        return ()

    def endpoints(self, ctx: LaunchContext) -> tuple[str, ...]:
        """URLs the agent's sandbox may reach (its model API); () for an offline agent.

        () means no network at all. Raises AgentError for an endpoint the sandbox cannot give it (a
        remote database for the optuna agent).
        """
        return ()

    def parser_name(self, ctx: LaunchContext) -> str | None:
        """The stream parser of its output (a key of bench.agents.PARSERS), or None.

        The parser turns the CLI's JSON lines into events; None: its output is logged as it is.
        Default: None.
        """
        return None

    def gateway_var(self, ctx: LaunchContext) -> str | None:
        """The base-URL variable through which its CLI can be pointed at the metering gateway.

        The gateway is bench.gateway.proxy. None when it cannot for this run (a login served by
        another host), and then the run has no gateway. Default: None.
        """
        return None

    def gateway_path(self, ctx: LaunchContext) -> str:
        """The path the gateway's upstream gets when the API's URL has none and no variable set one.

        That is, when the URL is the vendor's own and the gateway variable is not set here: the path
        its client's base URL has (``/v1`` for OpenAI's). Default: "".
        """
        return ""

    def login_files(self, ctx: LaunchContext) -> tuple[tuple[Path, Path], ...]:
        """The user's login files its CLI reads, each as (source, its place in the private home).

        They are bound read-only into this run's sandbox only (bench.agents.credentials,
        bench.agents.logins). Default: none (a key).
        """
        return ()

    def writable(self, ctx: LaunchContext) -> tuple[Path, ...]:
        """Folders outside the workspace the agent must write, bound read-write.

        An example is the optuna agent's study storage. One that is or holds a harness place is
        refused at the launch. Default: none (the workspace and the private home only).
        """
        return ()

    def check(self, options: dict[str, str], model: str | None) -> None:
        """Refuse, before anything is created, options or a model the agent cannot run with.

        Raises AgentError for options (known by name) or a model it cannot run with. Default:
        accepts any.
        """
        return None

    def validate(self, options: dict[str, str], model: str | None) -> None:
        """What bench.preflight asks before a run.

        AgentError for an option outside ``option_names``, then :meth:`check`. Not meant to be
        overridden: override :meth:`check`.
        """
        unknown = sorted(set(options) - set(self.option_names))
        if unknown:
            allowed = ", ".join(self.option_names) or "none"
            raise AgentError(
                f"the {self.name} agent does not know the option(s) {', '.join(unknown)}; it knows: {allowed}"
            )
        self.check(dict(options), model)


def api_endpoints(variables: tuple[str, ...], default: str | None) -> tuple[str, ...]:
    """The base URLs a CLI configured by ``variables`` will connect to.

    The URLs set in the harness's environment under ``variables`` (a gateway, the test mock), else
    the vendor's own API (``default``).
    """
    urls = tuple(dict.fromkeys(os.environ[v] for v in variables if os.environ.get(v)))
    return urls or ((default,) if default else ())
