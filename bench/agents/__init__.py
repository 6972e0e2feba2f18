"""The dispatch table: agent name -> adapter. A new agent is one entry here."""

from __future__ import annotations

from bench.agents.base import Agent, AgentError, LaunchContext
from bench.agents.baseline import BaselineAgent
from bench.agents.command import CommandAgent

AGENTS: dict[str, Agent] = {a.name: a for a in (BaselineAgent(), CommandAgent())}


def get_agent(name: str) -> Agent:
    try:
        return AGENTS[name]
    except KeyError:
        raise AgentError(f"unknown agent {name!r}; known agents: {', '.join(sorted(AGENTS))}") from None


__all__ = ["AGENTS", "Agent", "AgentError", "LaunchContext", "get_agent"]
