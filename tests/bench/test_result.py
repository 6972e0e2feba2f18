"""bench.result: the typed run result, its JSON round trip, and reading result.json files of schema version 1.

The version-1 file is a real result.json written by the harness before RunResult existed (commit 4bf7546,
`bench run --agent baseline --task t6` on the mirror data); its values below are read from the file by eye.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bench.result import SCHEMA_VERSION, ResultError, RunResult
from bench.tasks import Direction

V1 = Path(__file__).parent / "fixtures" / "results" / "v1_t6_baseline.json"
# version 2 (the run's description flat at the top level): the v1 file written again by the version-2 code
# (bench/result.py at ac76d85), with the limits, task source and sandbox a version-2 run recorded set by hand
V2 = V1.with_name("v2_t6_baseline.json")


def test_reads_a_version_1_result_json() -> None:
    r = RunResult.load(V1)
    assert (r.task, r.agent, r.repeat, r.status, r.direction) == ("t6", "baseline", 1, "success", Direction.MIN)
    assert r.score == pytest.approx(0.37824676024207543)
    assert r.outcome.best_val_score == pytest.approx(0.659064458104593)
    assert r.audit.passed and r.audit.locked_sha256 == {
        "prepare.py": "24d60edf5b0a50ac1a3d5f3b4d681ecab3b03e69e8d2772f10d8f43df4b6891d"
    }
    assert r.best is not None and r.best.script == "train.py" and r.best.step == 320 and r.best.official.ok
    assert [e.candidate for e in r.evaluations][0] == "best"
    assert r.scripts["launched"] == 1 and r.checkpoints_found == 5 and r.label == "t6-baseline-r1"


def test_round_trip_writes_the_current_version(tmp_path: Path) -> None:
    r = RunResult.load(V1)
    written = r.write(tmp_path / "result.json")
    raw = json.loads(written.read_text())
    assert raw["schema_version"] == SCHEMA_VERSION == 3
    assert raw["outcome"]["status"] == "success" and "status" not in raw  # nested, not flat any more
    assert raw["run"]["task"] == "t6" and raw["run"]["agent"] == "baseline" and "task" not in raw  # embedded
    assert raw["direction"] == "min" and raw["audit"]["violations"] == []
    again = RunResult.load(tmp_path)  # a run directory works too
    assert again == r
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]  # the temporary file was renamed away


def test_a_newer_schema_or_broken_file_says_what_to_do(tmp_path: Path) -> None:
    newer = {**json.loads(V1.read_text()), "schema_version": SCHEMA_VERSION + 1}
    (tmp_path / "result.json").write_text(json.dumps(newer))
    with pytest.raises(ResultError, match="upgrade the toolkit"):
        RunResult.load(tmp_path)
    (tmp_path / "result.json").write_text('{"task": "t6", ')
    with pytest.raises(ResultError, match="not valid JSON"):
        RunResult.load(tmp_path)
    with pytest.raises(ResultError, match="no result.json"):
        RunResult.load(tmp_path / "nowhere")
    with pytest.raises(ResultError, match="unknown run status"):
        dataclasses.replace(RunResult.load(V1).outcome, status="great")


def test_bench_record_on_a_folder_without_a_result_says_so(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from bench.cli import main

    assert main(["record", str(tmp_path)]) == 1
    assert "no result.json" in capsys.readouterr().err


def test_reads_a_version_2_result_json_into_the_embedded_run_description() -> None:
    raw = json.loads(V2.read_text())
    assert raw["schema_version"] == 2 and raw["task"] == "t6"  # the layout this reads: flat
    r = RunResult.load(V2)
    assert (r.task, r.agent, r.model, r.campaign, r.repeat) == ("t6", "baseline", None, "v1", 1)
    assert (r.budget_s, r.grace_s, r.device, r.label) == (2400.0, 30.0, "cpu", "t6-baseline-r1")
    assert r.run.limits.to_dict() == raw["limits"]["settings"]  # the limits' settings become the description's
    assert r.run.sandbox is True and r.task_source["sha256"] == "ab" * 32
    assert RunResult.from_dict(r.to_dict()) == r  # and round-trips as version 3
