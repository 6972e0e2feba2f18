"""The floors of CONTRIBUTING.md's "Layers" table, checked against every import of the three packages.

The table is the rule, read from the file a contributor reads; the import graph is built from the sources by
``tests/test_imports.py`` (lazy imports inside functions count too). A module imports only from its own floor or
below.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_imports import graph

ROOT = Path(__file__).resolve().parents[1]


def floors(text: str) -> dict[str, int]:
    """Each module name of the "Layers" table with its floor (the table's first column)."""
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    out: dict[str, int] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].isdigit():
            for name in re.findall(r"`([A-Za-z_][\w.]*)`", cells[1]):
                out[name] = int(cells[0])
    return out


def floor_of(module: str, table: dict[str, int]) -> int | None:
    """The floor of the most specific table name that covers ``module`` (itself or a package above it)."""
    names = [n for n in table if module == n or module.startswith(n + ".")]
    return table[max(names, key=len)] if names else None


def upward(g: dict[str, set[str]], table: dict[str, int]) -> list[str]:
    """Every import that climbs a floor, as ``importer (floor) -> imported (floor)``."""
    out = []
    for importer, deps in sorted(g.items()):
        for dep in sorted(deps):
            a, b = floor_of(importer, table), floor_of(dep, table)
            if a is not None and b is not None and b > a:
                out.append(f"{importer} ({a}) -> {dep} ({b})")
    return out


def table() -> dict[str, int]:
    return floors((ROOT / "CONTRIBUTING.md").read_text())


def test_every_module_has_a_floor() -> None:
    missing = sorted(m for m in graph() if floor_of(m, table()) is None)
    assert not missing, f"add these to CONTRIBUTING.md's Layers table: {missing}"


def test_no_import_climbs_a_floor() -> None:
    climbs = upward(graph(), table())
    assert not climbs, "imports up a floor (move the code down, or the module up in CONTRIBUTING.md):\n" + "\n".join(
        climbs
    )


def test_the_table_is_read_and_a_climb_is_found() -> None:
    """The check itself can fail: the real table has the floors it says, and a made-up upward edge is named."""
    t = table()
    assert t["bench.errors"] == 0 and t["bench.pipeline"] == 4 and t["bench.cli"] == 6
    made_up = {"bench.errors": {"bench.runner"}, "bench.pipeline.collect": {"bench.errors"}}
    assert upward(made_up, t) == ["bench.errors (0) -> bench.runner (4)"]
    assert floor_of("bench.sandbox.view", t) == 1 and floor_of("bench.sandboxx", t) == 0  # under `bench` only
    assert floor_of("analysisx", t) is None


@pytest.mark.parametrize("name", ["bench.errors", "bench.settings", "bench.untrusted"])
def test_the_floor_zero_modules_import_nothing_of_the_project_above_them(name: str) -> None:
    deps = graph()[name]
    assert all(floor_of(d, table()) == 0 for d in deps), (name, deps)
