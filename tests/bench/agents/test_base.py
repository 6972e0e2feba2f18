"""The agent base (bench/agents/base.py): every adapter derives from it, and it declares exactly what the harness asks.

What the harness asks is read from its source, not copied here: every attribute read on a value that is an agent (a
parameter annotated ``Agent``, ``get_agent(...)``, ``AGENTS[...]``, a loop over ``AGENTS``, ``self`` inside the
base), in every module of ``bench/``. A capability called but not declared would be an ``AttributeError`` on some
adapter; one declared but never called is dead; a ``hasattr``/``getattr`` on an agent is the probing the base
replaced.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from bench.agents import AGENTS, PARSERS, AgentError, LaunchContext
from bench.agents.base import Agent

ROOT = Path(__file__).resolve().parents[3]


def _is_agents_table(node: ast.AST, method: str) -> bool:
    """``AGENTS.<method>()`` anywhere inside ``node`` (``sorted(AGENTS.items())`` too)."""
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == method
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id == "AGENTS"
        for n in ast.walk(node)
    )


def _makes_agent(node: ast.AST) -> bool:
    """``get_agent(...)`` or ``AGENTS[...]``."""
    if isinstance(node, ast.Call):
        f = node.func
        return (isinstance(f, ast.Name) and f.id == "get_agent") or (
            isinstance(f, ast.Attribute) and f.attr == "get_agent"
        )
    return isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "AGENTS"


def _agent_names(func: ast.FunctionDef | ast.AsyncFunctionDef, in_base: bool) -> set[str]:
    """The names bound to an agent in ``func``."""
    args = [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]
    names = {a.arg for a in args if isinstance(a.annotation, ast.Name) and a.annotation.id == "Agent"}
    names |= {a.arg for a in args if isinstance(a.annotation, ast.Constant) and a.annotation.value == "Agent"}
    if in_base and args:
        names.add(args[0].arg)  # self
    for n in ast.walk(func):
        if isinstance(n, ast.Assign):
            for target in n.targets:
                pairs = (
                    zip(target.elts, n.value.elts, strict=False)
                    if isinstance(target, ast.Tuple) and isinstance(n.value, ast.Tuple)
                    else [(target, n.value)]
                )
                names |= {t.id for t, v in pairs if isinstance(t, ast.Name) and _makes_agent(v)}
        elif isinstance(n, ast.For | ast.comprehension):
            if _is_agents_table(n.iter, "values") and isinstance(n.target, ast.Name):
                names.add(n.target.id)
            elif _is_agents_table(n.iter, "items") and isinstance(n.target, ast.Tuple) and len(n.target.elts) == 2:
                if isinstance(n.target.elts[1], ast.Name):
                    names.add(n.target.elts[1].id)
    return names


def uses(source: str, in_base: bool = False) -> tuple[set[str], list[str]]:
    """(the attributes read on agents in ``source``, the names probed with hasattr/getattr on an agent)."""
    read, probed = set(), []
    tree = ast.parse(source)
    for func in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
        names = _agent_names(func, in_base)

        def is_agent(node: ast.AST, names: set[str] = names) -> bool:
            return (isinstance(node, ast.Name) and node.id in names) or _makes_agent(node)

        for n in ast.walk(func):
            if isinstance(n, ast.Attribute) and is_agent(n.value):
                read.add(n.attr)
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("hasattr", "getattr"):
                if n.args and is_agent(n.args[0]):
                    probed.append(ast.unparse(n))
    return read, probed


def harness_uses() -> tuple[set[str], list[str]]:
    read, probed = set(), []
    base = ROOT / "bench" / "agents" / "base.py"
    for path in sorted((ROOT / "bench").rglob("*.py")):
        tree = ast.parse(path.read_text())
        if path == base:  # inside the base, self is an agent
            agent_cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Agent")
            r, p = uses(ast.unparse(agent_cls), in_base=True)
            rest = uses(ast.unparse(ast.Module([n for n in tree.body if n is not agent_cls], [])))
            r, p = r | rest[0], p + rest[1]
        else:
            r, p = uses(ast.unparse(tree))
        read |= r
        probed += [f"{path.relative_to(ROOT)}: {c}" for c in p]
    return read, probed


def declared() -> set[str]:
    return {k for k in vars(Agent) if not k.startswith("_")} | set(Agent.__annotations__)


def test_every_registered_agent_derives_from_the_base():
    for key, agent in AGENTS.items():
        assert isinstance(agent, Agent), key
        assert agent.name == key and isinstance(agent.description, str) and agent.description, key
        # a capability overridden by a plain value (the old protocol's `passthrough = (...)`) would not be callable
        assert all(callable(getattr(agent, m)) for m in ("command", "env", "passthrough", "endpoints")), key


def test_the_base_declares_exactly_what_the_harness_calls():
    read, probed = harness_uses()
    assert not probed, f"agent capabilities probed instead of called: {probed}"
    assert "command" in read and "endpoints" in read  # the scan sees the launch
    assert read - declared() == set(), "called on agents but not declared by bench.agents.base.Agent"
    assert declared() - read == set(), "declared by the base but called nowhere in bench/"


def test_the_scan_finds_calls_and_probes():
    """The scan itself can fail: a made-up module with a probe, a call through get_agent and a loop over AGENTS."""
    source = (
        "def f(agent: Agent, ctx):\n    return hasattr(agent, 'x') and agent.y(ctx)\n"
        "def g(spec):\n    task, a = spec.task, get_agent(spec.agent)\n    return a.z, AGENTS['b'].w\n"
        "def h():\n    return [v.u for k, v in sorted(AGENTS.items())]\n"
    )
    read, probed = uses(source)
    assert read == {"y", "z", "w", "u"} and probed == ["hasattr(agent, 'x')"]


def test_validate_refuses_unknown_options_then_asks_the_adapter(tmp_path):
    with pytest.raises(AgentError, match="baseline agent does not know the option.s. x; it knows: none"):
        AGENTS["baseline"].validate({"x": "1"}, None)
    with pytest.raises(AgentError, match="--agent-command"):  # known option, the adapter's own check refuses
        AGENTS["command"].validate({"command": " "}, None)
    AGENTS["command"].validate({"command": "true"}, None)


def test_the_defaults_ask_for_nothing(tmp_path):
    class Minimal(Agent):
        name, description = "minimal", "argv only"

        def command(self, ctx: LaunchContext) -> list[str]:
            return ["true"]

    ctx = LaunchContext(task=None, workspace=tmp_path, prompt="P", budget_s=60, home=tmp_path / "h")
    agent = Minimal()
    assert (agent.env(ctx), agent.passthrough(ctx), agent.endpoints(ctx)) == ({}, (), ())
    assert (agent.parser_name(ctx), agent.gateway_var(ctx), agent.gateway_path(ctx)) == (None, None, "")
    assert (agent.login_files(ctx), agent.writable(ctx), agent.own_hosts, agent.option_names) == ((), (), (), ())
    assert agent.check({}, None) is None and not agent.offline and agent.default_model is None
    with pytest.raises(TypeError):  # command is the one member an adapter must write
        type("NoCommand", (Agent,), {"name": "x", "description": "y"})()


def test_offline_agents_get_no_variable_and_the_others_a_parser(tmp_path):
    ctx = LaunchContext(task=None, workspace=tmp_path, prompt="P", budget_s=60, home=tmp_path / "h")
    for name, agent in AGENTS.items():
        if agent.offline:
            assert agent.passthrough(ctx) == () and agent.parser_name(ctx) is None, name
        elif name != "generic":  # its variables and parser come from its config
            assert agent.passthrough(ctx) and agent.parser_name(ctx) in PARSERS, name
