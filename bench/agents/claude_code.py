"""The ``claude-code`` agent: Anthropic's Claude Code CLI in print mode, its events as stream-json.

Runs ``claude -p PROMPT --output-format stream-json --verbose --dangerously-skip-permissions --model M``
(pinned 2.1.197, see install.py). The key and endpoint come from the environment, passed through:
``ANTHROPIC_API_KEY`` (or ``ANTHROPIC_AUTH_TOKEN``/``CLAUDE_CODE_OAUTH_TOKEN``) and, for a proxy or
gateway, ``ANTHROPIC_BASE_URL``. A login stored in the user's ``~/.claude`` is not seen: every run
has its own private HOME. Claude Code refuses ``--dangerously-skip-permissions`` as root unless
``IS_SANDBOX=1``; the harness is the sandbox (own workspace, watchdog, audit), so it is set for root.
"""

from __future__ import annotations

import os

from bench.agents.base import LaunchContext
from bench.agents.install import cli_binary, home_env

DEFAULT_MODEL = "claude-opus-4-7"


class ClaudeCodeAgent:
    name = "claude-code"
    description = f"Claude Code CLI (stream-json); --model, default {DEFAULT_MODEL}; ANTHROPIC_API_KEY"
    parser_name = "claude-code"

    def command(self, ctx: LaunchContext) -> list[str]:
        return [
            cli_binary(self.name, ctx.options),
            "-p",
            ctx.prompt,
            "--output-format",
            "stream-json",
            "--verbose",
            "--dangerously-skip-permissions",
            "--model",
            ctx.model or DEFAULT_MODEL,
        ]

    def env(self, ctx: LaunchContext) -> dict[str, str]:
        env = home_env(ctx.home)
        env.update(
            {
                "DISABLE_AUTOUPDATER": "1",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # no telemetry, error reports or update checks
                "DISABLE_TELEMETRY": "1",
            }
        )
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            env["IS_SANDBOX"] = "1"
        return env
