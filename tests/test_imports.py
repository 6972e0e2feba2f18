"""The import graph of the three packages: no circles, and imports point the way CONTRIBUTING.md's "Layers" says.

Every ``import`` / ``from ... import`` counts, including the ones inside functions: a lazy import only
hides a circle from the interpreter, not from a reader. Built from the source with ``ast``; checked with
the standard library's ``graphlib``, which names the modules of a circle when it finds one.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bench", "analysis", "baselines")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            if "hook" not in path.relative_to(ROOT).parts:  # the tracer hook runs inside agent scripts, stdlib only
                found[module_name(path)] = path
    return found


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """The project modules ``path`` imports (``from a import b`` counts ``a.b`` when that is a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level-1 packages
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:  # `import bench.tasks.data` -> the module itself; a name -> its module
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(path, name, known) for name, path in mods.items()}


def test_the_graph_is_read_from_the_real_sources() -> None:
    g = graph()
    assert {"bench.runner", "bench.pipeline.collect", "analysis.leaderboard", "baselines.tune"} <= set(g)
    assert "bench.pipeline.collect" in g["bench.runner"]  # `from bench.pipeline import collect`
    assert "bench.tasks.direction" in g["bench.pipeline.collect"] or "bench.tasks" in g["bench.pipeline.collect"]


def test_no_import_circles() -> None:
    try:
        tuple(graphlib.TopologicalSorter(graph()).static_order())
    except graphlib.CycleError as e:
        pytest.fail(f"import circle: {' -> '.join(e.args[1])}")


def test_a_circle_is_found() -> None:
    """The check itself can fail: a made-up graph with a circle through three modules."""
    with pytest.raises(graphlib.CycleError):
        tuple(graphlib.TopologicalSorter({"a": {"b"}, "b": {"c"}, "c": {"a"}}).static_order())


def test_imports_point_down() -> None:
    """bench never imports analysis or baselines except from its command line; baselines never imports analysis."""
    command_line = {"bench.cli", "bench.demo", "bench.campaign.cli"}  # the command lines may call the analysis, tuner
    for name, deps in graph().items():
        if name.startswith("bench") and name not in command_line:
            assert not {d for d in deps if d.split(".")[0] in ("analysis", "baselines")}, (name, deps)
        if name.startswith("baselines"):
            assert not {d for d in deps if d.startswith("analysis")}, (name, deps)


def test_task_files_import_nothing_from_the_harness() -> None:
    for path in (ROOT / "tasks").rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [n for n in names if n.split(".")[0] in PACKAGES], path


# Import directions that must never appear, each with why: (importer, imported, why). A name matches that module and
# every module under it. Add a line here when a layer is settled; the test below checks every line.
FORBIDDEN = [
    ("bench.tracking", "bench.agents", "tracking records runs for any agent; the adapters sit above it"),
    ("bench.sandbox", "bench.agents", "the sandbox confines any process; the agents ask it, never the other way"),
    ("bench.rules", "bench.pipeline", "the rules judge a run from its evidence (bench.evidence); the audit runs them"),
    ("bench.agents", "bench.gateway", "the gateway meters the adapters' requests and asks them; they never ask it"),
    ("bench.sandbox", "bench.gateway", "the sandbox serves any handler it is given; the launch gives it the gateway's"),
]


def under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def forbidden_edges(g: dict[str, set[str]], importer: str, imported: str) -> list[tuple[str, str]]:
    """Every edge of ``g`` from a module under ``importer`` to one under ``imported``."""
    return sorted((a, b) for a, deps in g.items() if under(a, importer) for b in deps if under(b, imported))


@pytest.mark.parametrize(("importer", "imported", "why"), FORBIDDEN, ids=[f"{a}->{b}" for a, b, _ in FORBIDDEN])
def test_no_forbidden_import(importer: str, imported: str, why: str) -> None:
    edges = forbidden_edges(graph(), importer, imported)
    assert not edges, f"{why}: {edges}"


def test_a_forbidden_import_is_found() -> None:
    """The check itself can fail: a made-up edge into a sub-module counts, a name that only shares a prefix does not."""
    g = {"bench.sandbox.view": {"bench.agents.install", "bench.agentsx"}, "bench.agents": {"bench.sandbox"}}
    assert forbidden_edges(g, "bench.sandbox", "bench.agents") == [("bench.sandbox.view", "bench.agents.install")]
