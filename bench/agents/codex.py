"""The ``codex`` agent: OpenAI's Codex CLI, non-interactive (``codex exec --json``), JSONL events.

Runs ``codex exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox -C WS -m M PROMPT``
(pinned 0.169.0). The key is ``OPENAI_API_KEY``. With ``OPENAI_BASE_URL`` set (a proxy, a gateway,
the test mock; include the ``/v1``), a custom provider ``bench`` speaks the Responses API there,
configured with ``-c model_providers.bench={...}`` so that nothing is written to a config file.
Without it, the built-in OpenAI provider is used, given the key as ``CODEX_API_KEY``.

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

from bench.agents.base import LaunchContext
from bench.agents.install import cli_binary, home_env

DEFAULT_MODEL = "gpt-5.5"
PROVIDER = "bench"


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


class CodexAgent:
    name = "codex"
    description = f"OpenAI Codex CLI (exec --json); --model, default {DEFAULT_MODEL}; OPENAI_API_KEY [OPENAI_BASE_URL]"
    parser_name = "codex"

    def command(self, ctx: LaunchContext) -> list[str]:
        config = [
            "allow_login_shell=false",
            "check_for_update_on_startup=false",
            "shell_environment_policy.ignore_default_excludes=true",
            'shell_environment_policy.exclude=["*_API_KEY", "*_AUTH_TOKEN"]',
        ]
        base_url = os.environ.get("OPENAI_BASE_URL")
        if base_url:
            provider = (
                f'{{name={_toml(PROVIDER)}, base_url={_toml(base_url)}, wire_api="responses", '
                f'env_key="OPENAI_API_KEY"}}'
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
        env = home_env(ctx.home)
        codex_home = ctx.home / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        env["CODEX_HOME"] = str(codex_home)
        if os.environ.get("OPENAI_API_KEY") and not os.environ.get("CODEX_API_KEY"):
            env["CODEX_API_KEY"] = os.environ["OPENAI_API_KEY"]
        return env
