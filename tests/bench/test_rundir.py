"""bench.rundir: a run directory's state, read from its files alone, one state of the table per case."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import psutil

from bench.pipeline import state
from bench.rundir import FINAL, PENDING, RUNNING, STALE, STATES, UNFINISHED, RunDir, inspect
from bench.runspec import RunSpec

V1_RESULT = Path(__file__).parent / "fixtures" / "results" / "v1_t6_baseline.json"


def _launched(run_dir: Path, harness_pid: int, harness_started: float) -> None:
    spec = RunSpec("t6", "command", budget_s=60.0, device="cpu").to_dict()
    run_dir.mkdir(parents=True, exist_ok=True)
    st = state.RunState(spec, "tok", 1, 0.0, [], [], None, [], "/d", harness_pid, harness_started)
    state.write(run_dir, st)


def test_each_state_of_the_table_is_told_from_the_files(tmp_path: Path) -> None:
    assert set(STATES) == {FINAL, RUNNING, UNFINISHED, STALE, PENDING}
    run_dir = tmp_path / "t6-command-r1-x"
    assert inspect(run_dir).state == PENDING and not RunDir(run_dir).is_run_dir()
    run_dir.mkdir()
    assert inspect(run_dir).state == STALE  # the harness died before the launch: no run.json

    _launched(run_dir, os.getpid(), psutil.Process().create_time())  # this process is its harness: alive
    assert inspect(run_dir).state == RUNNING and RunDir(run_dir).launched() and RunDir(run_dir).is_run_dir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    _launched(run_dir, gone.pid, 0.0)
    assert inspect(run_dir).state == UNFINISHED

    shutil.copy(V1_RESULT, run_dir / "result.json")
    seen = inspect(run_dir)
    assert (seen.state, seen.status, seen.result.label) == (FINAL, "success", "t6-baseline-r1")
    assert RunDir(run_dir).result() == seen.result


def test_an_unreadable_file_is_final_and_says_why(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text("{not json")
    seen = inspect(run_dir)
    assert (seen.state, seen.status) == (FINAL, "unreadable") and "cannot be read" in seen.note
    (run_dir / "result.json").write_text('{"schema_version": 99}')
    seen = inspect(run_dir)
    assert (seen.state, seen.result) == (FINAL, None) and "upgrade the toolkit" in seen.note
