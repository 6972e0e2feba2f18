"""The dispatch tables: agent name -> adapter, stream parser name -> parser.

A new agent is one entry in each.

Every adapter derives from :class:`bench.agents.base.Agent`, which declares what the harness asks of
it. Offline agents need no model API (``baseline``, ``command``, ``optuna``); the CLI agents run a
real coding-agent CLI, installed pinned into the cache on first use (``bench agents install``). Each
CLI's stream parser lives in its agent's module, on the shared base of :mod:`bench.agents.parsing`;
:func:`make_parser` builds the one an adapter names (:meth:`~bench.agents.base.Agent.parser_name`).
"""

from __future__ import annotations

from pathlib import Path

from bench.agents.aider import AiderAgent, AiderParser
from bench.agents.base import Agent, AgentError, LaunchContext
from bench.agents.baseline import BaselineAgent
from bench.agents.claude_code import ClaudeCodeAgent, ClaudeCodeParser
from bench.agents.codex import CodexAgent, CodexParser
from bench.agents.command import CommandAgent
from bench.agents.gemini import GeminiAgent, GeminiParser
from bench.agents.generic import GenericAgent, GenericParser
from bench.agents.opencode import OpenCodeAgent, OpenCodeParser
from bench.agents.optuna import OptunaAgent
from bench.agents.parsing import Parser

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

PARSERS: dict[str, type[Parser]] = {
    "claude-code": ClaudeCodeParser,
    "codex": CodexParser,
    "opencode": OpenCodeParser,
    "gemini": GeminiParser,
    "aider": AiderParser,
    "generic": GenericParser,
}


def get_agent(name: str) -> Agent:
    """The adapter registered as ``name``; an AgentError naming the known ones otherwise."""
    try:
        return AGENTS[name]
    except KeyError:
        raise AgentError(f"unknown agent {name!r}; known agents: {', '.join(sorted(AGENTS))}") from None


def make_parser(name: str, model: str | None = None, mapping: dict | str | Path | None = None) -> Parser:
    """The stream parser a run's output is read with.

    ``model`` prices runs whose CLI reports no cost (:mod:`bench.agents.pricing`); ``mapping`` (a
    dict or a .toml/.json file) configures the generic parser.
    """
    if name == "generic" and mapping is not None:
        return GenericParser(mapping, model) if isinstance(mapping, dict) else GenericParser.from_file(mapping, model)
    return PARSERS[name](model=model)


__all__ = ["AGENTS", "PARSERS", "Agent", "AgentError", "LaunchContext", "get_agent", "make_parser"]
