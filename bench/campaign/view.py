"""What a person watching a campaign sees.

A live status line (what runs where, done/total, an ETA from the budgets) with one line per run
started and ended, and the table of ``bench campaign status``.

The ETA is an estimate from the budgets, not a promise: each run left is expected to take its budget
+ grace + the overhead around the agent's time (setup, evaluation, record), measured on the runs
this invocation finished (:data:`DEFAULT_OVERHEAD_S` until one has), spread over the slots that run
at once. An agent that stops early makes it pessimistic.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import TextIO

from bench.campaign.spec import Campaign, RunKey
from bench.durations import fmt_s
from bench.progress import StatusLine
from bench.rundir import Seen
from bench.sandbox import evaluation_lock

DEFAULT_OVERHEAD_S = 120.0


class Estimate:
    """Expected seconds per run and what is left of the campaign."""

    def __init__(self, campaign: Campaign) -> None:
        self.campaign = campaign
        self.overheads: list[float] = []

    def expected(self, key: RunKey) -> float:
        """A run's expected seconds: its budget, the grace and the overhead measured so far."""
        overhead = statistics.median(self.overheads) if self.overheads else DEFAULT_OVERHEAD_S
        return self.campaign.budget_of(key.task) + self.campaign.spec.grace_s + overhead

    def observed(self, key: RunKey, wall_s: float) -> None:
        """A run's job took ``wall_s``: what it took beyond the agent's budget is the overhead."""
        self.overheads.append(max(0.0, wall_s - self.campaign.budget_of(key.task)))

    def eta(self, queued: list[RunKey], running: dict[RunKey, float], slots: int) -> float:
        """Seconds until the last run ends.

        The work left (queued runs whole, running ones what is left of their expected time) over
        the slots.
        """
        now = time.monotonic()
        left = sum(self.expected(k) for k in queued)
        left += sum(max(0.0, self.expected(k) - (now - t0)) for k, t0 in running.items())
        return left / max(1, slots)


class LiveView:
    """The status line of a campaign process; lines for each start and end above it."""

    def __init__(self, campaign: Campaign, total: int, stream: TextIO | None = None, every_s: float = 30.0) -> None:
        self.total = total
        self.campaign = campaign
        self.t0 = time.monotonic()
        self.line = StatusLine(f"campaign {campaign.name}", stream or sys.stderr, every_s=every_s)

    def say(self, text: str) -> None:
        """One line above the status line."""
        self.line.print(f"[campaign] {text}")

    def update(self, done: int, running: dict[RunKey, tuple[str, float]], eta_s: float) -> None:
        """Redraw the status line.

        ``running``: each run's place (``gpu 0``, ``job 1234``) and its start (time.monotonic).
        """
        now = time.monotonic()
        where = ", ".join(f"{k.run_id} on {w} {fmt_s(now - t0)}{self._waits(k)}" for k, (w, t0) in running.items())
        self.line.set(done=f"{done}/{self.total}", running=where or "-")
        self.line.update(now - self.t0, eta_s)

    def _waits(self, key: RunKey) -> str:
        """`` (waits for other runs' live agents ...)`` while it waits for the evaluation lock."""
        why = evaluation_lock.waits(self.campaign.run_dir(key))
        return f" ({why})" if why else ""

    def close(self) -> None:
        """End the status line."""
        self.line.close()


def table(
    campaign: Campaign,
    seen: dict[RunKey, Seen],
    events: dict[str, dict],
    jobs: dict[str, str],
    blocked: dict[str, str] | None = None,
) -> str:
    """``bench campaign status``: one row per run of the matrix, then the counts.

    ``blocked``: run id -> why a final run is not run again (its API refused the credential:
    :func:`bench.campaign.job.blocked`), listed under it.
    """
    # the run id and agent columns as wide as their longest value ("opencode
    # (openrouter/moonshotai/kimi-k2.6)")
    wid = max([6, *(len(k.run_id) for k in seen)])
    wagent = max([5, *(len(k.agent.label) for k in seen)])
    wtask = max([4, *(len(k.task) for k in seen)])
    rows = [
        f"{'run id':{wid}} {'agent':{wagent}} {'task':{wtask}} {'rep':>3} {'state':11} {'status':12} {'score':>8}  note"
    ]
    for key, s in seen.items():
        score = f"{s.result.score:.4f}" if s.result is not None and s.result.score is not None else "-"
        status = s.status if s.state == "final" else "-"
        note = s.note
        if not note and s.state != "final" and key.run_id in events:
            ev = events[key.run_id]
            note = f"{ev['event']}: {ev['why']}"
        if key.run_id in jobs and s.state != "final":
            note = f"job {jobs[key.run_id]}; {note}" if note else f"job {jobs[key.run_id]}"
        rows.append(
            f"{key.run_id:{wid}} {key.agent.label:{wagent}} {key.task:{wtask}} {key.repeat:>3} {s.state:11} "
            f"{status:12} {score:>8}  {note[:160]}"
        )
    for run_id, why in (blocked or {}).items():
        rows.append(f"\n{run_id}: {why}")
    states = [s.state for s in seen.values()]
    counts = ", ".join(f"{states.count(x)} {x}" for x in ("final", "running", "unfinished", "stale", "pending"))
    done = f"{states.count('final')}/{len(states)} final"
    rows.append(f"\ncampaign {campaign.name}: {done} ({counts}); {campaign.folder}")
    return "\n".join(rows)
