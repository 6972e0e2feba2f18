"""Evaluate: when the best checkpoint cannot be built or loaded, the next by validation score is scored instead.

The task is the real T6 folder on generated data (conftest.generated_t6); the checkpoints are written by the
task's own ``save_checkpoint`` in the workspace, and the expected score comes from the task's own evaluation
(``prepare.self_check``), not from the harness's scorer.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import outcome
from bench.pipeline import collect, evaluate, workspace
from bench.result import Audit
from bench.tasks import data

BROKEN_BUILD = """

def build_model(config):  # the model this script saved can no longer be built
    raise RuntimeError("build_model needs the GPU it was trained on")
"""

SAVE = """
import sys, torch
sys.argv = [{script!r}]  # save_checkpoint names the script that saved the file
import prepare, train
torch.manual_seed({seed})
print(prepare.save_checkpoint(train.build_model(train.CONFIG), train.CONFIG, {val}))
"""


def _save(ws: Path, script: str, val: float, seed: int) -> Path:
    """A checkpoint written by the task's save_checkpoint, as ``script`` would write it."""
    code = SAVE.format(script=script, seed=seed, val=val)
    out = subprocess.run([sys.executable, "-c", code], cwd=ws, capture_output=True, text=True, check=True)
    return ws / out.stdout.strip().splitlines()[-1]


def _expected(task, data_dir: Path, checkpoint: Path, script: Path) -> float:
    """The checkpoint's score by the task's own evaluation (prepare.self_check on the prepared test split)."""
    code = (
        "import json, sys, prepare; "
        f"print(json.dumps(prepare.self_check({str(checkpoint)!r}, {str(script)!r}, data_dir={str(data_dir)!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=task.folder, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["value"]


@pytest.mark.slow  # three T6 checkpoints saved, checked and scored in sandboxes: 1-3 min on 2 cores
def test_an_unloadable_best_is_skipped_and_the_next_checkpoint_by_validation_is_scored(generated_t6):
    task = generated_t6
    data_dir = data.prepare(task, progress=False)
    ws = workspace.create(task, data_dir, campaign="fallback", agent="command", repeat=1)
    started = time.time() - 2
    for name in ("run_1.py", "run_2.py", "run_3.py"):
        shutil.copyfile(ws.path / "train.py", ws.path / name)
    with open(ws.path / "run_3.py", "a") as f:
        f.write(BROKEN_BUILD)
    unloadable = _save(ws.path, "run_3.py", 0.10, seed=3)  # best by validation, but its build_model raises
    second = _save(ws.path, "run_2.py", 0.20, seed=2)  # the next by validation
    _save(ws.path, "run_1.py", 0.30, seed=1)  # third: neither the best nor any window's best

    scripts = frozenset({"run_1.py", "run_2.py", "run_3.py"})
    given = collect.CollectInput(ws.checkpoints, started, task.metric, task.direction, 3600, scripts=scripts)
    found = collect.collect(given)
    assert found.selection.best.path == unloadable
    assert [c.path for c in found.selection.windows.values()] == [unloadable]
    evaluations = evaluate.evaluate_candidates(evaluate.EvaluationInput(ws, found.selection, data_dir, console=False))

    labels = [(e.candidate, Path(e.path).name) for e in evaluations]
    assert labels == [("best", second.name), ("best-unloadable", unloadable.name), ("window-0", unloadable.name)]
    failed = evaluations[1].official
    assert failed.raw.get("unloadable") is True and "violation" not in failed.raw
    assert "build_model needs the GPU" in failed.error
    best = evaluations[0]
    assert best.script == "run_2.py" and best.val_score == pytest.approx(0.20)
    expected = _expected(task, data_dir, second, ws.path / "run_2.py")
    assert best.official.ok and best.official.value == pytest.approx(expected, rel=1e-4)
    # the pages its predictors were the first to load were dropped (a cgroup here), or the record says why not
    from bench.sandbox.resource_limits import cgroup_support

    said = best.official.raw["page_cache"]
    assert (said == "dropped") if cgroup_support() else said.startswith("no cgroup"), said

    decided = outcome.decide(evaluations, Audit(), interrupted=False, timed_out=False, agent_events={}, rejected=[])
    assert decided.status == "success" and decided.score == pytest.approx(expected, rel=1e-4)
    assert decided.reason.startswith(f"best checkpoint {unloadable.name} could not be loaded (")
    assert "build_model needs the GPU" in decided.reason
    assert decided.reason.endswith(f"; scored the next candidate {second.name} from run_2.py")


def _ck(name: str, val: float) -> collect.Checkpoint:
    return collect.Checkpoint(Path(name), "run_1.py", val, "mse", None, 60.0)


@pytest.mark.parametrize(
    ("results", "scored", "status"),
    [
        # a broken forward contract is not a load failure: no other checkpoint is tried (the audit disqualifies)
        ({"a": {"error": "forward contract broken", "violation": "x"}}, ["a"], "failed"),
        # the prepared data changed: no checkpoint escapes that
        ({"a": {"error": "the prepared data changed"}}, ["a"], "failed"),
        ({"a": {"error": "ValueError: no fit", "unloadable": True}, "b": {"value": 0.5}}, ["a", "b"], "success"),
        # at most MAX_FALLBACKS more, then the run fails naming the best and the last one tried
        (
            {k: {"error": "AttributeError: no build_model", "unloadable": True} for k in "abcdefgh"},
            [*"abcdef"],
            "failed",
        ),
    ],
)
def test_only_a_load_failure_moves_on_to_the_next_checkpoint(results: dict, scored: list, status: str):
    from bench.result import Official

    ranked = tuple(_ck(k, i / 10) for i, k in enumerate("abcdefgh"))
    asked = []

    def score(label: str, ckpt: collect.Checkpoint) -> Official:
        asked.append(ckpt.path.name)
        return Official.from_dict(results.get(ckpt.path.name, {"value": 9.0}))

    evaluations = evaluate._best_that_loads(ranked[0], ranked, score)
    assert asked == scored and evaluations[0].candidate == "best" and evaluations[0].path == scored[-1]
    assert [e.candidate for e in evaluations[1:]] == ["best-unloadable"] * (len(scored) - 1)
    decided = outcome.decide(evaluations, Audit(), interrupted=False, timed_out=False, agent_events={}, rejected=[])
    assert decided.status == status
    if len(scored) > 2:
        assert decided.reason == (
            "official evaluation failed: best checkpoint a could not be loaded (AttributeError: no build_model); "
            "the last candidate tried, f, failed too: AttributeError: no build_model"
        )
