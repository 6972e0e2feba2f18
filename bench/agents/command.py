"""The ``command`` agent: any shell command plays the agent.

For tests, and for agents without an adapter yet. The command runs with ``bash -c`` in the
workspace, under the same watchdog, tracer and evaluation as any agent; the standard prompt
is in ``$BENCH_PROMPT``.
"""

from __future__ import annotations

from bench.agents.base import AgentError, LaunchContext


class CommandAgent:
    name = "command"
    description = "runs a shell command as the agent: --agent-command 'python run_1.py'"

    passthrough: tuple[str, ...] = ()  # offline: no key, no network

    def endpoints(self, ctx: LaunchContext) -> tuple[str, ...]:
        return ()

    def command(self, ctx: LaunchContext) -> list[str]:
        cmd = ctx.options.get("command")
        if not cmd:
            raise AgentError("the command agent needs the command to run: --agent-command 'CMD'")
        return ["bash", "-c", cmd]

    def env(self, ctx: LaunchContext) -> dict[str, str]:
        return {"BENCH_PROMPT": ctx.prompt}
