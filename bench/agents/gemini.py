"""The ``gemini`` agent: Google's Gemini CLI, headless, its events as stream-json.

Runs ``gemini -p PROMPT -o stream-json --yolo --skip-trust -m M`` (pinned 0.61.0); ``--yolo``
approves every tool call and ``--skip-trust`` skips the trusted-folder question, both of which
would otherwise stop a headless run. The key is ``GEMINI_API_KEY``; ``GOOGLE_GEMINI_BASE_URL``
(passed through) points it at another endpoint (a gateway, the test mock). A settings file in the
run's private home turns off telemetry, usage statistics and update checks, so that the CLI
talks to nothing but the model API.
"""

from __future__ import annotations

import json

from bench.agents.base import LaunchContext
from bench.agents.install import cli_binary, home_env

DEFAULT_MODEL = "gemini-2.5-pro"

SETTINGS = {
    "general": {"disableAutoUpdate": True, "disableUpdateNag": True, "enableAutoUpdate": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "security": {"auth": {"selectedType": "gemini-api-key"}},
}


class GeminiAgent:
    name = "gemini"
    description = f"Gemini CLI (-o stream-json); --model, default {DEFAULT_MODEL}; GEMINI_API_KEY"
    parser_name = "gemini"

    def command(self, ctx: LaunchContext) -> list[str]:
        binary = cli_binary(self.name, ctx.options)
        return [
            binary,
            "-p",
            ctx.prompt,
            "-o",
            "stream-json",
            "--yolo",
            "--skip-trust",
            "-m",
            ctx.model or DEFAULT_MODEL,
        ]

    def env(self, ctx: LaunchContext) -> dict[str, str]:
        env = home_env(ctx.home)
        settings = ctx.home / ".gemini" / "settings.json"
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text(json.dumps(SETTINGS, indent=2))
        return env
