"""``bench agents check``.

Per agent, is its CLI installed, is a credential found, does its endpoint answer?

The same rules as the check before a run (:mod:`bench.agents.credentials`,
:mod:`bench.agents.api_probe`), for every agent at once, as a table: the endpoints are asked in
parallel with the short timeout, so the table comes in seconds even when every endpoint is
unreachable. Nothing is installed or created; a credential is shown by its kind and where it was
found, never by its value (``API key ANTHROPIC_API_KEY``, ``login CLAUDE_CODE_OAUTH_TOKEN
(Claude)``, ``login ~/.codex/auth.json (ChatGPT)``); a login file that cannot be used is ``unusable
login``, its status the one line saying what to run.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.agents import AGENTS, AgentError, api_probe
from bench.agents.credentials import need_of
from bench.agents.install import CLIS, is_installed


@dataclass(frozen=True)
class Row:
    """One agent's line of ``bench agents check``: its CLI, credential, endpoint and verdict."""

    agent: str
    cli: str
    credential: str
    endpoint: str
    verdict: str  # "ready", "offline", "not checked" or the one-line problem
    ready: bool


def rows(names: list[str] | None = None, models: dict[str, str] | None = None) -> list[Row]:
    """One row per agent, each LLM agent with ``models[name]`` or its default model.

    ``names``: these, in this order; else all.
    """
    names = names or sorted(AGENTS)
    models = models or {}
    needs = {n: need_of(n, models.get(n)) for n in names}
    asked = [need for need in needs.values() if need is not None]
    probes = api_probe.probe_all(asked) if api_probe.enabled() else [None] * len(asked)
    found = dict(zip([id(n) for n in asked], probes, strict=True))
    out = []
    for name in names:
        spec = CLIS.get(name)
        cli = "-" if spec is None else f"{spec.version}" if is_installed(name) else f"not installed ({spec.version})"
        need = needs[name]
        if need is None:
            offline = name in ("baseline", "command", "optuna")
            out.append(Row(name, cli, "-", "-", "offline" if offline else "not checked", True))
            continue
        probe = found[id(need)]
        cred = str(need.credential) if need.credential else "unusable login" if need.broken else "none"
        where = probe.describe() if probe is not None else "not asked"
        problem = api_probe.problem(need, probe)
        if problem is None and spec is not None and not is_installed(name):
            # not ready yet (the README's promise: exit 1 while one is not), though a run would
            # install it
            problem = f"{name}: not installed: bench agents install {name} (a run installs it on first use)"
        verdict = "ready" if problem is None else problem.split(": ", 1)[1]
        out.append(Row(name, cli, cred, f"{where} ({need.base_url})", verdict, problem is None))
    return out


def table(found: list[Row]) -> str:
    """The rows as an aligned text table, a header first."""
    head = Row("agent", "CLI", "credential", "endpoint", "status", True)
    cols = [(r.agent, r.cli, r.credential, r.endpoint, r.verdict) for r in [head, *found]]
    widths = [max(len(c[i]) for c in cols) for i in range(4)]
    return "\n".join("  ".join(c[i].ljust(widths[i]) for i in range(4)) + "  " + c[4] for c in cols)


def check_main(names: list[str], models: dict[str, str] | None = None) -> int:
    """Print the table; exit 1 when an agent named on the command line is not ready.

    The overview of all agents exits 0.
    """
    unknown = [n for n in names if n not in AGENTS]
    if unknown:
        raise AgentError(f"unknown agent {unknown[0]!r}; known agents: {', '.join(sorted(AGENTS))}")
    found = rows(names or None, models)
    print(table(found), flush=True)
    return 1 if names and not all(r.ready for r in found) else 0


__all__ = ["Row", "check_main", "rows", "table"]
