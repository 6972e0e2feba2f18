"""How the scorer asks the fresh predictor its probes (bench/scoring/scorer.py's _answers), with a stand-in for the
predictor process: a crash where the model guesses it is probed is a broken contract, not a mere failure. And the
order of the two predictors (issue 29): the prober runs no agent code before the scored predictor has ended."""

from __future__ import annotations

import numpy as np
import pytest

from bench.scoring import checks, scorer
from bench.scoring.job import ScoringJob
from bench.scoring.scorer import ContractViolation, _answers
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


def test_every_probe_is_asked_in_the_plans_order():
    found = checks.plan(FEED, None, checks.draw_secret())
    prober = Prober()
    got, failure = _answers(prober, found)
    assert failure is None
    assert [a is p.inputs for a, p in zip(prober.asked, found.probes, strict=True)] == [True] * len(found.probes)
    assert checks.judge(found, got, [x["x"].mean(axis=1) for x in FEED], "cpu") == []


@pytest.mark.parametrize("returncode", [None, 1])
def test_a_predictor_that_fails_on_a_replayed_request_breaks_the_contract(returncode):
    found = checks.plan(FEED, None, "ab" * 16)
    prober = Prober(3, PredictorError("ValueError: not the scored process"), returncode=returncode)
    with pytest.raises(ContractViolation, match="a fresh predictor failed on a request the scored one answered"):
        _answers(prober, found)


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
    answers, failure = _answers(prober, found)
    assert isinstance(failure, PredictorError) and not isinstance(failure, ContractViolation)
    assert len(answers) == prober.fail_at


class Recorded:
    """A stand-in Session that records, in one shared list, when each predictor starts, runs agent code (its first
    ready/predict: a held one is let go there) and ends."""

    def __init__(self, events: list, eval_dir, checkpoint, script, *, hold=False, **_) -> None:
        self.events, self.name = events, "prober" if hold else "scored"
        self.n_params, self.timed_out, self.proc, self.running = 1, False, Process(None), False
        events.append((self.name, "start"))

    def ready(self):
        if not self.running:
            self.running = True
            self.events.append((self.name, "agent code"))
        return self

    def predict(self, inputs):
        self.ready()
        return next(iter(inputs.values())).astype(np.float32).reshape(len(next(iter(inputs.values()))), -1)

    def close(self):
        if (self.name, "closed") not in self.events:
            self.events.append((self.name, "closed"))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Task:
    EVAL_SPLIT, METRIC = "val", "mse"
    FEED_BATCH_SIZE = 1

    @staticmethod
    def eval_batches(split, data_dir, batch_size):
        return [({"x": np.full((1, 3), i, np.float32)}, np.zeros((1, 3), np.float32)) for i in range(40)]

    @staticmethod
    def score(outputs, targets):
        return {"mse": float(np.mean([np.mean((o - t) ** 2) for o, t in zip(outputs, targets, strict=True)]))}


def _job(folder, secret: str | None = None) -> ScoringJob:
    """One unsandboxed job on ``folder`` (the stand-ins read nothing of it)."""
    return ScoringJob(folder, folder, folder, "run_1.py", checkpoint="c.pt", sandboxed=False, secret=secret)


def test_the_prober_runs_no_agent_code_before_the_scored_predictor_has_ended(tmp_path, monkeypatch):
    events: list = []
    monkeypatch.setattr(scorer, "Session", lambda *a, **k: Recorded(events, *a, **k))
    monkeypatch.setattr(scorer, "load_task_module", lambda task_dir: Task)
    got = scorer.score_checkpoint(_job(tmp_path, secret="ab" * 16))
    assert got["value"] == pytest.approx(np.mean([i * i for i in range(40)]))
    assert events.index(("scored", "closed")) < events.index(("prober", "agent code")), events
    # the prober's process starts once the scored one is ready, so that its imports overlap the feed
    assert events[:3] == [("scored", "start"), ("scored", "agent code"), ("prober", "start")], events


def test_leaving_early_ends_both_predictors(tmp_path, monkeypatch):
    events: list = []

    class Failing(Task):
        @staticmethod
        def eval_batches(split, data_dir, batch_size):
            raise RuntimeError("the labels cannot be read")

    monkeypatch.setattr(scorer, "Session", lambda *a, **k: Recorded(events, *a, **k))
    monkeypatch.setattr(scorer, "load_task_module", lambda task_dir: Failing)
    with pytest.raises(RuntimeError):
        scorer.score_checkpoint(_job(tmp_path))
    assert ("scored", "closed") in events and ("prober", "agent code") not in events, events


def test_a_prober_that_crashes_on_the_batch_probe_after_replays_that_differ_is_disqualified(tmp_path, monkeypatch):
    """The batch probe (a size the feed never had) comes last; a model caught by the replays must not turn its
    disqualification into a mere failure by crashing there: what was answered is judged first."""
    events: list = []

    class Stateful(Recorded):
        def predict(self, inputs):
            out = super().predict(inputs)
            if self.name == "prober" and len(out) > 1:
                raise PredictorError("RuntimeError: not the scored process")
            return out + (1.0 if self.name == "prober" else 0.0)

    monkeypatch.setattr(scorer, "Session", lambda *a, **k: Stateful(events, *a, **k))
    monkeypatch.setattr(scorer, "load_task_module", lambda task_dir: Task)
    with pytest.raises(ContractViolation, match="sent before"):
        scorer.score_checkpoint(_job(tmp_path, secret="cd" * 16))
