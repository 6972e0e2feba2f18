"""The ``codex`` agent: OpenAI's Codex CLI, non-interactive (``codex exec --json``), JSONL events.

Runs ``codex exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox -C WS -m M
PROMPT`` (pinned 0.169.0). The key is ``OPENAI_API_KEY``. With ``OPENAI_BASE_URL`` set (a proxy, a
gateway, the test mock; include the ``/v1``), a custom provider ``bench`` speaks the Responses API
there, configured with ``-c model_providers.bench={...}`` so that nothing is written to a config
file. Without it, the built-in OpenAI provider is used, given the key as ``CODEX_API_KEY``.

Without a key, a login stored by ``codex login`` (``auth.json``: a ChatGPT login, or a stored API
key) is used: the file is given to the sandbox read-only at ``$CODEX_HOME/auth.json`` of the private
home (:meth:`login_files`), and the ``bench`` provider is declared with
``requires_openai_auth=true`` so that Codex reads it. A ChatGPT login's model requests go to
``https://chatgpt.com/backend-api/codex`` (codex-rs ``to_api_provider``), and ``OPENAI_BASE_URL``
does not move them (tried with 0.169.0: the variable is ignored under a ChatGPT login); a provider
``base_url`` does, and ``chatgpt_base_url`` moves the rest of the backend (account checks, model
list, plugins), so the whole login goes through the metering gateway. A token refresh inside the run
cannot be saved (the file is read-only) and cannot reach ``auth.openai.com`` (not an endpoint of the
sandbox): a refresh there would rotate the user's refresh token and lose the new one, logging the
user out. The check before the run refuses an expired login.

Settings that matter for the benchmark, all through ``-c``:
- ``allow_login_shell=false``: Codex's shell tool runs a login shell by default, and a login shell
  rebuilds PATH from /etc/profile, losing the harness's Python (and its traced ``python``).
- ``shell_environment_policy.ignore_default_excludes=true``: by default Codex drops every variable
  whose name holds KEY/SECRET/TOKEN from the commands it runs, ``BENCH_RUN_TOKEN`` included, which
  the watchdog uses to find detached scripts; API keys are excluded explicitly instead.
- Codex retries a refused connection forever: only the harness's wall-clock watchdog ends it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from bench.agents import logins
from bench.agents.base import Agent, LaunchContext, api_endpoints
from bench.agents.events import Event
from bench.agents.install import cli_binary, home_env
from bench.agents.parsing import Parser, count, error_text, result_event, tool_events, usage_event

DEFAULT_MODEL = "gpt-5.5"
PROVIDER = "bench"


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


# under a ChatGPT login: the login read from the file; no analytics events; no ChatGPT plugins and
# apps (connectors served by the backend's MCP endpoint: tools that would act outside the sandbox);
# each accepted by 0.169.0 and seen to remove those requests (analytics-events, ps/plugins, ps/mcp)
# against a recording server
LOGIN_CONFIG = ['cli_auth_credentials_store="file"', "analytics.enabled=false", "features.plugins=false"]
LOGIN_CONFIG += ["features.apps=false"]


def _login(ctx: LaunchContext) -> logins.Credential | None:
    """The stored login this run uses (no key in the environment, no OPENAI_BASE_URL), else None."""
    if any(os.environ.get(v) for v in ("OPENAI_API_KEY", "CODEX_API_KEY", "OPENAI_BASE_URL")):
        return None
    found, _ = logins.codex_login(os.environ, Path.home())  # a broken login was refused before the run
    return found[0] if found else None


class CodexAgent(Agent):
    """OpenAI's Codex CLI run once with ``exec --json``, its events read by :class:`CodexParser`."""

    name = "codex"
    option_names = ("bin",)  # --agent-option bin=/path/to/cli (else the pinned install)
    description = f"OpenAI Codex CLI (exec --json); --model, default {DEFAULT_MODEL}; OPENAI_API_KEY [OPENAI_BASE_URL]"
    default_model = DEFAULT_MODEL
    # hosts the CLI asks by itself (update check, feature flags), refused by the sandbox and not
    # held against the run by the audit: measured in the mock-model runs of
    # tests/bench/agents/test_clis.py
    own_hosts = ("chatgpt.com", "ab.chatgpt.com", "api.github.com", "github.com")

    def passthrough(self, ctx: LaunchContext) -> tuple[str, ...]:
        """Its keys and settings: OpenAI's and Codex's own variables."""
        return ("OPENAI_*", "CODEX_*")

    def parser_name(self, ctx: LaunchContext) -> str | None:
        """Codex's ``exec --json`` parser."""
        return self.name

    def endpoints(self, ctx: LaunchContext) -> tuple[str, ...]:
        """ChatGPT's backend for a ChatGPT login, else OpenAI's API or the base URL set for it."""
        login = _login(ctx)
        if login is not None and login.login:
            return (logins.CHATGPT_BACKEND,)
        return api_endpoints(("OPENAI_BASE_URL",), "https://api.openai.com")

    def gateway_path(self, ctx: LaunchContext) -> str:
        """``/v1``, the path of the built-in provider's ``https://api.openai.com/v1``."""
        return "/v1"  # the built-in provider's https://api.openai.com/v1

    def gateway_var(self, ctx: LaunchContext) -> str | None:
        """The ``bench`` provider's base URL points Codex at the gateway.

        With a key, a base URL, or a stored login (a ChatGPT login's backend is moved by the
        provider's ``base_url`` and ``chatgpt_base_url``).
        """
        if _login(ctx) or any(os.environ.get(v) for v in ("OPENAI_API_KEY", "CODEX_API_KEY", "OPENAI_BASE_URL")):
            return "OPENAI_BASE_URL"
        return None

    def login_files(self, ctx: LaunchContext) -> tuple[tuple[Path, Path], ...]:
        """(the user's ``auth.json``, where Codex reads it in the private home).

        It is bound read-only into this run's sandbox only; () when a key is used.
        """
        login = _login(ctx)
        return ((login.file, ctx.home / ".codex" / "auth.json"),) if login is not None and login.file else ()

    def command(self, ctx: LaunchContext) -> list[str]:
        """``codex exec --json`` with the prompt, its sandbox bypassed, the gateway as provider."""
        config = [
            "allow_login_shell=false",
            "check_for_update_on_startup=false",
            "shell_environment_policy.ignore_default_excludes=true",
            'shell_environment_policy.exclude=["*_API_KEY", "*_AUTH_TOKEN"]',
        ]
        base_url = ctx.base_url("OPENAI_BASE_URL")
        login = _login(ctx)
        if login is not None and base_url:  # the stored login, read by Codex from auth.json, sent to the gateway
            provider = (
                f'{{name={_toml(PROVIDER)}, base_url={_toml(base_url)}, wire_api="responses", '
                "requires_openai_auth=true}"
            )
            config += [f"model_provider={_toml(PROVIDER)}", f"model_providers.{PROVIDER}={provider}"]
            if login.login:  # the backend's other calls (account, model list) through the gateway as well
                root = base_url.split("/backend-api", 1)[0]
                config.append(f"chatgpt_base_url={_toml(root + '/backend-api/')}")
                config += LOGIN_CONFIG
        elif base_url:
            key = "OPENAI_API_KEY" if os.environ.get("OPENAI_API_KEY") or not os.environ.get("CODEX_API_KEY") else ""
            provider = (
                f'{{name={_toml(PROVIDER)}, base_url={_toml(base_url)}, wire_api="responses", '
                f'env_key="{key or "CODEX_API_KEY"}"}}'
            )
            config += [f"model_provider={_toml(PROVIDER)}", f"model_providers.{PROVIDER}={provider}"]
        argv = [
            cli_binary(self.name, ctx.options),
            "exec",
            "--json",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            "-C",
            str(ctx.workspace),
            "-m",
            ctx.model or DEFAULT_MODEL,
        ]
        for c in config:
            argv += ["-c", c]
        return [*argv, ctx.prompt]

    def env(self, ctx: LaunchContext) -> dict[str, str]:
        """A private HOME and CODEX_HOME; OPENAI_API_KEY as CODEX_API_KEY when that is unset."""
        env = home_env(ctx.home)
        codex_home = ctx.home / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        env["CODEX_HOME"] = str(codex_home)
        if os.environ.get("OPENAI_API_KEY") and not os.environ.get("CODEX_API_KEY"):
            env["CODEX_API_KEY"] = os.environ["OPENAI_API_KEY"]
        return env


# what codex exec prints beside its JSON events that says nothing to the person watching (kept in
# agent.log): the note that it reads stdin (always, as its stdin is not a terminal), and its own
# tracing log lines ("2026-11-26T23:14:45.338151Z ERROR codex_core::session: failed to record
# rollout items: ..."); an error of the model API comes as a JSON event (error, turn.failed) and is
# shown from there. Seen in real 0.169.0 runs.
CONSOLE_NOISE = re.compile(
    r"Reading (additional )?(input|prompt) from stdin\.*"
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z\s+(ERROR|WARN|INFO|DEBUG|TRACE)\s+\S+:.*"
)


class CodexParser(Parser):
    """``codex exec --json``.

    Items started and completed; usage on ``turn.completed``; no cost, no model name.
    """

    def shown(self, line: str) -> bool:
        """Every plain line but :data:`CONSOLE_NOISE`."""
        return not CONSOLE_NOISE.fullmatch(line.strip())

    def on_json(self, o: dict) -> list[Event]:
        """One ``exec --json`` event -> normalised events (items as tool calls, messages, usage)."""
        t, item = o.get("type"), o.get("item") or {}
        it, iid = item.get("type"), item.get("id")
        if t in ("item.started", "item.updated", "item.completed") and it in self._KINDS:
            out = [] if iid in self._calls else self._calls.setdefault(iid, self._item_calls(item, o))
            if t == "item.completed":  # some items come only completed
                err = item.get("status") in ("failed", "declined") or item.get("exit_code") not in (None, 0)
                text = item.get("aggregated_output") or error_text(item.get("error"))
                out = out + [result_event(c, text, err, o) for c in self._calls.pop(iid)]
            return out
        if t == "item.completed" and it in ("agent_message", "error"):
            return self.message(item.get("text") or item.get("message"), o, is_error=it == "error")
        if t == "error":  # also "Reconnecting... n/5" while the API is unreachable
            return self.message(o.get("message") or "error", o, is_error=True)
        if t == "turn.failed":
            self.done = True
            return [Event("final", text=error_text(o.get("error"), "turn failed"), is_error=True, raw=o)]
        if t == "turn.completed":  # input_tokens include the cached ones (OpenAI)
            u, self.done = o.get("usage"), True
            tin, tout, cached = count(u, "input_tokens"), count(u, "output_tokens"), count(u, "cached_input_tokens")
            return [
                usage_event("usage", tin, tout, cached, self.cost(tin, tout, cached), o),
                Event("final", text=self.last_text),
            ]
        return []

    _KINDS = ("command_execution", "file_change", "mcp_tool_call", "web_search")

    @staticmethod
    def _item_calls(item: dict, raw: dict) -> list[Event]:
        if item["type"] == "command_execution":
            return tool_events("shell", {"command": item.get("command")}, raw)
        if item["type"] == "file_change":
            kinds = [("write" if c.get("kind") == "add" else "edit", c.get("path")) for c in item.get("changes") or []]
            return [Event("tool_call", tool, path, raw=raw) for tool, path in kinds]
        name = f"{item.get('server')}.{item.get('tool')}" if item["type"] == "mcp_tool_call" else item["type"]
        return [Event("tool_call", "other", name, raw=raw)]
