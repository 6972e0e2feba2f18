"""How the scorer asks the fresh predictor its probes (bench/scoring/scorer.py's _Answers), with a stand-in for the
predictor process: a crash where the model guesses it is probed is a broken contract, not a mere failure."""

from __future__ import annotations

import numpy as np
import pytest

from bench.scoring import checks
from bench.scoring.scorer import ContractViolation, _Answers
from bench.scoring.session import LoadError, PredictorError

FEED = [{"x": np.full((1, 4, 2), i, np.float32)} for i in range(200)]


class Process:
    def __init__(self, returncode: int | None) -> None:
        self.returncode = returncode

    def poll(self) -> int | None:
        return self.returncode


class Prober:
    """Answers each window with its mean; raises ``error`` at request ``fail_at`` (its process then exited with
    ``returncode``: None still exiting, 1 on its own, -9 killed)."""

    def __init__(self, fail_at=None, error=None, timed_out: bool = False, returncode: int | None = None) -> None:
        self.fail_at, self.error, self.timed_out, self.asked, self.closed = fail_at, error, timed_out, [], False
        self.proc = Process(returncode)

    def predict(self, inputs):
        if len(self.asked) == self.fail_at:
            raise self.error
        self.asked.append(inputs)
        return inputs["x"].mean(axis=1)

    def close(self):
        self.closed = True


@pytest.mark.parametrize("start", [True, False])  # a CPU's thread during the feed, a GPU's asking afterwards
def test_every_probe_is_asked_in_the_plans_order(start):
    found = checks.plan(FEED, None, checks.draw_secret())
    prober = Prober()
    with _Answers(prober, found, start=start) as answers:
        got = answers.all()
    assert [a is p.inputs for a, p in zip(prober.asked, found.probes, strict=True)] == [True] * len(found.probes)
    assert checks.judge(found, got, [x["x"].mean(axis=1) for x in FEED], "cpu") == []


@pytest.mark.parametrize("returncode", [None, 1])
def test_a_predictor_that_fails_on_a_replayed_request_breaks_the_contract(returncode):
    found = checks.plan(FEED, None, "ab" * 16)
    prober = Prober(3, PredictorError("ValueError: not the scored process"), returncode=returncode)
    with _Answers(prober, found, start=True) as answers:
        with pytest.raises(ContractViolation, match="a fresh predictor failed on a request the scored one answered"):
            answers.all()


@pytest.mark.parametrize(
    "prober",
    [
        Prober(3, PredictorError("the evaluation exceeded its time limit"), timed_out=True),
        Prober(0, LoadError("x")),
        Prober(3, PredictorError("the predictor ended without an answer (exit -9)"), returncode=-9),  # a memory kill
    ],
)
def test_timeouts_and_load_errors_stay_errors(prober):
    found = checks.plan(FEED, None, "cd" * 16)
    with _Answers(prober, found, start=True) as answers:
        with pytest.raises(PredictorError) as raised:
            answers.all()
    assert not isinstance(raised.value, ContractViolation)


def test_leaving_early_ends_the_prober():
    found = checks.plan(FEED, None, "ef" * 16)
    prober = Prober()
    with pytest.raises(RuntimeError), _Answers(prober, found, start=True):
        raise RuntimeError("the scored predictor failed")
    assert prober.closed
