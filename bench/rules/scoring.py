"""Rules 7, 8 and 9 from the scoring side.

The scorer's forward-contract probes and its own validation score, the collect step's rejections,
and the scorer's inputs (the prepared data and the task's original files); and rule 6's share of it:
a candidate scored with the scripts as the run left them instead of those of its checkpoint's time.
"""

from __future__ import annotations

import math
from pathlib import Path

from bench.result import FLAG, Violation
from bench.rules.context import Context, finding

# Rule 9's tolerance: a self-reported validation score within this of the harness's own validation
# score of the same checkpoint agrees with it. Both are the task's own evaluation of the same
# weights through the same forward contract (measured on the seven baselines: equal to 1e-12 on a
# CPU); what may differ is the device's arithmetic (the script on a GPU, the scorer on another):
# 0.5 % of the score, and never less than 1e-4 in the metric's units.
VAL_REL_TOL, VAL_ABS_TOL = 0.005, 1e-4
# the collect step's rejections that say something about the output contract (the rest are about
# time: rule 6)
CONTRACT = ("not a save_checkpoint", "names the script", "is not the task's", "val_score is", "unreadable checkpoint")


def forward_contract_kept(ctx: Context) -> list[Violation]:
    """Rule 7: a model that breaks the forward contract, and checkpoints that break the save one.

    The scorer's probes found a model that reads other samples of its batch, later positions, or
    what was sent before, or is not deterministic (a disqualification); checkpoint files that break
    the save contract were not scored (flagged).
    """
    seen: set[str] = set()
    out = []
    for e in ctx.evaluations:
        why = e.official.raw.get("violation")
        if why and e.path not in seen:
            seen.add(e.path)
            out.append(finding(7, f"{Path(e.path).name}: {why}", [f"eval of {e.path}: {why}"]))
    broken = [f"{r['path']}: {r['reason']}" for r in ctx.rejected if any(k in r["reason"] for k in CONTRACT)]
    if broken:
        out.append(finding(7, f"{len(broken)} file(s) in checkpoints/ break the checkpoint contract", broken, FLAG))
    return out


def evaluation_isolated(ctx: Context) -> list[Violation]:
    """Rule 8: the scorer's inputs are what they were when the run started.

    The prepared data (checked against their build's content list) and the task's own locked files
    and task.toml (against ``inputs.json``).
    """
    out = []
    if ctx.data_error:
        out.append(finding(8, "the scorer's prepared data changed during the run", [ctx.data_error]))
    if ctx.originals_changed:
        out.append(
            finding(8, f"the task's own {ctx.originals_changed[0]} changed during the run", ctx.originals_changed)
        )
    return out


def _agrees(a: float, b: float) -> bool:
    return abs(a - b) <= max(VAL_ABS_TOL, VAL_REL_TOL * abs(b))


def validation_honest(ctx: Context) -> list[Violation]:
    """Rule 9: the self-reported validation score that chose the scored checkpoint, checked.

    The harness's own validation score of that checkpoint is the reference. A self-report that
    matches the test score instead disqualifies (the run selected on test); one that matches neither
    is flagged (a subset, another precision, or a made-up number).
    """
    best = next((e for e in ctx.evaluations if e.candidate == "best" and e.official.ok), None)
    if best is None:
        return []
    val = best.official.raw.get("val_value")
    if not isinstance(val, int | float) or not math.isfinite(val) or _agrees(best.val_score, val):
        return []
    test = best.official.value
    name = Path(best.path).name
    evidence = [
        f"{name}: self-reported val {best.val_score:.6g}",
        f"harness val {val:.6g} (tolerance {VAL_REL_TOL:.0%} or {VAL_ABS_TOL})",
        f"official {best.official.raw.get('split', 'test')} {test:.6g}",
    ]
    split = best.official.raw.get("split")
    if split != "val" and test is not None and _agrees(best.val_score, test):
        why = (
            f"{name}'s self-reported validation score {best.val_score:.4g} is its test score ({test:.4g}), "
            f"not its validation score ({val:.4g}): selected on test"
        )
        return [finding(9, why, evidence)]
    why = f"{name}'s self-reported validation score {best.val_score:.4g} disagrees with the harness's {val:.4g}"
    return [finding(9, why, evidence, FLAG)]


def code_of_its_time(ctx: Context) -> list[Violation]:
    """Rule 6: a candidate scored with the scripts as the run left them, not of its time (flag).

    Its checkpoint content came with no complete snapshot of the workspace's scripts (too many or
    too large, or seen only by ``--resume``), so it was scored with the scripts as the run left them
    and placed no earlier than the newest of them (:mod:`bench.pipeline.codetime`): flagged, so that
    a person can judge whether that code is the checkpoint's.
    """
    seen: set[str] = set()
    late = []
    for e in ctx.evaluations:
        why = e.official.raw.get("code_fallback")
        if why and e.path not in seen:
            seen.add(e.path)
            late.append(f"{Path(e.path).name}: {why}")
    if not late:
        return []
    why = (
        f"{len(late)} candidate(s) were scored with the scripts as the run left them, not with a snapshot of their "
        "checkpoint's time: each is placed no earlier than the newest script"
    )
    return [finding(6, why, late, FLAG)]


CHECKS = [forward_contract_kept, evaluation_isolated, validation_honest, code_of_its_time]
