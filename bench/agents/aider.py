"""The ``aider`` agent: Aider with one ``--message``, no JSON stream (its text is parsed).

Runs ``aider --model M --edit-format diff --message PROMPT --read program.md --read train.py ...``
(pinned 0.86.2, in its own virtual environment, see install.py). Aider has no tools: it edits
through SEARCH/REPLACE blocks in its answer and offers to run the ```bash blocks it suggests;
its only read access is the files it is given, hence ``--read`` for the task's files.

Why no ``--yes-always``: Aider answers "no" to "Run shell command?" under ``--yes-always``
(``explicit_yes_required``), so the agent could never launch a training script. Its questions
are answered "yes" instead by their default: the harness gives the agent an empty stdin, and
Aider takes end-of-input as the default answer, which is "yes" for every question it asks here.

Endpoint and key: ``OPENAI_BASE_URL`` (with ``/v1``) becomes ``--openai-api-base`` for ``openai/``
models, ``OPENAI_API_KEY`` is read by LiteLLM; other LiteLLM providers work with their own
variables (``anthropic/...`` with ``ANTHROPIC_API_KEY``). Aider exits 0 even when every edit failed:
the harness judges the run by its checkpoints, not the exit code.
"""

from __future__ import annotations

import os

from bench.agents.base import LaunchContext
from bench.agents.install import cli_binary, home_env

DEFAULT_MODEL = "openai/gpt-5.5"
READ_ONLY = ("program.md", "train.py")


class AiderAgent:
    name = "aider"
    description = f"Aider (--message, diff edit format); --model LiteLLM name, default {DEFAULT_MODEL}"
    parser_name = "aider"

    def command(self, ctx: LaunchContext) -> list[str]:
        argv = [
            cli_binary(self.name, ctx.options),
            "--model",
            ctx.model or DEFAULT_MODEL,
            "--edit-format",
            "diff",
            "--no-git",
            "--no-auto-commits",
            "--no-show-model-warnings",
            "--no-check-update",
            "--analytics-disable",
            "--no-pretty",
            "--no-fancy-input",
            "--no-detect-urls",
            "--no-show-release-notes",
            "--no-stream",
        ]
        if os.environ.get("OPENAI_BASE_URL"):
            argv += ["--openai-api-base", os.environ["OPENAI_BASE_URL"]]
        for name in READ_ONLY:
            if (ctx.workspace / name).is_file():
                argv += ["--read", name]
        return [*argv, "--message", ctx.prompt]

    def env(self, ctx: LaunchContext) -> dict[str, str]:
        env = home_env(ctx.home)
        env.update(
            {
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no model-price download at start-up
                "AIDER_CHECK_UPDATE": "false",
                "AIDER_ANALYTICS": "false",
            }
        )
        return env
