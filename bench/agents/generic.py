"""The ``generic`` agent: any CLI described by a small TOML file, without writing an adapter.

``bench run --agent generic --agent-option config=mycli.toml``; the file::

    # the command: a list of arguments, or one string, split like a shell
    command = ["mycli", "run", "--json", "--model", "{model}", "{prompt}"]
    model = "my-default-model"   # when --model is not given
    parser = "claude-code"       # a parser of bench.agents.PARSERS for its stdout (omit: plain log)
    private_home = true          # HOME and XDG dirs in the run's private home (the default)

    passthrough = ["MYCLI_*"]    # harness variables it may get (default: ANTHROPIC_* and OPENAI_*)
    endpoints = ["{env:OPENAI_BASE_URL}"]  # what its sandbox may reach (default: the URLs below)

    [env]
    MYCLI_BASE_URL = "{env:OPENAI_BASE_URL}"

Placeholders, in the command and in env values: ``{prompt}``, ``{model}``, ``{workspace}``,
``{home}``, ``{budget_s}``, ``{env:NAME}`` (the harness's variable, empty if unset) and
``{bin:NAME}`` (a pinned CLI from install.py, installed on first use, e.g. ``{bin:codex}``).
Only these are replaced, so JSON or braces elsewhere in a command stay as they are.

Without ``endpoints``, the sandbox may reach the URL values of ``[env]`` and the harness's
``OPENAI_BASE_URL``/``ANTHROPIC_BASE_URL``; when there are none, the OpenAI and Anthropic APIs.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

from bench.agents.base import Agent, AgentError, LaunchContext, api_endpoints
from bench.agents.events import Event
from bench.agents.install import ensure_cli, home_env
from bench.agents.parsing import Parser, error_text, result_event, tool_kind, unwrap_shell, usage_event

PLACEHOLDER = re.compile(r"\{(prompt|model|workspace|home|budget_s|env:[A-Za-z_]\w*|bin:[a-z][\w-]*)\}")


def load(ctx: LaunchContext) -> dict:
    """The run's agent description (see :func:`load_config`)."""
    return load_config(ctx.options)


def load_config(options: dict[str, str]) -> dict:
    """The agent's TOML description named by ``--agent-option config=PATH``.

    An AgentError says what is wrong with it.
    """
    path = options.get("config")
    if not path:
        raise AgentError(
            "the generic agent needs a TOML file: --agent-option config=PATH (see bench/agents/generic.py)"
        )
    try:
        cfg = tomllib.loads(Path(path).expanduser().read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise AgentError(f"cannot read the generic agent's config {path}: {e}") from None
    if not cfg.get("command"):
        raise AgentError(f"{path}: 'command' is missing (a list of arguments, or one string)")
    return cfg


def expand(text: str, ctx: LaunchContext, model: str) -> str:
    """``text`` with its ``{...}`` placeholders filled (prompt, model, paths, env:, bin:, ...)."""

    def value(m: re.Match) -> str:
        key = m.group(1)
        if key.startswith("env:"):
            return os.environ.get(key[4:], "")
        if key.startswith("bin:"):
            return str(ensure_cli(key[4:]))
        return {
            "prompt": ctx.prompt,
            "model": model,
            "workspace": str(ctx.workspace),
            "home": str(ctx.home),
            "budget_s": f"{ctx.budget_s:g}",
        }[key]

    return PLACEHOLDER.sub(value, text)


class GenericAgent(Agent):
    """Any CLI, described in a TOML file: its command, model, parser and environment."""

    name = "generic"
    description = "any CLI from a TOML description: --agent-option config=FILE (command, model, parser, env)"
    option_names = ("config",)

    def check(self, options: dict[str, str], model: str | None) -> None:
        """Before anything is created: the config file exists, is TOML and has a command."""
        load_config(options)

    def passthrough(self, ctx: LaunchContext) -> tuple[str, ...]:
        """The config's ``passthrough``, else the OpenAI and Anthropic variables."""
        names = load(ctx).get("passthrough")
        return tuple(str(n) for n in names) if isinstance(names, list) else ("ANTHROPIC_*", "OPENAI_*")

    def endpoints(self, ctx: LaunchContext) -> tuple[str, ...]:
        """The description's ``endpoints``, else the URLs its environment settings name."""
        cfg = load(ctx)
        model = ctx.model or cfg.get("model", "")
        if isinstance(cfg.get("endpoints"), list):
            return tuple(u for u in (expand(str(e), ctx, model) for e in cfg["endpoints"]) if u)
        urls = [expand(str(v), ctx, model) for v in (cfg.get("env") or {}).values()]
        urls = [u for u in urls if u.startswith(("http://", "https://"))]
        variables = ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")
        found = tuple(dict.fromkeys([*urls, *api_endpoints(variables, None)]))
        return found or ("https://api.openai.com", "https://api.anthropic.com")

    def parser_name(self, ctx: LaunchContext) -> str | None:
        """The description's ``parser``, or None (its output is logged as it is)."""
        return load(ctx).get("parser") or None

    def command(self, ctx: LaunchContext) -> list[str]:
        """The description's command, placeholders filled."""
        cfg = load(ctx)
        model = ctx.model or cfg.get("model", "")
        cmd = cfg["command"]
        argv = shlex.split(cmd) if isinstance(cmd, str) else [str(a) for a in cmd]
        return [expand(a, ctx, model) for a in argv]

    def env(self, ctx: LaunchContext) -> dict[str, str]:
        """A private HOME (unless ``private_home = false``) and the description's variables."""
        cfg = load(ctx)
        model = ctx.model or cfg.get("model", "")
        env = home_env(ctx.home) if cfg.get("private_home", True) else {}
        env.update({k: expand(str(v), ctx, model) for k, v in (cfg.get("env") or {}).items()})
        return env


# Generic: each field is a dotted path ("usage.input_tokens", "content.0.text") or alternatives
# "a|b".
GENERIC_DEFAULTS: dict[str, Any] = {
    "type": "type|event",
    "kinds": {"tool_call": "tool_use|tool_call", "tool_result": "tool_result", "message": "message|text"}
    | {"usage": "usage", "final": "result|final"},  # Event kind <- the type values that mean it
    "tool": "tool|tool_name|name",
    "command": "command|input.command|args.command|parameters.command",
    "path": "path|file_path|input.file_path|input.path|args.path|parameters.file_path",
    "text": "text|content|message",
    "tokens_input": "usage.input_tokens|tokens_input",
    "tokens_output": "usage.output_tokens|tokens_output",
    "tokens_cached": "usage.cached_input_tokens|tokens_cached",
    "cost": "cost_usd|total_cost_usd|cost",
    "error": "error.message|error",
    "tools": {},  # extra tool names -> shell/write/edit/read/other
}


def get_path(obj: Any, path: str | list[str] | None) -> Any:
    """The value at ``path`` in ``obj``, a JSONPath-like lookup.

    "a.b.0.c" (a leading "$." is allowed); "a|b" or a list: the first found.
    """
    for p in path.split("|") if isinstance(path, str) else path or []:
        cur = obj
        for key in p.removeprefix("$.").split("."):
            if isinstance(cur, list) and key.isdigit() and int(key) < len(cur):
                cur = cur[int(key)]
            else:
                cur = cur.get(key) if isinstance(cur, dict) else None
        if cur is not None:
            return cur
    return None


class GenericParser(Parser):
    """JSON lines of a CLI without a parser of its own, read through a mapping.

    The mapping's keys are those of GENERIC_DEFAULTS. A final event's tokens and cost are run
    totals; a tool_result belongs to the last tool_call.
    """

    def __init__(self, mapping: dict | None = None, model: str | None = None):
        super().__init__(model)
        self.mapping = m = {**GENERIC_DEFAULTS, **(mapping or {})}
        self._kind = {v: k for k, vs in m["kinds"].items() for v in (vs.split("|") if isinstance(vs, str) else vs)}

    @classmethod
    def from_file(cls, path: str | Path, model: str | None = None) -> GenericParser:
        """The mapping from a .json or .toml file (an agent's config).

        The mapping is at its top level or in a "parser" table.
        """
        import tomllib

        text = Path(path).read_text(encoding="utf-8")
        data = json.loads(text) if str(path).endswith(".json") else tomllib.loads(text)
        return cls(next((data[k] for k in ("parser_mapping", "parser") if isinstance(data.get(k), dict)), data), model)

    def on_json(self, o: dict) -> list[Event]:
        """One JSON event -> normalised events, through the mapping."""
        m, kind = self.mapping, self._kind.get(str(get_path(o, self.mapping["type"])))
        error = error_text(get_path(o, m["error"])) if get_path(o, m["error"]) not in (None, False) else None
        if kind == "tool_call":
            name = get_path(o, m["tool"])
            tool = m["tools"].get(name) or tool_kind(name)
            target = name if tool == "other" else get_path(o, m["command" if tool == "shell" else "path"])
            target = unwrap_shell(target) if tool == "shell" and target is not None else target
            self._calls["last"] = [Event("tool_call", tool, target, raw=o)]
            return self._calls["last"]
        text = get_path(o, m["text"]) if isinstance(get_path(o, m["text"]), str) else None
        if kind == "tool_result":
            return [result_event(self._calls.pop("last", [None])[0], text, bool(error), o)]
        if kind in (None, "message"):
            return self.message(error, o, is_error=True) if error else self.message(text, o) if kind else []
        tin, tout, cached = (int(get_path(o, m[k]) or 0) for k in ("tokens_input", "tokens_output", "tokens_cached"))
        cost = get_path(o, m["cost"])
        ev = usage_event(kind, tin, tout, cached, float(cost) if isinstance(cost, int | float) else None, o)
        ev.cost_usd = ev.cost_usd if ev.cost_usd is not None else self.cost(tin, tout, cached)
        ev.text, ev.is_error = error or text or (self.last_text if kind == "final" else None), bool(error)
        self.done = self.done or kind == "final"
        return [ev]
