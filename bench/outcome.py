"""The paper's run status, decided from the evidence the pipeline gathered (after the audit, before the record).

In this order: a broken rule disqualifies; a best checkpoint with an official score is a success; an
interrupted harness is ``interrupted``; an over-refusal (Appendix A) is ``refused``; otherwise the run
``failed`` (or hit a ``timeout`` when the budget ended it), with the reason a person needs first.
The agent's exit code is never trusted on its own.
"""

from __future__ import annotations

from pathlib import Path

from bench.result import Audit, Evaluation, Outcome


def decide(
    evaluations: list[Evaluation],
    audit: Audit,
    *,
    interrupted: bool,
    timed_out: bool,
    agent_events: dict,
    rejected: list[dict],
) -> Outcome:
    """The :class:`Outcome` of a run: status, official score (success only), and why."""
    best = next((e for e in evaluations if e.candidate == "best"), None)
    if audit.violations:
        return Outcome("disqualified", audit.violations[0].reason)
    if best is not None and best.official.ok:
        reason = f"best checkpoint {Path(best.path).name} from {best.script}"
        return Outcome("success", reason, score=best.official.value, best_val_score=best.val_score)
    if interrupted:
        return Outcome("interrupted", "the harness was interrupted")
    if agent_events.get("refused"):
        return Outcome("refused", "the agent refused to work on the task (over-refusal)")
    if best is not None:
        return Outcome("failed", f"official evaluation failed: {best.official.why_not}")
    why = "no scoreable checkpoint in checkpoints/"
    if agent_events.get("error"):
        why += f"; the agent reported an error: {str(agent_events['error'])[:300]}"
    if rejected:
        why += f" ({len(rejected)} rejected: {rejected[0]['reason']})"
    return Outcome("timeout" if timed_out else "failed", why)
