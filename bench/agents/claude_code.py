"""The ``claude-code`` agent: Anthropic's Claude Code CLI in print mode, its events as stream-json.

Runs ``claude -p PROMPT --output-format stream-json --verbose --dangerously-skip-permissions --model
M`` (pinned 2.1.197, see install.py). The key and endpoint come from the environment, passed
through: ``ANTHROPIC_API_KEY`` (or ``ANTHROPIC_AUTH_TOKEN``/``CLAUDE_CODE_OAUTH_TOKEN``) and, for a
proxy or gateway, ``ANTHROPIC_BASE_URL``, which is also the one place its sandbox may reach (else
api.anthropic.com). A login stored in the user's ``~/.claude`` is not seen: every run has its own
private HOME. Claude Code refuses ``--dangerously-skip-permissions`` as root unless
``IS_SANDBOX=1``; the harness is the sandbox (bench.sandbox, watchdog, audit), so it is set for
root.
"""

from __future__ import annotations

import os
from typing import Any

from bench.agents.base import Agent, LaunchContext, api_endpoints
from bench.agents.events import Event
from bench.agents.install import cli_binary, home_env
from bench.agents.parsing import Parser, count, result_event, tool_events, usage_event

DEFAULT_MODEL = "claude-opus-4-7"


class ClaudeCodeAgent(Agent):
    """Claude Code run once with ``-p``; :class:`ClaudeCodeParser` reads its ``stream-json``."""

    name = "claude-code"
    option_names = ("bin",)  # --agent-option bin=/path/to/cli (else the pinned install)
    description = f"Claude Code CLI (stream-json); --model, default {DEFAULT_MODEL}; ANTHROPIC_API_KEY"
    default_model = DEFAULT_MODEL

    def passthrough(self, ctx: LaunchContext) -> tuple[str, ...]:
        """Its keys and settings: Anthropic's and Claude Code's own variables."""
        return ("ANTHROPIC_*", "CLAUDE_CODE_*")

    def parser_name(self, ctx: LaunchContext) -> str | None:
        """Claude Code's ``stream-json`` parser."""
        return self.name

    def endpoints(self, ctx: LaunchContext) -> tuple[str, ...]:
        """Anthropic's API, or the base URL set for it."""
        return api_endpoints(("ANTHROPIC_BASE_URL",), "https://api.anthropic.com")

    def gateway_var(self, ctx: LaunchContext) -> str | None:
        """``ANTHROPIC_BASE_URL``, where API keys and the OAuth token alike are sent."""
        return "ANTHROPIC_BASE_URL"  # API keys and the OAuth token alike are sent to the base URL

    def command(self, ctx: LaunchContext) -> list[str]:
        """Claude Code in print mode with the prompt, streaming JSON."""
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
        """A private HOME, and no auto-update, telemetry, error reports or update checks."""
        env = home_env(ctx.home)
        env.update(
            {
                "DISABLE_AUTOUPDATER": "1",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # no telemetry, error reports or update checks
                "DISABLE_TELEMETRY": "1",
            }
        )
        if ctx.base_urls.get("ANTHROPIC_BASE_URL"):
            env["ANTHROPIC_BASE_URL"] = ctx.base_urls["ANTHROPIC_BASE_URL"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            env["IS_SANDBOX"] = "1"
        return env


class ClaudeCodeParser(Parser):
    """``claude -p --output-format stream-json --verbose``.

    Run totals and cost on the final ``result`` event.
    """

    def on_json(self, o: dict) -> list[Event]:
        """One ``stream-json`` event -> normalised events (messages, tool calls, usage, retries)."""
        t, msg, out = o.get("type"), o.get("message") or {}, []
        if t == "system" and o.get("subtype") == "init":
            self.model = self.model or o.get("model")
        elif t == "system" and o.get("subtype") == "api_retry":  # the CLI retries a failed API call (10 times)
            status = o.get("error_status")
            what = f"API error {status}" if status else "API request got no HTTP answer (connection error)"
            out += self.message(f"{what} ({o.get('error')}), retry {o.get('attempt')}/{o.get('max_retries')}", o, True)
        elif t == "assistant":  # one event per content block; the usage is repeated on each
            for b in msg.get("content") or []:
                if b.get("type") == "tool_use":
                    out += self._calls.setdefault(b.get("id"), tool_events(b.get("name"), b.get("input"), o))
                elif b.get("type") == "text":
                    out += self.message(b.get("text"), o, is_error=bool(o.get("error")))
            if msg.get("usage") and (msg.get("id") is None or msg.get("id") not in self._seen):
                self._seen.add(msg.get("id"))  # per API call; its output_tokens are provisional
                out.append(self._tokens("usage", msg["usage"], None, o))
        elif t == "user" and isinstance(msg.get("content"), list):
            for b in msg["content"]:
                if b.get("type") == "tool_result":
                    calls = self._calls.pop(b.get("tool_use_id"), [None])
                    out += [result_event(c, b.get("content"), bool(b.get("is_error")), o) for c in calls]
        elif t == "result":  # an API error says subtype "success" with is_error true
            ev, self.done = self._tokens("final", o.get("usage"), o.get("total_cost_usd"), o), True
            ev.is_error = bool(o.get("is_error")) or o.get("subtype", "success") != "success"
            ev.text = o.get("result") or "; ".join(map(str, o.get("errors") or [])) or o.get("subtype")
            out.append(ev)
        return out

    def _tokens(self, kind: str, u: Any, cost: Any, raw: dict) -> Event:
        cached, tout = count(u, "cache_read_input_tokens"), count(u, "output_tokens")
        tin = count(u, "input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        cost = float(cost) if isinstance(cost, int | float) else self.cost(tin, tout, cached)
        return usage_event(kind, tin, tout, cached, cost, raw)
