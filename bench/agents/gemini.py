"""The ``gemini`` agent: Google's Gemini CLI, headless, its events as stream-json.

Runs ``gemini -p PROMPT -o stream-json --yolo --skip-trust -m M`` (pinned 0.61.0); ``--yolo``
approves every tool call and ``--skip-trust`` skips the trusted-folder question, both of which
would otherwise stop a headless run. The key is ``GEMINI_API_KEY``; ``GOOGLE_GEMINI_BASE_URL``
(passed through) points it at another endpoint (a gateway, the test mock). A settings file in the
run's private home turns off telemetry, usage statistics and update checks, so that the CLI
talks to nothing but the model API.

Without a key, a Google login (``~/.gemini/oauth_creds.json``, written by ``gemini`` and its
``/auth``) is used: the file is given to the sandbox read-only at the same place in the private home
(:meth:`login_files`), the settings select ``oauth-personal``, and the CLI talks to Code Assist
(``cloudcode-pa.googleapis.com``) and refreshes its hour-long access token at
``oauth2.googleapis.com`` (where it also checks the cached token at the start: ``getTokenInfo``),
both through the sandbox's proxy: not through the metering gateway (``GOOGLE_GEMINI_BASE_URL`` does
not move a login; ``CODE_ASSIST_ENDPOINT`` would, but the refresh needs a second host, and the
gateway serves one), so such a run's tokens and cost are the CLI's own figures. The refreshed token
cannot be written back: the CLI's save fails in an event handler whose rejection its handler of
unhandled rejections logs before going on with the token in memory (read in its source; not tried
against Google); the user's refresh token stays valid (Google does not rotate it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from bench.agents import logins, pricing
from bench.agents.base import Agent, LaunchContext, api_endpoints
from bench.agents.events import Event
from bench.agents.install import cli_binary, home_env
from bench.agents.parsing import Parser, count, error_text, result_event, tool_events, usage_event

DEFAULT_MODEL = "gemini-2.5-pro"

SETTINGS = {
    "general": {"disableAutoUpdate": True, "disableUpdateNag": True, "enableAutoUpdate": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "security": {"auth": {"selectedType": "gemini-api-key"}},
}
LOGIN_HOSTS = (logins.CODE_ASSIST, "https://oauth2.googleapis.com")  # the model API, the token refresh


def _login(ctx: LaunchContext) -> logins.Credential | None:
    """The Google login this run uses (no GEMINI_API_KEY, no GOOGLE_GEMINI_BASE_URL), else None."""
    if os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_GEMINI_BASE_URL"):
        return None
    found, _ = logins.gemini_login(Path.home())  # a broken login was refused before the run
    return found[0] if found else None


class GeminiAgent(Agent):
    """Gemini CLI run once with ``-p``, its ``stream-json`` output read by :class:`GeminiParser`."""

    name = "gemini"
    option_names = ("bin",)  # --agent-option bin=/path/to/cli (else the pinned install)
    description = f"Gemini CLI (-o stream-json); --model, default {DEFAULT_MODEL}; GEMINI_API_KEY"
    default_model = DEFAULT_MODEL
    # a Google login's account e-mail, asked by the CLI at the start (its source:
    # fetchAndCacheUserInfo; a failure is only logged): refused by the sandbox, not held against the
    # run
    own_hosts = ("www.googleapis.com",)

    def passthrough(self, ctx: LaunchContext) -> tuple[str, ...]:
        """Its key and Google's variables."""
        return ("GEMINI_API_KEY", "GOOGLE_*")

    def parser_name(self, ctx: LaunchContext) -> str | None:
        """Gemini CLI's ``stream-json`` parser."""
        return self.name

    def endpoints(self, ctx: LaunchContext) -> tuple[str, ...]:
        """Google's login hosts for a Google login, else Gemini's API or the base URL set for it."""
        if _login(ctx) is not None:
            return LOGIN_HOSTS
        return api_endpoints(("GOOGLE_GEMINI_BASE_URL",), "https://generativelanguage.googleapis.com")

    def login_files(self, ctx: LaunchContext) -> tuple[tuple[Path, Path], ...]:
        """(the user's ``oauth_creds.json``, its place in the private home).

        It is bound read-only into this run's sandbox only; () when a key is used.
        """
        login = _login(ctx)
        return ((login.file, ctx.home / ".gemini" / "oauth_creds.json"),) if login is not None and login.file else ()

    def gateway_var(self, ctx: LaunchContext) -> str | None:
        """With an API key (or a base URL) the CLI talks to GOOGLE_GEMINI_BASE_URL.

        A Google login talks to Code Assist's own host, which no base URL replaces.
        """
        if os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_GEMINI_BASE_URL"):
            return "GOOGLE_GEMINI_BASE_URL"
        return None

    def command(self, ctx: LaunchContext) -> list[str]:
        """Gemini CLI with the prompt, streaming JSON, every tool allowed without asking."""
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
        """A private HOME whose settings pick the login or API key, with no updates or telemetry."""
        env = home_env(ctx.home)
        settings = ctx.home / ".gemini" / "settings.json"
        settings.parent.mkdir(parents=True, exist_ok=True)
        chosen = "oauth-personal" if _login(ctx) is not None else "gemini-api-key"
        settings.write_text(json.dumps({**SETTINGS, "security": {"auth": {"selectedType": chosen}}}, indent=2))
        if ctx.base_urls.get("GOOGLE_GEMINI_BASE_URL"):
            env["GOOGLE_GEMINI_BASE_URL"] = ctx.base_urls["GOOGLE_GEMINI_BASE_URL"]
        return env


class GeminiParser(Parser):
    """``gemini -o stream-json``.

    Assistant text comes in deltas (joined here); totals on ``result``; no cost.
    """

    def __init__(self, model: str | None = None):
        super().__init__(model)
        self._buf: list[str] = []

    def on_json(self, o: dict) -> list[Event]:
        """One ``stream-json`` event -> normalised events (messages, tool calls, usage)."""
        t = o.get("type")
        if t == "message" and o.get("role") == "assistant":
            self._buf.append(str(o.get("content") or ""))
            return [] if o.get("delta") else self.finish_text()
        out = self.finish_text()
        if t == "init":
            self.model = self.model or o.get("model")
        elif t == "tool_use":
            out += self._calls.setdefault(o.get("tool_id"), tool_events(o.get("tool_name"), o.get("parameters"), o))
        elif t == "tool_result":
            err = o.get("status") != "success"
            text = error_text(o.get("error")) if err else o.get("output")
            out += [result_event(c, text, err, o) for c in self._calls.pop(o.get("tool_id"), [None])]
        elif t == "error":  # severity "warning" (e.g. a loop detected) is not an error
            out += self.message(o.get("message") or "error", o, is_error=o.get("severity", "error") == "error")
        elif t == "result":
            s, err, self.done = o.get("stats") or {}, o.get("status") != "success", True
            ev = usage_event("final", count(s, "input_tokens"), count(s, "output_tokens"), count(s, "cached"), None, o)
            ev.is_error, ev.text = err, error_text(o.get("error"), "error") if err else self.last_text
            ev.cost_usd = self._cost(s)
            out.append(ev)
        return out

    def _cost(self, s: dict) -> float | None:
        """Per model where the stats name a known one, else at the run's model.

        The CLI may route to several.
        """
        total = 0.0
        for name, m in [(n, m) for n, m in (s.get("models") or {}).items() if isinstance(m, dict)] or [(None, s)]:
            counts = (count(m, "input_tokens"), count(m, "output_tokens"), count(m, "cached"))
            c = pricing.cost(name, *counts)
            if (c := self.cost(*counts) if c is None else c) is None:
                return None
            total += c
        return round(total, 6)

    def finish_text(self) -> list[Event]:
        """The assistant text gathered so far, as one message event."""
        text, self._buf = "".join(self._buf), []
        return self.message(text)
