"""The ``command`` agent: any shell command plays the agent.

For tests, and for agents without an adapter yet. The command runs with ``bash -c`` in the
workspace, under the same watchdog, tracer and evaluation as any agent; the standard prompt
is in ``$BENCH_PROMPT``.
"""

from __future__ import annotations

from bench.agents.base import Agent, AgentError, LaunchContext
from bench.protocol import PROMPT_VAR


class CommandAgent(Agent):
    """A shell command as the agent (``--agent-command``), for tests, demos, scripted baselines."""

    name = "command"
    option_names = ("command",)
    description = "runs a shell command as the agent: --agent-command 'cp train.py run_1.py && python run_1.py'"
    offline = True  # no key, no network

    def check(self, options: dict[str, str], model: str | None) -> None:
        """Before anything is created: the one thing this agent needs is the command."""
        if not (options.get("command") or "").strip():
            raise AgentError("the command agent needs the command to run: --agent-command 'CMD'")

    def command(self, ctx: LaunchContext) -> list[str]:
        """``bash -c`` the command, after checking that one was given."""
        self.check(ctx.options, ctx.model)
        return ["bash", "-c", ctx.options["command"]]

    def env(self, ctx: LaunchContext) -> dict[str, str]:
        """The prompt in :data:`bench.protocol.PROMPT_VAR`, for a command that wants it."""
        return {PROMPT_VAR: ctx.prompt}
