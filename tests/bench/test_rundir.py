"""bench.rundir: a run directory's state, read from its files alone, one state of the table per case."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import psutil

from bench.pipeline import state
from bench.rundir import FINAL, PENDING, RUNNING, STALE, STATES, UNFINISHED, RunDir, inspect
from bench.runspec import RunSpec

RESULT = Path(__file__).parent / "fixtures" / "results" / "v3_t6_baseline.json"


def _launched(run_dir: Path, harness_pid: int, harness_started: float) -> None:
    spec = RunSpec("t6", "command", budget_s=60.0, device="cpu")
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

    shutil.copy(RESULT, run_dir / "result.json")
    seen = inspect(run_dir)
    assert (seen.state, seen.status, seen.result.run.label) == (FINAL, "success", "t6-baseline-r1")
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


def test_a_run_of_an_older_toolkits_format_is_final_never_redone_nor_overwritten(tmp_path: Path, capsys) -> None:
    """0.1's format reset: a run directory whose result.json (or, unfinished, run.json) an older toolkit wrote is
    final: its note is the one-line refusal, and neither `bench run --resume` nor `bench record` touches it."""
    from bench.cli import main

    old_result = RESULT.with_name("v2_t6_baseline.json")
    done = tmp_path / "done"
    done.mkdir()
    shutil.copy(old_result, done / "result.json")
    flat = {"task": "t6", "agent": "command", "budget_s": 60, "token": "tok", "agent_pid": 1, "version": 1}
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "run.json").write_text(json.dumps(flat))
    before = {d: {f.name: f.read_bytes() for f in d.iterdir()} for d in (done, unfinished)}
    for run_dir, said in ((done, "schema_version 2: written by an older toolkit"), (unfinished, "has version 1")):
        seen = inspect(run_dir)
        assert (seen.state, seen.status, seen.result) == (FINAL, "unreadable", None)
        assert said in seen.note and "\n" not in seen.note, seen.note
        assert main(["run", "--resume", str(run_dir)]) != 0
        assert main(["record", str(run_dir)]) != 0
        out, err = capsys.readouterr()
        assert said in err and "Traceback" not in err and "finishing" not in out, (out, err)
    assert {d: {f.name: f.read_bytes() for f in d.iterdir()} for d in (done, unfinished)} == before  # untouched


def test_a_new_bench_run_takes_the_repeat_after_the_campaigns_last(tmp_path: Path, monkeypatch) -> None:
    """Two bench runs of one agent on one task into one campaign are r1 and r2: the repeat is one above the highest
    a run directory of that agent and task holds (any state), counted from the folders' names as
    bench.pipeline.workspace.create writes them; other agents and tasks do not count."""
    from bench import rundir
    from bench.cli import _first_repeat, build_parser

    folder = tmp_path / "workspaces" / "mine"
    assert rundir.next_repeat(folder, "t6", "baseline") == 1  # no campaign folder yet
    for name in (
        "t6-baseline-r1-20260101-120000",
        "t6-baseline-r3-20260101-130000-2",  # a second run in the same second
        "t6-claude-code-r5-20260101-120000",  # another agent
        "t6-baseline-claude-r9-20260101-120000",  # not baseline's: an agent named baseline-claude
        "t1-baseline-r7-20260101-120000",  # another task
        "t16-baseline-r8-20260101-120000",  # a task whose id starts like t1's
    ):
        (folder / name).mkdir(parents=True)
    (folder / "t6-baseline-r11-notes.txt").write_text("a file, not a run directory")
    assert rundir.next_repeat(folder, "t6", "baseline") == 4
    assert rundir.next_repeat(folder, "t6", "claude-code") == 6
    assert rundir.next_repeat(folder, "t1", "baseline") == 8
    assert rundir.next_repeat(folder, "t5", "baseline") == 1

    monkeypatch.setenv("BENCH_WORKSPACES_DIR", str(tmp_path / "workspaces"))
    run = ["run", "--agent", "baseline", "--task", "t6", "--campaign", "mine"]
    assert _first_repeat(build_parser().parse_args(run), "t6") == 4
    assert _first_repeat(build_parser().parse_args([*run, "--first-repeat", "2"]), "t6") == 2  # asked: as given
    assert _first_repeat(build_parser().parse_args([*run, "--resume"]), "t6") == 1  # the grid skips finished runs
