"""bench.result: the typed run result, its JSON round trip, and reading result.json files of schema version 1.

The version-1 file is a real result.json written by the harness before RunResult existed (commit 4bf7546,
`bench run --agent baseline --task t6` on the mirror data); its values below are read from the file by eye.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bench import outcome
from bench.result import SCHEMA_VERSION, Audit, Evaluation, Official, ResultError, RunResult, Violation
from bench.tasks import Direction

V1 = Path(__file__).parent / "fixtures" / "results" / "v1_t6_baseline.json"


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
    assert raw["schema_version"] == SCHEMA_VERSION == 2
    assert raw["outcome"]["status"] == "success" and "status" not in raw  # nested, not flat any more
    assert raw["direction"] == "min" and raw["audit"]["violations"] == []
    again = RunResult.load(tmp_path)  # a run directory works too
    assert again == r
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]  # the temporary file was renamed away


def test_an_evaluation_with_a_null_value_and_no_error_is_a_failure_not_a_crash() -> None:
    # prepare.py --eval printed {"value": null}: the old dict code raised KeyError('error') here
    official = Official.from_dict({"task": "t6", "value": None})
    assert not official.ok and official.why_not == "prepare.py --eval printed no score"
    best = Evaluation("best", "/x/ck.pt", "run_1.py", 0.5, "mse", 3, 10.0, 0, official)
    decided = outcome.decide([best], Audit(), interrupted=False, timed_out=False, agent_events={}, rejected=[])
    assert (decided.status, decided.score) == ("failed", None)
    assert decided.reason == "official evaluation failed: prepare.py --eval printed no score"


@pytest.mark.parametrize(
    ("raw", "ok"),
    [({"value": 0.3}, True), ({"value": float("nan")}, False), ({"value": "0.3x"}, False), ({"error": "boom"}, False)],
)
def test_official_ok_needs_a_finite_number_and_no_error(raw: dict, ok: bool) -> None:
    assert Official.from_dict(raw).ok is ok


def test_outcome_order_violation_beats_a_score_and_refusal_needs_no_checkpoint() -> None:
    good = Evaluation("best", "/x/ck.pt", "run_1.py", 0.5, "mse", 3, 10.0, 0, Official(0.4))
    broken = Audit({"prepare.py": "a"}, (Violation(1, "the locked prepare.py was modified"),))
    kw = {"interrupted": False, "timed_out": False, "rejected": []}
    assert outcome.decide([good], broken, agent_events={}, **kw).status == "disqualified"
    assert outcome.decide([good], Audit(), agent_events={"refused": True}, **kw).status == "success"
    assert outcome.decide([], Audit(), agent_events={"refused": True}, **kw).status == "refused"
    timeout = outcome.decide([], Audit(), agent_events={}, interrupted=False, timed_out=True, rejected=[])
    assert timeout.status == "timeout" and timeout.reason == "no scoreable checkpoint in checkpoints/"
    rejected = [{"path": "/x/a.pt", "reason": "unreadable checkpoint"}]
    failed = outcome.decide([], Audit(), agent_events={"error": "429"}, interrupted=False, timed_out=False,
                            rejected=rejected)  # fmt: skip
    assert failed.reason == (
        "no scoreable checkpoint in checkpoints/; the agent reported an error: 429 (1 rejected: unreadable checkpoint)"
    )


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
