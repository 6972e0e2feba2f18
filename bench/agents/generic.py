"""The ``generic`` agent: any CLI described by a small TOML file, without writing an adapter.

``bench run --agent generic --agent-option config=mycli.toml``; the file::

    command = ["mycli", "run", "--json", "--model", "{model}", "{prompt}"]  # or one string, split like a shell
    model = "my-default-model"   # when --model is not given
    parser = "claude-code"       # a stream parser of bench.agents.events for its stdout (omit: plain log)
    private_home = true          # HOME and XDG dirs in the run's private home (the default)

    [env]
    MYCLI_BASE_URL = "{env:OPENAI_BASE_URL}"

Placeholders, in the command and in env values: ``{prompt}``, ``{model}``, ``{workspace}``,
``{home}``, ``{budget_s}``, ``{env:NAME}`` (the harness's variable, empty if unset) and
``{bin:NAME}`` (a pinned CLI from install.py, installed on first use, e.g. ``{bin:codex}``).
Only these are replaced, so JSON or braces elsewhere in a command stay as they are.
"""

from __future__ import annotations

import os
import re
import shlex
import tomllib
from pathlib import Path

from bench.agents.base import AgentError, LaunchContext
from bench.agents.install import ensure_cli, home_env

PLACEHOLDER = re.compile(r"\{(prompt|model|workspace|home|budget_s|env:[A-Za-z_]\w*|bin:[a-z][\w-]*)\}")


def load(ctx: LaunchContext) -> dict:
    path = ctx.options.get("config")
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


class GenericAgent:
    name = "generic"
    description = "any CLI from a TOML description: --agent-option config=FILE (command, model, parser, env)"
    parser_name: str | None = None  # set from the config by command(); parser_for(ctx) is the pure form

    def parser_for(self, ctx: LaunchContext) -> str | None:
        return load(ctx).get("parser") or None

    def command(self, ctx: LaunchContext) -> list[str]:
        cfg = load(ctx)
        self.parser_name = cfg.get("parser") or None
        model = ctx.model or cfg.get("model", "")
        cmd = cfg["command"]
        argv = shlex.split(cmd) if isinstance(cmd, str) else [str(a) for a in cmd]
        return [expand(a, ctx, model) for a in argv]

    def env(self, ctx: LaunchContext) -> dict[str, str]:
        cfg = load(ctx)
        model = ctx.model or cfg.get("model", "")
        env = home_env(ctx.home) if cfg.get("private_home", True) else {}
        env.update({k: expand(str(v), ctx, model) for k, v in (cfg.get("env") or {}).items()})
        return env
