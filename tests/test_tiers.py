"""The fast tier's guard (tests/tiers.py): what counts as a whole benchmark run, and that one is refused in a
test not marked slow (this one)."""

from __future__ import annotations

import subprocess
import sys

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
