"""The predictor's limits (issue 21, deliverable 5), as an attack: a model whose forward takes more memory than the
run allows. It trains and saves within the agent's limit (its forward never runs there), then at evaluation the
predictors' cgroup kills it. The run ends as a failed candidate whose reason names the limit, with the hit in
``result.json``, not as an unexplained 'the predictor ended without an answer (exit -9)'.

The reason and the result.json lines are also checked on the scorer's JSON alone (no sandbox needed).
"""

from __future__ import annotations

import uuid

import pytest

from bench.pipeline import evaluate
from bench.result import Evaluation, Official, RunResult
from bench.runner import RunSpec, run
from bench.sandbox import resource_limits as limits_mod
from bench.sandbox.bwrap import probe
from bench.sandbox.resource_limits import GIB, MIB, Limits
from bench.tracking import schema
from tests.lazy import lazy

mlflow = lazy("mlflow")  # imported at its first use (tests/lazy.py)

# a forward that allocates and touches 4 GiB (a float32 tensor of 2**30 ones); building and saving the model does not
GREEDY = r"""
cat > run_1.py <<'EOF'
import torch, torch.nn as nn
from prepare import PRED_LEN, save_checkpoint

class Greedy(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
    def forward(self, x):
        big = torch.ones(2**30)
        return x[:, -1:, :].repeat(1, PRED_LEN, 1) + self.w + big[0] - 1

def build_model(config):
    return Greedy()

if __name__ == "__main__":
    save_checkpoint(build_model({}), {}, 0.5)
EOF
python run_1.py
"""


@pytest.mark.slow
@pytest.mark.skipif(probe() is not None, reason=f"no usable sandbox here: {probe()}")
def test_a_predictor_that_passes_its_memory_limit_fails_its_candidate_and_says_so(guard):
    if limits_mod.cgroup_support() is None:
        pytest.skip("no cgroup here: without one the predictor's RLIMIT_DATA turns the allocation into a MemoryError")
    own = Limits(memory_bytes=1536 * MIB)  # the predictors' group on a CPU: twice that, 3 GiB (< the forward's 4 GiB)
    result = run(
        RunSpec(
            task=guard.task,
            agent="command",
            campaign=f"adv-plimits-{uuid.uuid4().hex[:6]}",
            budget_s=120,
            grace_s=3,
            options={"command": GREEDY},
            console=False,
            limits=own,
        )
    )
    best = next(e for e in result.evaluations if e.candidate == "best")
    assert not best.official.ok and result.status == "failed", result.reason
    assert best.official.why_not.startswith("the predictor passed its memory limit (3 GiB)"), best.official.why_not
    assert "the predictor passed its memory limit (3 GiB)" in result.reason
    hits = {h["limit"]: h for h in result.limits["hit"]}
    assert hits["predictor-memory"]["oom_kills"] >= 1 and hits["predictor-memory"]["value"] == 3 * GIB, hits
    assert hits["predictor-memory"]["candidates"] == ["best"]
    assert "memory" not in hits  # the agent's own processes stayed within its limit: the forward never ran there
    assert RunResult.load(result.run_dir).limits == result.limits  # on disk as returned
    assert "predictor-memory" in mlflow.get_run(result.mlflow_run_id).data.tags[schema.LIMITS_HIT]  # and in MLflow
    guard.check(result, "no-marker-planted")


def _official(**raw) -> Official:
    return Official.from_dict(raw)


def test_a_failure_with_an_oom_kill_names_the_limit_first():
    killed = {"limit": "memory", "value": 3 * GIB, "oom_kills": 1, "refused": 7}
    result = evaluate._limit_reason(
        {"error": "the predictor ended without an answer (exit -9)", "predictor_limits": [killed]}
    )
    assert (
        result["error"]
        == "the predictor passed its memory limit (3 GiB); the predictor ended without an answer (exit -9)"
    )
    forks = {"limit": "processes", "value": 64, "forks_refused": 3}
    result = evaluate._limit_reason({"error": "boom", "predictor_limits": [forks]})
    assert result["error"] == "the predictor passed its process limit (64 processes and threads); boom"
    # a cgroup counts page cache it reclaimed at the limit as well: without a kill nothing failed for it
    reclaimed = {"limit": "memory", "value": 3 * GIB, "oom_kills": 0, "refused": 12}
    assert evaluate._limit_reason({"error": "boom", "predictor_limits": [reclaimed]})["error"] == "boom"
    assert evaluate._limit_reason({"value": 0.4, "predictor_limits": [killed]}) == {
        "value": 0.4,
        "predictor_limits": [killed],
    }


def test_result_json_gets_one_line_per_predictor_limit_over_all_candidates():
    killed = {"limit": "memory", "value": 3 * GIB, "oom_kills": 1, "refused": 2}
    failed = _official(error="the predictor passed its memory limit (3 GiB); x", predictor_limits=[killed])
    survived = _official(value=0.4, predictor_limits=[{**killed, "oom_kills": 1, "refused": 5}])
    quiet = _official(value=0.5, predictor_limits=[{"limit": "memory", "value": 3 * GIB, "oom_kills": 0, "refused": 9}])
    common = {"path": "/w/c.pt", "script": "run_1.py", "val_score": 0.5, "metric": "mse", "step": 1, "saved_s": 1.0}
    evaluations = [
        Evaluation(candidate="best", official=failed, **common, window=None),
        Evaluation(candidate="window-0", official=failed, **common, window=0),  # the same file: scored once
        Evaluation(candidate="window-1", official=survived, **common, window=1),
        Evaluation(candidate="window-2", official=quiet, **common, window=2),
    ]
    assert evaluate.predictor_hits(evaluations) == [
        {"limit": "predictor-memory", "candidates": ["best"], "value": 3 * GIB, "oom_kills": 2, "refused": 7}
    ]
    assert evaluate.predictor_hits(evaluations[3:]) == []
