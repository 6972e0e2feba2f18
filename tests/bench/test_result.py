"""bench.result: the typed run result, its one format (schema_version 3) and its JSON round trip.

The version-3 file is the version-2 fixture written again by the version-3 code (RunResult.load, then write, at
d1fdb64), with ``hardware`` and ``software`` set by hand as the current harness records them; the version-2 file is
a real result.json of `bench run --agent baseline --task t6` written again by the version-2 code, the version-1 file
the real one written by the harness before RunResult existed (commit 4bf7546). Files of versions 1 and 2 are
refused (0.1's format reset, CHANGELOG.md): each with one line naming the version and what to do.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bench.errors import BenchError
from bench.result import SCHEMA_VERSION, ResultError, RunResult
from bench.tasks import Direction

V3 = Path(__file__).parent / "fixtures" / "results" / "v3_t6_baseline.json"
V2 = V3.with_name("v2_t6_baseline.json")
V1 = V3.with_name("v1_t6_baseline.json")
REDO = "re-run it with this toolkit, or read it with the toolkit version that wrote it"


def test_reads_the_current_format() -> None:
    r = RunResult.load(V3)
    run = r.run
    assert (run.task, run.agent, run.model, run.campaign, run.repeat) == ("t6", "baseline", None, "v1", 1)
    assert (run.budget_s, run.grace_s, run.device, run.label) == (2400.0, 30.0, "cpu", "t6-baseline-r1")
    assert (r.status, r.direction, run.sandbox) == ("success", Direction.MIN, True)
    assert r.score == pytest.approx(0.37824676024207543)
    assert r.outcome.best_val_score == pytest.approx(0.659064458104593)
    assert r.audit.passed and r.audit.locked_sha256 == {
        "prepare.py": "24d60edf5b0a50ac1a3d5f3b4d681ecab3b03e69e8d2772f10d8f43df4b6891d"
    }
    assert r.best is not None and r.best.script == "train.py" and r.best.step == 320 and r.best.official.ok
    assert [e.candidate for e in r.evaluations][0] == "best"
    assert r.scripts["launched"] == 1 and r.checkpoints_found == 5
    assert run.task_source["sha256"] == "ab" * 32 and r.hardware == "cpu (AMD EPYC, 2 cores)"


def test_round_trip_writes_the_one_format(tmp_path: Path) -> None:
    r = RunResult.load(V3)
    written = r.write(tmp_path / "result.json")
    raw = json.loads(written.read_text())
    assert raw == json.loads(V3.read_text())  # byte for byte the same keys and values as the file read
    assert raw["schema_version"] == SCHEMA_VERSION == 3
    assert raw["outcome"]["status"] == "success" and "status" not in raw  # nested
    assert raw["run"]["task"] == "t6" and raw["run"]["agent"] == "baseline" and "task" not in raw  # embedded
    again = RunResult.load(tmp_path)  # a run directory works too
    assert again == r
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]  # the temporary file was renamed away


@pytest.mark.parametrize(
    ("fixture", "said"),
    [
        (V1, "has no schema_version: written before 0.1's format reset"),
        (V2, "has schema_version 2: written by an older toolkit (this one reads 3 only)"),
    ],
)
def test_a_file_of_an_older_toolkit_is_refused_in_one_line(fixture: Path, said: str, tmp_path: Path) -> None:
    before = fixture.read_bytes()
    with pytest.raises(ResultError) as e:
        RunResult.load(fixture)
    assert str(e.value) == f"{fixture} {said}; {REDO}"
    assert "\n" not in str(e.value) and isinstance(e.value, BenchError) and e.value.exit_code == 1
    assert fixture.read_bytes() == before  # read, never rewritten


def test_a_file_of_the_current_version_lacking_a_key_is_refused(tmp_path: Path) -> None:
    raw = json.loads(V3.read_text())
    del raw["software"], raw["hostile_inputs"]
    (tmp_path / "result.json").write_text(json.dumps(raw))
    with pytest.raises(ResultError, match=r"lacks hostile_inputs, software: written by an earlier build"):
        RunResult.load(tmp_path)


def test_a_newer_schema_or_broken_file_says_what_to_do(tmp_path: Path) -> None:
    newer = {**json.loads(V3.read_text()), "schema_version": SCHEMA_VERSION + 1}
    (tmp_path / "result.json").write_text(json.dumps(newer))
    with pytest.raises(ResultError, match="upgrade the toolkit"):
        RunResult.load(tmp_path)
    (tmp_path / "result.json").write_text('{"task": "t6", ')
    with pytest.raises(ResultError, match="not valid JSON"):
        RunResult.load(tmp_path)
    with pytest.raises(ResultError, match="no result.json"):
        RunResult.load(tmp_path / "nowhere")
    with pytest.raises(ResultError, match="unknown run status"):
        dataclasses.replace(RunResult.load(V3).outcome, status="great")
    mistyped = {**json.loads(V3.read_text()), "direction": "sideways"}
    (tmp_path / "result.json").write_text(json.dumps(mistyped))
    with pytest.raises(ResultError, match="lacks or mistypes a field"):
        RunResult.load(tmp_path)


def test_bench_record_on_a_folder_without_a_result_says_so(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from bench.cli import main

    assert main(["record", str(tmp_path)]) == 1
    assert "no result.json" in capsys.readouterr().err


def test_bench_record_refuses_an_older_toolkits_result_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from bench.cli import main

    (tmp_path / "result.json").write_bytes(V2.read_bytes())
    assert main(["record", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "schema_version 2: written by an older toolkit" in err and REDO in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert (tmp_path / "result.json").read_bytes() == V2.read_bytes()  # left as it was
