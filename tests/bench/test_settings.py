"""The settings model: every BENCH_* override read in bench/settings.py only, checked, with one precedence."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from bench import paths, settings
from bench.settings import SettingError

ROOT = Path(__file__).resolve().parents[2]
# where the environment may be read for a BENCH_ name: the settings, the protocol's reader, the in-sandbox hook
ALLOWED = {ROOT / "bench/settings.py", ROOT / "bench/protocol.py"}
HOOK = (
    ROOT / "bench/tracking/hook"
)  # the tracer inside the sandbox, stdlib only: its names, tests/bench/test_protocol.py


def _bench_names(tree: ast.Module) -> set[str]:
    """Names bound in a module to a BENCH_ string, directly or by importing a project's ``*_VAR`` constant."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            if str(node.value.value).startswith("BENCH_"):
                out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bench"):
            out |= {a.asname or a.name for a in node.names if a.name.endswith("_VAR")}
    return out


def _is_bench_key(node: ast.AST, names: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return str(node.value).startswith("BENCH_")
    if isinstance(node, ast.Name):
        return node.id in names
    return isinstance(node, ast.Attribute) and node.attr.endswith("_VAR")


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name)) or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def environ_reads(source: str) -> list[int]:
    """Lines where ``os.environ`` / ``os.getenv`` is read or written for a BENCH_ name."""
    tree = ast.parse(source)
    names, lines = _bench_names(tree), []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Subscript) and _is_environ(node.value):
            key = node.slice
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            f = node.func
            if (_is_environ(f.value) and f.attr in ("get", "pop", "setdefault")) or f.attr == "getenv":
                key = node.args[0]
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            key = node.left
        if key is not None and _is_bench_key(key, names):
            lines.append(node.lineno)
    return sorted(lines)


def test_the_scan_finds_each_way_of_reading_the_environment():
    source = """
import os
from bench.protocol import BUDGET_VAR
from bench.agents.health import WINDOW_VAR
X = "BENCH_X"
a = os.environ.get("BENCH_A")
b = os.environ["BENCH_B"]
c = os.getenv(X)
d = "BENCH_D" in os.environ
os.environ["BENCH_E"] = "1"
f = os.environ.get(BUDGET_VAR)
os.environ[WINDOW_VAR] = "3"
g = os.environ.get("HOME")
"""
    assert environ_reads(source) == [6, 7, 8, 9, 10, 11, 12]


def test_no_module_reads_a_bench_variable_but_settings_and_protocol():
    found = []
    for pkg in ("bench", "analysis", "baselines"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if path in ALLOWED or HOOK in path.parents:
                continue
            found += [f"{path.relative_to(ROOT)}:{n}" for n in environ_reads(path.read_text())]
    assert found == [], "read BENCH_ settings through bench.settings (protocol variables: bench.protocol)"


def test_precedence_override_then_environment_then_default(monkeypatch, tmp_path):
    monkeypatch.delenv("BENCH_EVAL_TIMEOUT", raising=False)
    assert settings.EVAL_TIMEOUT_S.get() == 900.0
    monkeypatch.setenv("BENCH_EVAL_TIMEOUT", "12.5")
    assert settings.EVAL_TIMEOUT_S.get() == 12.5
    with settings.override(BENCH_EVAL_TIMEOUT=3.0):
        assert settings.EVAL_TIMEOUT_S.get() == 3.0
    assert settings.EVAL_TIMEOUT_S.get() == 12.5
    # None: as if unset, so a default that depends on another setting follows it
    monkeypatch.setenv("BENCH_WORKSPACES_DIR", str(tmp_path / "elsewhere"))
    with settings.override(BENCH_CACHE_DIR=tmp_path / "c", BENCH_WORKSPACES_DIR=None):
        assert paths.workspaces_dir() == (tmp_path / "c" / "workspaces").resolve()
    assert paths.workspaces_dir() == (tmp_path / "elsewhere").resolve()


@pytest.mark.parametrize(
    ("name", "value", "expects"),
    [
        ("BENCH_EVAL_TIMEOUT", "soon", "seconds > 0"),
        ("BENCH_API_FAIL_WINDOW", "-3", "seconds > 0"),
        ("BENCH_GATEWAY", "maybe", "1 or 0"),
        ("BENCH_GATEWAY_RESOLVE", "api.example.com", "host=address"),
        ("BENCH_CAMPAIGN_CPUS", "0,x", "CPU numbers"),
    ],
)
def test_a_bad_value_is_one_error_naming_the_variable(monkeypatch, name, value, expects):
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingError) as e:
        settings.BY_NAME[name].get()
    assert str(e.value).startswith(f"{name}={value!r}: expected {expects}")
    assert settings.check() == [str(e.value)]


def test_values_are_parsed_to_their_types(monkeypatch):
    monkeypatch.setenv("BENCH_GATEWAY", "off")
    monkeypatch.setenv("BENCH_GATEWAY_RESOLVE", "a.example=127.0.0.1, b.example=10.0.0.2")
    monkeypatch.setenv("BENCH_TASKS_PATH", "/x:/y")
    assert settings.GATEWAY.get() is False
    assert settings.GATEWAY_RESOLVE.get() == {"a.example": "127.0.0.1", "b.example": "10.0.0.2"}
    assert settings.TASKS_PATH.get() == (Path("/x"), Path("/y"))


def test_the_table_lists_every_setting():
    table = settings.table()
    assert all(f"| `{s.name}` |" in table for s in settings.SETTINGS)
    assert len(table.splitlines()) == len(settings.SETTINGS) + 2


def test_a_flag_pins_its_setting_over_the_environment(monkeypatch):
    monkeypatch.setenv("BENCH_API_FAIL_WINDOW", "60")
    monkeypatch.setattr(settings, "_OVERRIDES", {})  # this test's pin ends with it
    settings.pin(BENCH_API_FAIL_WINDOW=7.5)  # bench run --api-fail-window 7.5s
    assert settings.API_FAIL_WINDOW_S.get() == 7.5
    with pytest.raises(KeyError, match="no such setting: BENCH_NOPE"):
        settings.pin(BENCH_NOPE=1)
