"""Every step after the launch takes one typed input, built in one place: the runner's ``Run``.

An option a step needs is a field of its input and a line of the runner's builder, not a new parameter threaded
through a signature and every test that calls it. These tests pin that shape: each step's entry takes exactly one
positional argument of its frozen dataclass (read with ``inspect``), and the runner sets every field of each input
from the run (the expected values are the ones this test gave the run, not read back from the builder).
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from pathlib import Path

import pytest

from bench import runner
from bench.agents import get_agent
from bench.evidence import Arrival
from bench.pipeline import audit, collect, evaluate, workspace
from bench.pipeline.codetime import Index
from bench.pipeline.watch import Watched
from bench.result import Evaluation, Official
from bench.runspec import RunSpec
from bench.sandbox.resource_limits import Limits
from bench.scoring import scorer
from bench.scoring.job import ScoringJob

STEPS = [
    (collect.collect, collect.CollectInput),
    (evaluate.evaluate_candidates, evaluate.EvaluationInput),
    (evaluate.evaluate, ScoringJob),
    (audit.audit, audit.AuditInput),
    (scorer.score_checkpoint, ScoringJob),
]


@pytest.mark.parametrize(("step", "given"), STEPS, ids=[f"{s.__module__}.{s.__name__}" for s, _ in STEPS])
def test_each_step_takes_one_positional_input_of_its_frozen_dataclass(step, given) -> None:
    params = list(inspect.signature(step).parameters.values())
    assert len(params) == 1, f"{step.__name__} takes {[p.name for p in params]}: give it one input instead"
    (param,) = params
    assert param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD) and param.default is param.empty
    assert typing.get_type_hints(step)[param.name] is given
    assert dataclasses.is_dataclass(given) and given.__dataclass_params__.frozen


def _run(tmp_path: Path) -> tuple[runner.Run, runner.Ended]:
    """A run of Codex (an agent whose CLI asks hosts of its own) on T6, with values the defaults never have."""
    spec = RunSpec(
        "t6",
        "codex",
        budget_s=600.0,
        grace_s=20.0,
        device="cuda",
        sandbox=False,
        limits=Limits(memory_bytes=3 << 30, processes=77, eval_s=123.0),
        console=False,
    )
    ws = workspace.Workspace(tmp_path / "run", spec.resolve_task())
    run = runner.Run(spec, ws, tmp_path / "data", [], {"prepare.py": "a" * 64}, writer=None, relay=None)
    arrival = Arrival(first_seen=1001.0, at=1002.0, identity=None)
    ended = runner.Ended(
        started_at=1000.0,
        argv=["codex", "exec", "--json"],
        endpoints=(),  # offline: no endpoint declared
        sandboxed=False,
        watched=Watched(30.0, 0, False, False),
        arrivals={ws.checkpoints / "a.pt": arrival},
        launches=[],
        agent_events={},
    )
    return run, ended


def test_the_runner_sets_every_field_of_each_input_from_the_run(tmp_path) -> None:
    run, ended = _run(tmp_path)
    ws, spec = run.ws, run.spec
    ckpt = collect.Checkpoint(ws.checkpoints / "a.pt", "train.py", 0.5, "mse", None, 2.0)
    rejected = [collect.Rejected(ws.checkpoints / "b.pt", "not a checkpoint")]
    collected = collect.Collected([ckpt], rejected, collect.select([ckpt], spec.resolve_task().direction))
    official = Official.from_dict({"value": 0.4})
    scored = [Evaluation("best", str(ckpt.path), "train.py", 0.5, "mse", None, 2.0, 0, official)]

    got = run.collect_input(ended, {"train.py", "run_1.py"})
    want = {
        "directory": ws.checkpoints,
        "started_at": 1000.0,
        "metric": "mse",
        "direction": spec.resolve_task().direction,
        "deadline_s": 620.0,  # budget + grace
        "arrivals": ended.arrivals,
        "scripts": frozenset({"train.py", "run_1.py"}),
    }
    assert isinstance(got.code, Index) and got.code.workspace == ws.path
    assert {f.name for f in dataclasses.fields(got)} == {*want, "code"}, "a new field: say here where the run sets it"
    assert {k: getattr(got, k) for k in want} == want

    got = run.evaluation_input(collected)
    want = {
        "ws": ws,
        "selection": collected.selection,
        "data_dir": run.data_dir,
        "device": "cuda",
        "console": False,
        "sandboxed": False,
        "budget_s": 123.0,  # the run's limits.eval_s
        "limits": Limits(memory_bytes=3 << 30, processes=77, eval_s=123.0),
        "label": "t6-codex-r1",
    }
    assert {f.name for f in dataclasses.fields(got)} == set(want), "a new field: say here where the run sets it"
    assert {k: getattr(got, k) for k in want} == want

    got = run.audit_input(ended, collected, scored)
    want = {
        "ws": ws,
        "locked_sha256": {"prepare.py": "a" * 64},
        "evaluations": tuple(scored),
        "started_at": 1000.0,
        "budget_s": 600.0,
        "agent_argv": ("codex", "exec", "--json"),
        "rejected": tuple(collected.rejected),
        "offline": True,
        "own_hosts": get_agent("codex").own_hosts,
        "keep": True,  # the run writes evidence/audit.json; bench verify does not
        "recorded_workspace": None,  # the run is judged where it runs
    }
    assert {f.name for f in dataclasses.fields(got)} == set(want), "a new field: say here where the run sets it"
    assert {k: getattr(got, k) for k in want} == want
    assert "chatgpt.com" in got.own_hosts


def test_an_input_cannot_be_changed_on_its_way_through_a_step(tmp_path) -> None:
    run, ended = _run(tmp_path)
    given = run.collect_input(ended, {"train.py"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        given.deadline_s = 1e9  # type: ignore[misc]
