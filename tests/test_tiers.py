"""The tiers (tests/tiers.py, tests/conftest.py): what counts as a whole benchmark run, and that one is refused in a
test not marked slow (this one); a bare pytest selects the fast tier and says how to run the slow one; each tier has
a ceiling per test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import tiers


@pytest.mark.parametrize(
    ("argv", "whole"),
    [
        (["/x/.venv/bin/bench", "run", "--agent", "baseline"], True),
        ([sys.executable, "-m", "bench.cli", "--quiet", "campaign", "job", "f.toml"], True),
        (["bench", "demo"], True),
        ([sys.executable, "-m", "bench.cli", "data", "prepare", "t6"], False),
        (["/x/.venv/bin/bench", "report", "--campaign", "run"], False),
        (["bwrap", "--", "sh", "-c", "python train.py"], False),
        ("sleep 1", False),
    ],
)
def test_whole_runs_are_told_from_other_processes(argv, whole):
    assert (tiers.whole_run(argv) is not None) is whole


def test_a_whole_run_in_a_test_not_marked_slow_is_refused_before_it_starts(tmp_path, monkeypatch):
    assert tiers.guarded()  # this test is not marked slow
    try:
        with pytest.raises(tiers.WholeRunInFastTier, match="mark it @pytest.mark.slow"):
            subprocess.Popen([sys.executable, "-m", "bench.cli", "run", "--agent", "baseline"], cwd=tmp_path)
        assert tiers.started() == ["a `bench run` process"]
        from bench.pipeline import launch
        from bench.runner import run

        launched = []
        monkeypatch.setattr(run, "__wrapped__", lambda spec: launch.launch(spec))  # a run that gets to its launch
        monkeypatch.setattr(launch.launch, "__wrapped__", launched.append)
        with pytest.raises(tiers.WholeRunInFastTier, match="bench.runner.run in a test not marked slow"):
            run("spec")
        assert launched == []
        launch.launch("no run")  # the launch step on its own (as the watch tests use it) is not a whole run
        assert launched == ["no run"]
    finally:
        tiers.forget()  # refused on purpose: not this test's failure


def test_other_processes_start(tmp_path):
    done = subprocess.run([sys.executable, "-c", "print('ok')"], capture_output=True, text=True, check=True)
    assert done.stdout == "ok\n"


GROUPED = """
import os
import pytest

@pytest.hookimpl(tryfirst=True)  # as ours do: pytest-xdist reads the mark in the same hook
def pytest_collection_modifyitems(config, items):
    for item in items:
        if "shared" in item.fixturenames:  # as tests/analysis/conftest.py groups the real store's tests
            item.add_marker(pytest.mark.xdist_group("shared"))

@pytest.fixture(scope="session")
def shared():
    return os.environ["PYTEST_XDIST_WORKER"]
"""


def test_tests_of_one_xdist_group_run_on_one_worker(tmp_path):
    """make test-all's --dist loadgroup puts the tests of an expensive session fixture (the real analysis store: four
    T6 runs) on one worker. pytest 9.2 with pytest-xdist 3.8 silently stopped grouping (pytest-xdist issue 1386): the
    store was built once per worker. Eight grouped tests on three workers must all see the same one."""
    (tmp_path / "conftest.py").write_text(GROUPED)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    body = "import time\n" + "".join(
        f"def test_{i}(shared):\n    time.sleep(0.2)\n    open('seen', 'a').write(shared + '\\n')\n" for i in range(8)
    )
    (tmp_path / "test_grouped.py").write_text(body)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadgroup", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    ).stdout  # fmt: skip
    workers = (tmp_path / "seen").read_text().split()
    assert len(workers) == 8 and len(set(workers)) == 1, out


ROOT = Path(__file__).resolve().parents[1]
FRESH_CLONE = "tests/test_fresh_clone.py"  # a file with fast tests and one slow one (a short real run)
SLOW_ONE = "test_a_short_run_from_a_clone_under_tmp"


def _pytest(*args: str) -> str:
    """This checkout's pytest as a user types it (its own conftest; no xdist worker's settings)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    return done.stdout + done.stderr


def test_a_bare_pytest_selects_the_fast_tier_and_says_how_to_run_the_rest():
    listed = _pytest("--co", "-q", FRESH_CLONE)
    assert SLOW_ONE not in listed and "test_the_sandbox_view_from_a_clone" in listed, listed
    assert "(1 deselected)" in listed and f"slow tier not run (1 test); {tiers.RUN_SLOW}" in listed, listed
    everything = _pytest("--co", "-q", "--runslow", FRESH_CLONE)
    assert SLOW_ONE in everything and "deselected" not in everything and "slow tier not run" not in everything


def test_a_slow_test_asked_for_without_runslow_is_skipped_with_the_way_to_run_it():
    said = _pytest("-rs", f"{FRESH_CLONE}::{SLOW_ONE}")
    assert "1 skipped" in said and tiers.SLOW_SKIPPED in said, said


def test_each_tier_has_a_ceiling_per_test(request):
    """pytest-timeout fails a hung test (the fast tier's ceiling here; the slow tier's is longer)."""
    assert request.node.get_closest_marker("timeout").args == (tiers.FAST_TIMEOUT_S,)
    assert tiers.FAST_TIMEOUT_S < tiers.SLOW_TIMEOUT_S
