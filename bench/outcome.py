"""The paper's run status, decided from the evidence the pipeline gathered.

It is decided after the audit, before the record.

In this order: a broken rule (a finding with the verdict ``disqualify``) disqualifies; a best
checkpoint with an official score is a success; an interrupted harness is ``interrupted``, and so is
a model API that kept failing (an infrastructure failure, :mod:`bench.agents.health`); an
over-refusal (Appendix A) is ``refused``; otherwise the run ``failed`` (or hit a ``timeout`` when
the budget ended it), with the reason a person needs first. The agent's exit code is never trusted
on its own.

A run whose API budget (``--max-cost``) ran out is judged as the paper judges a run whose time ran
out (§3.3: the best checkpoint saved within the budget is scored): ``success`` when a checkpoint
saved before the cap scores, the score made within the limits the researcher set. Without one it
``failed``, even when the agent then waited out its time on refused requests: the API budget, not
the time budget, ended its work (never ``timeout``, never an infrastructure failure that a campaign
would retry). A capped run is found by its ``limits.hit`` entry ``api-cost`` or its
``bench.api_budget`` tag, whatever its status.
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
    if audit.disqualifying:  # flagged findings leave the status alone: they are recorded for a person to look at
        return Outcome("disqualified", audit.disqualifying[0].reason)
    if best is not None and best.official.ok:
        skipped = _unloadable(evaluations)
        reason = f"{skipped}; scored the next candidate" if skipped else "best checkpoint"
        reason += f" {Path(best.path).name} from {best.script}"
        return Outcome("success", reason, score=best.official.value, best_val_score=best.val_score)
    if interrupted:
        return Outcome("interrupted", "the harness was interrupted")
    if failure := agent_events.get("api_failure"):  # the model API, not the agent: campaigns run it again
        return Outcome("interrupted", f"infrastructure failure: {failure.get('why', 'the model API failed')}")
    if agent_events.get("refused"):
        return Outcome("refused", "the agent refused to work on the task (over-refusal)")
    if best is not None:
        if skipped := _unloadable(evaluations):  # and the last candidate tried (labelled best) failed too
            last = f"the last candidate tried, {Path(best.path).name}, failed too: {best.official.why_not[:300]}"
            return Outcome("failed", f"official evaluation failed: {skipped}; {last}")
        return Outcome("failed", f"official evaluation failed: {best.official.why_not}")
    why = "no scoreable checkpoint in checkpoints/"
    if agent_events.get("error"):
        why += f"; the agent reported an error: {str(agent_events['error'])[:300]}"
    if rejected:
        why += f" ({len(rejected)} rejected: {rejected[0]['reason']})"
    capped = bool((agent_events.get("gateway") or {}).get("cap_hit"))  # the API budget ended its work, not the time
    return Outcome("timeout" if timed_out and not capped else "failed", why)


def _unloadable(evaluations: list[Evaluation]) -> str:
    """Why the scored checkpoint is not the best by validation.

    The best's model could not be built or loaded (``best-unloadable``; the evaluate step then
    scored the next candidate). "" when it is the best.
    """
    first = next((e for e in evaluations if e.candidate == "best-unloadable"), None)
    if first is None:
        return ""
    why = first.official.why_not.strip().splitlines()[0][:160] if first.official.why_not.strip() else "?"
    return f"best checkpoint {Path(first.path).name} could not be loaded ({why})"
