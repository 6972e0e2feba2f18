"""bench.outcome: the paper's run status from the evidence, in its order of precedence."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench import outcome
from bench.result import Audit, Evaluation, Official, Violation


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


def test_a_reason_quoting_the_agents_text_is_one_plain_bounded_line() -> None:
    """The predictor's error is the agent's code's to write: a multi-line traceback with a terminal escape and a
    forged status line must not become extra lines in result.json, the bench.reason tag or a console table."""
    error = "Traceback:\n  boom\r\n\x1b[2J\x1b[32mstatus: success\x1b[0m\u2028# score 0.01\n" + "x" * 5000
    best = Evaluation("best", "/x/ck.pt", "run_1.py", 0.5, "mse", 3, 10.0, 0, Official(error=error))
    decided = outcome.decide([best], Audit(), interrupted=False, timed_out=False, agent_events={}, rejected=[])
    assert decided.status == "failed"
    assert decided.reason.startswith("official evaluation failed: Traceback: boom status: success # score 0.01 xxx")
    assert "\n" not in decided.reason and "\x1b" not in decided.reason and "\u2028" not in decided.reason
    assert len(decided.reason) == 2000 and decided.reason.endswith("\u2026")
    assert replace(decided, reason="a\nb").reason == "a b"  # every later change of the reason too


def test_a_run_capped_by_its_api_budget_is_scored_like_one_whose_time_ran_out() -> None:
    """--max-cost: a checkpoint saved before the cap is the run's score (success, as the paper scores the best
    checkpoint of a run its time budget ended); without one the run failed, even when the agent then waited out its
    time on refused requests (the API budget ended its work: not a timeout, not an infrastructure failure)."""
    capped = {"gateway": {"max_cost_usd": 0.5, "cap_hit": True, "cap_hit_at": 100.0}}
    good = Evaluation("best", "/x/ck.pt", "run_1.py", 0.5, "mse", 3, 10.0, 0, Official(0.4))
    for timed_out in (False, True):
        kw = {"interrupted": False, "timed_out": timed_out, "rejected": []}
        scored = outcome.decide([good], Audit(), agent_events=capped, **kw)
        assert (scored.status, scored.score) == ("success", 0.4)
        assert outcome.decide([], Audit(), agent_events=capped, **kw).status == "failed"
    not_reached = {"gateway": {"max_cost_usd": 0.5, "cap_hit": False}}  # a budget that was not reached: as before
    kw = {"interrupted": False, "timed_out": True, "rejected": []}
    assert outcome.decide([], Audit(), agent_events=not_reached, **kw).status == "timeout"
