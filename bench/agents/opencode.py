"""The ``opencode`` agent: OpenCode's ``run`` command with JSON events (``--format json``).

Runs ``opencode run --format json --dir WS -m PROVIDER/MODEL PROMPT`` (pinned 1.18.33), configured
entirely through ``OPENCODE_CONFIG_CONTENT`` (no file in the workspace or the user's home): every
tool allowed (the harness is the sandbox), no sharing, no auto-update, no LSP downloads, and the
model list bundled with the pinned version instead of a live fetch, so that a run is reproducible
and needs no network beyond the model API.

Models are ``provider/model``. The paper's runs went through OpenRouter, e.g. the default
``openrouter/moonshotai/kimi-k2.6`` with ``OPENROUTER_API_KEY``. ``bench/NAME`` is any
OpenAI-compatible Chat Completions endpoint: base URL from ``OPENAI_BASE_URL`` (with ``/v1``),
key from ``OPENAI_API_KEY``; that is how the tests point OpenCode at the mock.
"""

from __future__ import annotations

import json
import os

from bench.agents.base import AgentError, LaunchContext
from bench.agents.install import cli_binary, home_env

DEFAULT_MODEL = "openrouter/moonshotai/kimi-k2.6"
CUSTOM = "bench"


def config(model: str) -> dict:
    """The OpenCode configuration for one run (the value of OPENCODE_CONFIG_CONTENT)."""
    cfg: dict = {
        "$schema": "https://opencode.ai/config.json",
        "model": model,
        "autoupdate": False,
        "share": "disabled",
        "permission": {"*": "allow"},
    }
    provider, _, name = model.partition("/")
    if provider == CUSTOM:
        base_url = os.environ.get("OPENAI_BASE_URL")
        if not base_url:
            raise AgentError(f"model {model!r} needs OPENAI_BASE_URL (an OpenAI-compatible endpoint, with /v1)")
        cfg["provider"] = {
            CUSTOM: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "bench (OPENAI_BASE_URL)",
                "options": {"baseURL": base_url, "apiKey": "{env:OPENAI_API_KEY}"},
                "models": {name: {"name": name, "tool_call": True, "limit": {"context": 200000, "output": 32000}}},
            }
        }
    return cfg


class OpenCodeAgent:
    name = "opencode"
    description = f"OpenCode CLI (run --format json); --model provider/model, default {DEFAULT_MODEL}"
    parser_name = "opencode"

    def command(self, ctx: LaunchContext) -> list[str]:
        model = ctx.model or DEFAULT_MODEL
        config(model)  # fail early on a model that cannot be configured
        binary = cli_binary(self.name, ctx.options)
        return [binary, "run", "--format", "json", "--dir", str(ctx.workspace), "-m", model, ctx.prompt]

    def env(self, ctx: LaunchContext) -> dict[str, str]:
        env = home_env(ctx.home)
        env.update(
            {
                "OPENCODE_CONFIG_CONTENT": json.dumps(config(ctx.model or DEFAULT_MODEL)),
                "OPENCODE_DISABLE_AUTOUPDATE": "1",
                "OPENCODE_DISABLE_MODELS_FETCH": "1",
                "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
                "OPENCODE_DISABLE_SHARE": "1",
                "OPENCODE_DISABLE_CLAUDE_CODE": "1",  # do not read ~/.claude prompts and skills
                "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",  # they would be installed from npm at start-up
            }
        )
        return env
