"""The dispatch table: agent name -> adapter. A new agent is one entry here.

Offline agents need no model API (``baseline``, ``command``, ``optuna``); the CLI agents run a
real coding-agent CLI, installed pinned into the cache on first use (``bench agents install``).
"""

from __future__ import annotations

from pathlib import Path

from bench.agents.aider import AiderAgent
from bench.agents.base import Agent, AgentError, LaunchContext
from bench.agents.baseline import BaselineAgent
from bench.agents.claude_code import ClaudeCodeAgent
from bench.agents.codex import CodexAgent
from bench.agents.command import CommandAgent
from bench.agents.gemini import GeminiAgent
from bench.agents.generic import GenericAgent
from bench.agents.opencode import OpenCodeAgent
from bench.agents.optuna import OptunaAgent

AGENTS: dict[str, Agent] = {
    a.name: a
    for a in (
        BaselineAgent(),
        CommandAgent(),
        OptunaAgent(),
        ClaudeCodeAgent(),
        CodexAgent(),
        OpenCodeAgent(),
        GeminiAgent(),
        AiderAgent(),
        GenericAgent(),
    )
}


def get_agent(name: str) -> Agent:
    try:
        return AGENTS[name]
    except KeyError:
        raise AgentError(f"unknown agent {name!r}; known agents: {', '.join(sorted(AGENTS))}") from None


def passthrough_of(agent: Agent, ctx: LaunchContext) -> tuple[str, ...]:
    """The harness variables the agent may receive for this run (bench.sandbox.environment)."""
    if hasattr(agent, "passthrough_for"):
        return tuple(agent.passthrough_for(ctx))
    return tuple(getattr(agent, "passthrough", ()))


def endpoints_of(agent: Agent, ctx: LaunchContext) -> tuple[str, ...]:
    """The URLs the agent's sandbox may reach for this run; none for an agent that declares none."""
    return tuple(agent.endpoints(ctx)) if hasattr(agent, "endpoints") else ()


def own_hosts_of(agent: Agent) -> tuple[str, ...]:
    """Hosts the agent's CLI asks by itself (update checks, telemetry): refused by the sandbox like any other, but
    not findings of the audit (rule 3), since the agent's code did not ask for them."""
    return tuple(getattr(agent, "own_hosts", ()))


def writable_of(agent: Agent, ctx: LaunchContext) -> tuple[Path, ...]:
    """Folders outside its workspace the agent's sandbox may write for this run; none for most agents."""
    return tuple(Path(p) for p in agent.writable(ctx)) if hasattr(agent, "writable") else ()


def check_of(agent: Agent, options: dict[str, str], model: str | None) -> None:
    """AgentError for an option the agent does not know (when it declares ``option_names``) or options or a model
    its own ``check`` refuses: asked before anything of a run is created."""
    known = getattr(agent, "option_names", None)
    unknown = sorted(set(options) - set(known)) if known is not None else []
    if unknown:
        allowed = ", ".join(known) if known else "none"
        raise AgentError(
            f"the {agent.name} agent does not know the option(s) {', '.join(unknown)}; it knows: {allowed}"
        )
    if hasattr(agent, "check"):
        agent.check(dict(options), model)


def parser_of(agent: Agent, ctx: LaunchContext) -> str | None:
    """The stream parser of an agent's output for this run (None: print its output as it is)."""
    if hasattr(agent, "parser_for"):
        return agent.parser_for(ctx)
    return getattr(agent, "parser_name", None)


__all__ = [
    "AGENTS",
    "Agent",
    "AgentError",
    "LaunchContext",
    "check_of",
    "endpoints_of",
    "own_hosts_of",
    "get_agent",
    "parser_of",
    "passthrough_of",
    "writable_of",
]
