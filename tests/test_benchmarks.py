"""Every benchmark keeps running, and the performance numbers a reader sees are the ones ``make bench`` measured.

The scripts of tests/benchmarks/ print the figures the README and the docs quote; nothing else runs them, so without
these tests they rot (a moved helper once crashed eval_cost.py on T7 while the docs still quoted its table). The slow
tier runs each one in its smoke mode (``--smoke``: the smallest sizes, one run) and checks that it exits 0 and prints
the same figure lines as at its documented size (the ones docs/benchmarks.md holds); the fast tests check that
``make bench`` runs every script, that docs/benchmarks.md is a whole run of it, and that every number the pages quote
from it (``<!--fig:ID-->value``) is the file's.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "tests" / "benchmarks"
HELPERS = {"figures", "make_figures"}  # the shared figure lines and the make bench driver, not benchmarks
FILE = ROOT / "docs" / "benchmarks.md"
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p != FILE)]
QUOTE = re.compile(r"<!--fig:([\w.-]+)-->")


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_figures = _module("make_figures")
LINE = _module("figures").LINE


def test_make_bench_runs_every_benchmark_script() -> None:
    """A benchmark added to tests/benchmarks/ is measured by ``make bench`` (and smoke-tested below)."""
    scripts = {p.stem for p in BENCHMARKS.glob("*.py")} - HELPERS
    assert scripts == set(make_figures.BENCHMARKS)
    assert "\nbench:" in (ROOT / "Makefile").read_text() and "make_figures.py" in (ROOT / "Makefile").read_text()


def test_the_figures_file_is_a_whole_make_bench_run() -> None:
    """docs/benchmarks.md holds every benchmark, each run at its documented size and none failed, and says the
    machine and when; every figure has its load at start and end."""
    text = FILE.read_text()
    sections = make_figures.sections(text)
    assert list(sections) == list(make_figures.BENCHMARKS)
    for name, section in sections.items():
        command = " ".join(["python", f"tests/benchmarks/{name}.py", *make_figures.BENCHMARKS[name]])
        assert f"`{command}`: " in section, f"{name}: not run at its documented size ({command})"
        assert "**Failed**" not in section, f"{name} failed in the last make bench: run it again"
        assert make_figures.ROW.search(section), f"{name}: no figure"
    for row in ("| machine | ", "| commit | ", "| written | 20"):
        assert row in text, row


def test_the_docs_quote_the_figures_file() -> None:
    """Every number a page quotes from docs/benchmarks.md is the file's, as written there."""
    figures = make_figures.figures(FILE.read_text())
    quoted, wrong = 0, []
    for page in PAGES:
        text = page.read_text()
        for m in QUOTE.finditer(text):
            quoted += 1
            value = figures.get(m.group(1))
            if value is None or not text[m.end() :].startswith(value):
                got = text[m.end() : m.end() + 20].split("|")[0]
                wrong.append(f"{page.name}: {m.group(1)} quotes {got!r}, docs/benchmarks.md has {value!r}")
    assert wrong == []
    assert quoted >= 20, quoted


def test_a_paragraph_that_names_a_benchmark_quotes_its_figures_from_the_file() -> None:
    """A page that names a benchmark script beside numbers takes them from docs/benchmarks.md (a marked quote or a
    link to it), so that no figure a user reads comes from a run nobody can repeat."""
    loose = []
    for page in PAGES:
        for paragraph in re.split(r"\n\s*\n", page.read_text()):
            if "tests/benchmarks/" in paragraph and not (QUOTE.search(paragraph) or "benchmarks.md" in paragraph):
                loose.append(f"{page.name}: {paragraph[:100]!r}")
    assert loose == []


def _skip_unless_runnable(name: str) -> dict[str, str]:
    """The environment a smoke run gets; skips (with the reason, as the tests do) what this machine cannot run."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "BENCH_MLRUNS_DIR")}
    if name in make_figures.NEEDS_MIRROR and not os.environ.get("BENCH_DATA_MIRROR"):
        pytest.skip("set BENCH_DATA_MIRROR to the datasets' offline mirror (docs/tasks-and-data.md) for the real data")
    if name == "report_server_speed":
        from tests.pg import skip_without_postgres

        skip_without_postgres()
    if name in ("prober_order_cost", "gateway_latency"):  # each compares with a commit of the history
        before = re.search(r'^BEFORE = "(\w+)"', (BENCHMARKS / f"{name}.py").read_text(), re.M).group(1)
        known = subprocess.run(["git", "cat-file", "-e", f"{before}^{{commit}}"], cwd=ROOT, capture_output=True)
        if known.returncode != 0:
            pytest.skip(f"the code it compares with ({before}) is not in this clone's history")
    if name in ("run_overhead", "sandbox_cost", "eval_cost", "prober_order_cost"):
        from bench.sandbox.bwrap import probe

        if (why := probe()) is not None:
            pytest.skip(f"no usable sandbox here: {why}")
    return env


@pytest.mark.slow  # seconds to a minute each: the scorer, the sandbox, a bench run, PostgreSQL
@pytest.mark.parametrize("name", sorted(make_figures.BENCHMARKS))
def test_each_benchmark_runs_in_its_smoke_mode(name: str, tmp_path: Path) -> None:
    env = _skip_unless_runnable(name)
    env["BENCH_CACHE_DIR"] = str(tmp_path / "cache")
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{name}.py"), "--smoke"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{name}.py --smoke exited {done.returncode}:\n{output[-4000:]}"
    printed = [m["id"] for line in done.stdout.splitlines() if (m := LINE.match(line))]
    assert printed, f"{name}.py --smoke printed no FIGURE line:\n{output[-3000:]}"
    in_file = make_figures.figures(make_figures.sections(FILE.read_text()).get(name, ""))
    assert sorted(printed) == sorted(in_file), "the smoke run prints other figures than make bench recorded"
