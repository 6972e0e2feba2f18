"""Limits on every run (issue 21, deliverable 5) and agent-chosen names in Markdown (deliverable 6), as attacks.

Each case is a scripted `command` agent run end to end through `bench.runner.run` on the real T6 folder with
generated data, with small limits set through the run's :class:`~bench.sandbox.resource_limits.Limits` (the flags of
``bench run``) so that each case is fast. Every case ends with the run recorded (result.json, MLflow) and the
limit that was hit named in ``result.json``; the harness (this test process) survives with its memory bounded.
"""

from __future__ import annotations

import html
import re
import time
import uuid
from pathlib import Path

import pytest

from bench.pipeline import collect
from bench.result import RunResult
from bench.runner import RunSpec, run
from bench.sandbox import resource_limits as limits_mod
from bench.sandbox.bwrap import probe
from bench.sandbox.resource_limits import Limits
from bench.tracking import schema
from tests.bench.adversary import HONEST, PeakRSS
from tests.lazy import lazy

mlflow = lazy("mlflow")  # imported at its first use (tests/lazy.py)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(probe() is not None, reason=f"no usable sandbox here: {probe()}"),
]

MB = 2**20


def _run(task, command: str, limits: Limits, budget_s: float = 120) -> RunResult:
    return run(
        RunSpec(
            task=task,
            agent="command",
            campaign=f"adv-limits-{uuid.uuid4().hex[:6]}",
            budget_s=budget_s,
            grace_s=3,
            options={"command": command},
            console=False,
            limits=limits,
        )
    )


def _hits(result: RunResult) -> dict[str, dict]:
    return {h["limit"]: h for h in result.limits.get("hit", [])}


def _cgroup() -> bool:
    """Whether this machine lets the harness make a cgroup with memory and pids limits (else rlimits only)."""
    return limits_mod.cgroup_support() is not None


# --- memory -------------------------------------------------------------------------------------------------------
HOG = """python -c 'b = bytearray(3 * 2**30); print("HOG SURVIVED", len(b))' > hog.log 2>&1
echo "hog exit $?" >> hog.log
"""


def test_a_memory_hog_dies_and_the_run_is_recorded_with_the_limit_hit(guard):
    result = _run(guard.task, HOG + HONEST, Limits(memory_bytes=1536 * MB))
    hog = (Path(result.workspace) / "hog.log").read_text()
    assert "HOG SURVIVED" not in hog, hog  # 3 GiB was never granted under a 1.5 GiB limit
    assert result.status == "success", result.reason  # the honest training after it ran under the same limit
    assert result.limits["settings"]["memory_bytes"] == 1536 * MB
    if _cgroup():  # a cgroup counts what it refused; rlimits leave only the hog's MemoryError in its log
        assert "memory" in _hits(result), result.limits
    else:
        assert "MemoryError" in hog, hog


# --- output ---------------------------------------------------------------------------------------------------------
HUGE_LINE = "head -c 600000000 /dev/zero | tr '\\0' x\necho\necho AFTER-THE-LINE\n"


def test_a_600_mb_output_line_leaves_the_harness_memory_bounded_and_the_log_capped(guard):
    with PeakRSS(every=0.05) as mem:
        result = _run(guard.task, HUGE_LINE + HONEST, Limits(log_bytes=4 * MB))
    grew = (mem.peak - mem.base) / MB
    print(f"harness RSS grew by {grew:.0f} MB during the run (peak {mem.peak / MB:.0f} MB)")
    assert grew < 300, f"the harness grew by {grew:.0f} MB while reading a 600 MB line"
    log = Path(result.run_dir) / "agent.log"
    assert log.stat().st_size <= 4 * MB + 4096, log.stat().st_size
    text = log.read_text(errors="replace")
    assert "[bench] line cut at" in text  # the cut is noted in the log itself
    hit = _hits(result)
    assert "line" in hit and hit["line"]["dropped_bytes"] >= 590_000_000, result.limits
    assert "AFTER-THE-LINE" in text  # the lines after the long one are still read and kept
    assert result.status == "success", result.reason


# --- evaluation time ------------------------------------------------------------------------------------------------
SLOW = r"""
cat > run_1.py <<'EOF'
import time, torch, torch.nn as nn
from prepare import PRED_LEN, save_checkpoint

class Slow(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
    def forward(self, x):
        time.sleep(3600)
        return x[:, -1:, :].repeat(1, PRED_LEN, 1) + self.w

def build_model(config):
    return Slow()

if __name__ == "__main__":
    for i in range(4):
        save_checkpoint(build_model({}), {}, 1.0 - i / 10)
        time.sleep(6)
EOF
python run_1.py
"""


def test_a_slow_predictor_with_several_candidates_gets_one_evaluation_budget(guard, monkeypatch):
    monkeypatch.setattr(collect, "WINDOW_S", 5.0)  # 5 s windows: four checkpoints, four distinct candidates
    from bench.pipeline import evaluate

    spent: list[float] = []
    real = evaluate.evaluate_candidates

    def timed(given):
        t0 = time.monotonic()
        try:
            return real(given)
        finally:
            spent.append(time.monotonic() - t0)

    monkeypatch.setattr(evaluate, "evaluate_candidates", timed)
    result = _run(guard.task, SLOW, Limits(eval_s=40))
    assert len({e.path for e in result.evaluations}) >= 3, result.evaluations  # several distinct candidates
    # one budget for all of them: 40 s, plus at most one scorer's minute to report (never 40 s per candidate)
    assert spent[0] < 40 + 75, spent
    assert result.status == "failed" and result.score is None, result.reason
    assert "evaluation" in _hits(result), result.limits
    assert all(not e.official.ok for e in result.evaluations)
    assert any("evaluation budget" in e.official.why_not for e in result.evaluations), result.evaluations


# --- disk -----------------------------------------------------------------------------------------------------------
FILL = "dd if=/dev/zero of=filler.bin bs=1M count=300 2>/dev/null\nsleep 60\n"


def test_a_workspace_that_grows_past_its_limit_ends_the_run(guard):
    t0 = time.monotonic()
    result = _run(guard.task, HONEST + FILL, Limits(workspace_bytes=150 * MB))
    hit = _hits(result)
    assert "workspace" in hit and hit["workspace"]["ended"] is True, result.limits
    assert hit["workspace"]["bytes"] > 150 * MB
    assert result.wall_time_s < 60, result.wall_time_s  # ended, not left to sleep out its minute
    assert "workspace" in result.reason, result.reason
    assert result.status == "success", result.reason  # the checkpoint it saved before still counts
    assert time.monotonic() - t0 < 240


# --- processes ------------------------------------------------------------------------------------------------------
BOMB = """python - > bomb.log 2>&1 <<'EOF'
import os, time
n = 0
for i in range(2000):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(8)
        os._exit(0)
    n += 1
print("forked", n, flush=True)
EOF
"""


def test_a_fork_bomb_is_held_by_the_process_limit(guard):
    if not _cgroup():
        pytest.skip("no cgroup here: RLIMIT_NPROC does not bind root, so this machine has no process limit to test")
    result = _run(guard.task, BOMB + "sleep 9\n" + HONEST, Limits(processes=200))
    forked = int(re.search(r"forked (\d+)", (Path(result.workspace) / "bomb.log").read_text()).group(1))
    assert forked < 200, forked
    assert "processes" in _hits(result), result.limits
    assert result.status == "success", result.reason


# --- names ----------------------------------------------------------------------------------------------------------
# the issue's `x](http://evil)<img ...>` less its slashes, which no file name can hold
HOSTILE_NAME = "x](javascript:alert(1))<img src=x onerror=alert(1)>|`.md.pt"
NAMED = r"""
cat > run_1.py <<'EOF'
import torch, torch.nn as nn
from prepare import PRED_LEN, save_checkpoint

class Last(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
    def forward(self, x):
        return x[:, -1:, :].repeat(1, PRED_LEN, 1) + self.w

def build_model(config):
    return Last()

if __name__ == "__main__":
    save_checkpoint(build_model({}), {}, 0.5, path="checkpoints/NAME")
EOF
python run_1.py
""".replace("NAME", HOSTILE_NAME)


def test_a_hostile_checkpoint_name_is_escaped_in_the_run_description(guard):
    result = _run(guard.task, NAMED, Limits())
    assert result.status == "success", result.reason
    assert HOSTILE_NAME in result.reason  # result.json keeps the name as it was
    note = mlflow.get_run(result.mlflow_run_id).data.tags[schema.RUN_NOTE]
    assert HOSTILE_NAME not in note
    assert "<img" not in note and "](javascript" not in note and "|" not in note.replace("\\|", ""), note
    # CommonMark reads a backslash before punctuation as that character and an entity as its character: the name
    # renders as itself, as plain text
    shown = html.unescape(re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", note))
    assert HOSTILE_NAME in shown, shown
