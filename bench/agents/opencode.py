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

Sandboxed, every provider's requests go through the metering gateway (:mod:`bench.gateway.proxy`):
the provider's ``options.baseURL`` in the configuration is the gateway's port inside the sandbox
(``gateway_var``), the gateway forwards to the provider's API (``API_PATHS``: the path of each
vendor's base URL).
"""

from __future__ import annotations

import json
import os

from bench.agents.base import Agent, AgentError, LaunchContext, api_endpoints
from bench.agents.events import Event
from bench.agents.install import cli_binary, home_env
from bench.agents.parsing import Parser, count, error_text, result_event, tool_events, usage_event

DEFAULT_MODEL = "openrouter/moonshotai/kimi-k2.6"
CUSTOM = "bench"
# the API each provider prefix talks to (what its sandbox may reach); bench/ is OPENAI_BASE_URL
PROVIDER_URLS = {
    "openrouter": "https://openrouter.ai",
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com",
    "google": "https://generativelanguage.googleapis.com",
}
# the path of each built-in provider's base URL at its API (what OpenCode's SDK for it appends its
# routes to)
API_PATHS = {"openrouter": "/api/v1", "anthropic": "/v1", "openai": "/v1", "google": "/v1beta"}
GATEWAY_VAR = "OPENCODE_PROVIDER_BASE_URL"  # the key of base_urls for a built-in provider (no such variable is read)


def config(model: str, ctx: LaunchContext | None = None) -> dict:
    """The OpenCode configuration for one run (the value of OPENCODE_CONFIG_CONTENT).

    With a metering gateway in ``ctx``, the model's provider has its base URL.
    """
    cfg: dict = {
        "$schema": "https://opencode.ai/config.json",
        "model": model,
        "autoupdate": False,
        "share": "disabled",
        "permission": {"*": "allow"},
    }
    provider, _, name = model.partition("/")
    if provider == CUSTOM:
        base_url = ctx.base_url("OPENAI_BASE_URL") if ctx else os.environ.get("OPENAI_BASE_URL")
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
    elif ctx is not None and (gateway := ctx.base_urls.get(GATEWAY_VAR)):
        cfg["provider"] = {provider: {"options": {"baseURL": gateway}}}
    return cfg


class OpenCodeAgent(Agent):
    """OpenCode run once with ``run --format json``, its events read by :class:`OpenCodeParser`."""

    name = "opencode"
    option_names = ("bin",)  # --agent-option bin=/path/to/cli (else the pinned install)
    description = f"OpenCode CLI (run --format json); --model provider/model, default {DEFAULT_MODEL}"
    default_model = DEFAULT_MODEL
    own_hosts = ("registry.npmjs.org",)  # its provider plugins' registry, asked at start (measured, see codex.py)

    def passthrough(self, ctx: LaunchContext) -> tuple[str, ...]:
        """Its keys and settings: OpenRouter's key, OpenAI's and OpenCode's own variables."""
        return ("OPENROUTER_API_KEY", "OPENAI_*", "OPENCODE_*")

    def parser_name(self, ctx: LaunchContext) -> str | None:
        """OpenCode's JSON parser."""
        return self.name

    def endpoints(self, ctx: LaunchContext) -> tuple[str, ...]:
        """The ``bench/`` provider's base URL, else the built-in provider's own API."""
        provider = (ctx.model or DEFAULT_MODEL).partition("/")[0]
        if provider == CUSTOM:
            return api_endpoints(("OPENAI_BASE_URL",), None)
        return (PROVIDER_URLS[provider],) if provider in PROVIDER_URLS else ()

    def gateway_var(self, ctx: LaunchContext) -> str | None:
        """The variable that points OpenCode's provider at the gateway.

        For the ``bench/`` provider, OPENAI_BASE_URL; for a built-in provider, its ``baseURL``
        option (keyed ``GATEWAY_VAR``).
        """
        provider = (ctx.model or DEFAULT_MODEL).partition("/")[0]
        if provider == CUSTOM:
            return "OPENAI_BASE_URL"
        return GATEWAY_VAR if provider in PROVIDER_URLS else None

    def gateway_path(self, ctx: LaunchContext) -> str:
        """The path the gateway's upstream gets where the endpoint has none.

        The endpoint is then a built-in provider's vendor URL.
        """
        return API_PATHS.get((ctx.model or DEFAULT_MODEL).partition("/")[0], "")

    def check(self, options: dict[str, str], model: str | None) -> None:
        """Refuse, before anything is created, a model that cannot be configured.

        That is bench/NAME without OPENAI_BASE_URL.
        """
        config(model or DEFAULT_MODEL)

    def command(self, ctx: LaunchContext) -> list[str]:
        """``opencode run`` in the workspace with the model and the prompt."""
        model = ctx.model or DEFAULT_MODEL
        config(model)  # fail early on a model that cannot be configured
        binary = cli_binary(self.name, ctx.options)
        return [binary, "run", "--format", "json", "--dir", str(ctx.workspace), "-m", model, ctx.prompt]

    def env(self, ctx: LaunchContext) -> dict[str, str]:
        """A private HOME, the provider configuration, and none of OpenCode's start-up downloads."""
        env = home_env(ctx.home)
        env.update(
            {
                "OPENCODE_CONFIG_CONTENT": json.dumps(config(ctx.model or DEFAULT_MODEL, ctx)),
                "OPENCODE_DISABLE_AUTOUPDATE": "1",
                "OPENCODE_DISABLE_MODELS_FETCH": "1",
                "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
                "OPENCODE_DISABLE_SHARE": "1",
                "OPENCODE_DISABLE_CLAUDE_CODE": "1",  # do not read ~/.claude prompts and skills
                "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",  # they would be installed from npm at start-up
            }
        )
        return env


class OpenCodeParser(Parser):
    """``opencode run --format json``.

    A tool event printed once, when it ends; tokens and cost per step.
    """

    def on_json(self, o: dict) -> list[Event]:
        """One JSON event -> normalised events (tool uses, texts, step usage)."""
        t, part = o.get("type"), o.get("part") or {}
        if t == "tool_use":
            state = part.get("state") or {}
            files = (state.get("metadata") or {}).get("files") if part.get("tool") == "apply_patch" else None
            calls = [
                Event("tool_call", "write" if f.get("type") == "add" else "edit", f.get("filePath"))
                for f in files or []
            ]
            calls = calls or tool_events(part.get("tool"), state.get("input"), o)  # (apply_patch: absolute paths)
            err = state.get("status") == "error"
            return calls + [result_event(c, state.get("error") if err else state.get("output"), err, o) for c in calls]
        if t == "text":
            return self.message(part.get("text"), o)
        if t == "step_finish":  # its input excludes cache reads and writes, its output excludes reasoning
            tok = part.get("tokens") or {}
            cached, tout = count(tok.get("cache"), "read"), count(tok, "output", "reasoning")
            tin = count(tok, "input") + count(tok.get("cache"), "read", "write")
            cost = part.get("cost") if isinstance(part.get("cost"), int | float) else None
            cost = cost or self.cost(tin, tout, cached)  # 0 means "no price configured", not free
            return [usage_event("usage", tin, tout, cached, cost, o)]
        return self.message(error_text(o.get("error"), "error"), o, is_error=True) if t == "error" else []
