"""The stream parsers by name: one per coding-agent CLI, each defined in its agent's module.

``make_parser`` builds the parser of a run, with the model so that runs whose CLI reports no cost are
priced (:mod:`bench.agents.pricing`). The shared base and helpers are in :mod:`bench.agents.parsing`.
"""

from __future__ import annotations

from pathlib import Path

from bench.agents.aider import AiderParser
from bench.agents.claude_code import ClaudeCodeParser
from bench.agents.codex import CodexParser
from bench.agents.gemini import GeminiParser
from bench.agents.generic import GenericParser
from bench.agents.opencode import OpenCodeParser
from bench.agents.parsing import Parser, tool_events, tool_kind, unwrap_shell

PARSERS: dict[str, type[Parser]] = {
    "claude-code": ClaudeCodeParser,
    "codex": CodexParser,
    "opencode": OpenCodeParser,
    "gemini": GeminiParser,
    "aider": AiderParser,
    "generic": GenericParser,
}


def make_parser(name: str, model: str | None = None, mapping: dict | str | Path | None = None) -> Parser:
    """The parser of a run: the model prices runs whose CLI reports no cost; mapping (a dict or a .toml/.json
    file) configures the generic parser."""
    if name == "generic" and mapping is not None:
        return GenericParser(mapping, model) if isinstance(mapping, dict) else GenericParser.from_file(mapping, model)
    return PARSERS[name](model=model)


__all__ = [
    "PARSERS",
    "AiderParser",
    "ClaudeCodeParser",
    "CodexParser",
    "GeminiParser",
    "GenericParser",
    "OpenCodeParser",
    "Parser",
    "make_parser",
    "tool_events",
    "tool_kind",
    "unwrap_shell",
]
