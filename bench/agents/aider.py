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

Sandboxed, its requests go through the metering gateway (:mod:`bench.gateway.proxy`):
``--openai-api-base`` (for any model but ``anthropic/``) or ``ANTHROPIC_API_BASE`` (LiteLLM's first
choice; it appends ``/v1/messages``) is the gateway's port inside the sandbox. Its answers are not
streamed (``--no-stream``): each carries its usage whole.
"""

from __future__ import annotations

import os
import re

from bench.agents.base import Agent, LaunchContext, api_endpoints
from bench.agents.events import Event
from bench.agents.install import cli_binary, home_env
from bench.agents.parsing import Parser, result_event, usage_event

DEFAULT_MODEL = "openai/gpt-5.5"
READ_ONLY = ("program.md", "train.py")


class AiderAgent(Agent):
    """Aider run once with ``--message``; its plain-text output is read by :class:`AiderParser`."""

    name = "aider"
    option_names = ("bin",)  # --agent-option bin=/path/to/cli (else the pinned install)
    description = f"Aider (--message, diff edit format); --model LiteLLM name, default {DEFAULT_MODEL}"
    default_model = DEFAULT_MODEL
    own_hosts = ("raw.githubusercontent.com",)  # the model metadata it fetches at start (measured, see codex.py)

    def passthrough(self, ctx: LaunchContext) -> tuple[str, ...]:
        """Its keys and settings: OpenAI's, Anthropic's and Aider's own variables."""
        return ("OPENAI_*", "ANTHROPIC_*", "AIDER_*")

    def parser_name(self, ctx: LaunchContext) -> str | None:
        """Aider's own plain-text parser."""
        return self.name

    def endpoints(self, ctx: LaunchContext) -> tuple[str, ...]:
        """The API of the model's provider: Anthropic's for ``anthropic/``, else OpenAI's."""
        provider = (ctx.model or DEFAULT_MODEL).partition("/")[0]
        if provider == "anthropic":
            return api_endpoints(("ANTHROPIC_BASE_URL",), "https://api.anthropic.com")
        return api_endpoints(("OPENAI_BASE_URL", "OPENAI_API_BASE"), "https://api.openai.com")

    def gateway_var(self, ctx: LaunchContext) -> str | None:
        """The variable whose base URL the gateway replaces.

        It is the model's provider's; LiteLLM's other providers keep their own routes.
        """
        provider = (ctx.model or DEFAULT_MODEL).partition("/")[0] if "/" in (ctx.model or DEFAULT_MODEL) else "openai"
        return "ANTHROPIC_BASE_URL" if provider == "anthropic" else "OPENAI_BASE_URL" if provider == "openai" else None

    def gateway_path(self, ctx: LaunchContext) -> str:
        """OpenAI's base URL has /v1 (https://api.openai.com/v1).

        LiteLLM appends /v1/messages to Anthropic's.
        """
        return "" if self.gateway_var(ctx) == "ANTHROPIC_BASE_URL" else "/v1"

    def command(self, ctx: LaunchContext) -> list[str]:
        """Aider with the model, the diff edit format, no git, the prompt as its one message."""
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
        if base := ctx.base_urls.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_BASE_URL"):
            argv += ["--openai-api-base", base]
        for name in READ_ONLY:
            if (ctx.workspace / name).is_file():
                argv += ["--read", name]
        return [*argv, "--message", ctx.prompt]

    def env(self, ctx: LaunchContext) -> dict[str, str]:
        """A private HOME; no price-map download, update check or analytics; the gateway's URLs."""
        env = home_env(ctx.home)
        env.update(
            {
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no model-price download at start-up
                "AIDER_CHECK_UPDATE": "false",
                "AIDER_ANALYTICS": "false",
            }
        )
        # LiteLLM reads OPENAI_BASE_URL before OPENAI_API_BASE (what --openai-api-base sets): both
        # are the gateway's
        if gateway := ctx.base_urls.get("OPENAI_BASE_URL"):
            env.update(OPENAI_API_BASE=gateway, OPENAI_BASE_URL=gateway)
        if gateway := ctx.base_urls.get("ANTHROPIC_BASE_URL"):
            env.update(ANTHROPIC_API_BASE=gateway, ANTHROPIC_BASE_URL=gateway)
        return env


_AIDER_TOKENS = re.compile(
    r"^Tokens: (?P<sent>[\d.]+[kM]?) sent(?:, (?P<write>[\d.]+[kM]?) cache write)?(?:, (?P<hit>[\d.]+[kM]?) cache "
    r"hit)?, (?P<recv>[\d.]+[kM]?) received\.(?: Cost: \$(?P<cost>[\d.]+) message, \$[\d.]+ session\.)?"
)
_AIDER_PROMPT = re.compile(r"^(?P<q>.*?)\? \(Y\)es/\(N\)o[^\]]*\]: ?(?P<rest>.*)$")
_AIDER_CHROME = re.compile(
    r"^(?:Aider v\d|(?:Main |Weak |Editor )?[Mm]odel: |Git repo: |Repo-map: |Added .* to the chat|Analytics |"
    r"Cur working dir|Warning|Note: |https?://|HTTPSConnectionPool|Use /help|Newer aider version|Can't initialize)"
)
_AIDER_API_ERROR = re.compile(
    r"^(?:litellm\.\w+|\w*(?:APIConnection|Authentication|RateLimit|BadRequest|NotFound|ServiceUnavailable|"
    r"InternalServer|APIError|Timeout)Error)\b|^The API provider "
)


def _aider_count(s: str | None) -> int:
    """Aider's rounded counts: "950", "1.2k", "12k", "1.5M"."""
    try:
        return round(float(s.rstrip("kM")) * {"k": 1_000, "M": 1_000_000}.get(s[-1], 1)) if s else 0
    except ValueError:
        return 0


class AiderParser(Parser):
    """Aider's plain-text output, read line by line.

    Aider prints text: the reply, "Tokens: ..." after it, then "Applied edit to X" and "Running CMD"
    + output.
    """

    def __init__(self, model: str | None = None):
        super().__init__(model)
        self._buf: list[str] = []  # reply text since the last token report
        self._new_files: set[str] = set()
        self._running: Event | None = None  # the shell command whose output is being printed
        self._output: list[str] = []

    def feed(self, line: str) -> list[Event]:
        """One line of Aider's output -> events (replies, edits, commands, their output, tokens)."""
        s, out = line.rstrip("\r\n"), []
        if m := _AIDER_PROMPT.match(s):  # a question; with stdin not a tty, the next output goes on the same line
            out += self._end_command()
            if m["q"].endswith("Create new file") and any(x.strip() for x in self._buf):
                self._new_files.add(next(x.strip() for x in reversed(self._buf) if x.strip()))
            self._buf, s = [], m["rest"]  # the lines before it named what is confirmed: not reply text
            if s.strip().lower() in ("", "y", "n", "yes", "no", "d", "a", "s"):  # an echoed answer (--yes-always)
                return out
        if self._running is not None and not (s.startswith("Running ") or _AIDER_TOKENS.match(s)):
            self._output.append(s)
            return out
        self._buf = [] if s.startswith("Aider v") else self._buf  # what came before the banner: start-up warnings
        if (model := re.match(r"^(?:Main )?[Mm]odel: (\S+)", s)) and not self.model:
            self.model = model[1]
        if tokens := _AIDER_TOKENS.match(s):
            out += self._end_command() + self.finish_text() + [self._tokens(tokens)]
        elif s.startswith("Applied edit to "):
            path = s.removeprefix("Applied edit to ").strip()
            call = Event("tool_call", "write" if path in self._new_files else "edit", path)
            out += [call, result_event(call, s, False, None)]
        elif s.startswith("Running "):
            out += self._end_command()
            self._running = Event("tool_call", "shell", s.removeprefix("Running ").strip())
            out.append(self._running)
        elif "SEARCH/REPLACE block" in s and "failed to match" in s or s.startswith("The LLM did not conform"):
            out.append(Event("tool_result", "edit", None, s, is_error=True))
        elif _AIDER_API_ERROR.match(s):
            out += self.message(s, is_error=True)
        elif not _AIDER_CHROME.match(s):
            self._buf.append(s)
        return out

    def _tokens(self, m: re.Match) -> Event:
        cached = _aider_count(m["hit"])
        tin, tout = _aider_count(m["sent"]) + _aider_count(m["write"]) + cached, _aider_count(m["recv"])
        return usage_event("usage", tin, tout, cached, float(m["cost"]) if m["cost"] else self.cost(tin, tout, cached))

    def _end_command(self) -> list[Event]:
        if self._running is None:
            return []
        (prev, done), self._running, self._output = (self._running, self._output), None, []
        return [result_event(prev, "\n".join(done), False, None)]

    def finish_text(self) -> list[Event]:
        """The reply text gathered since the last token report, as one message event."""
        text, self._buf = "\n".join(self._buf).strip(), []
        return self.message(text)

    def finish(self) -> list[Event]:
        """Close the open command and the pending reply, then the final event."""
        return self._end_command() + self.finish_text() + super().finish()
