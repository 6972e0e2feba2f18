"""Time: what each trial took, how fast training went, and when to stop launching trials."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from baselines.spaces import epochs_that_fit


@dataclass
class TrialRecord:
    """What happened to one trial (also the rows of trials.csv)."""

    number: int
    script: str
    state: str = "RUNNING"  # COMPLETE | PRUNED | CUT | FAIL
    value: float | None = None
    epochs: int | None = None
    epochs_suggested: int | None = None
    predicted_s: float | None = None
    duration_s: float | None = None
    startup_s: float | None = None  # measured: launch to the start of training
    seconds_per_unit: float | None = None  # measured rate: training seconds per unit of Space.epoch_cost
    seconds_per_epoch: float | None = None  # measured: training (and validation) seconds per epoch
    progress_epochs: float = 0.0
    reports: int = 0
    exit_code: int | None = None
    reason: str = ""
    params: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)


def measure_speed(
    rec: TrialRecord, launched: float, points: list[tuple[float, float]], trace_start: float | None, cost: float
) -> None:
    """Set ``rec``'s start-up time and seconds per epoch (and per unit of ``cost``) from its validations.

    ``points``: (time logged, progress in epochs) of the validations read, in order. With two or more at
    different progress, an epoch is the time from the first to the last over the epochs between them, and the
    start-up is the time before the first less its epochs: launch to the start of training. With one, the
    epoch is the time from ``trace_start`` (the tracer's start event: the interpreter was up) to it over its
    progress, so loading counts as training (conservative). Nothing is set without a validation.
    """
    if not points:
        return
    (t0, p0), (t1, p1) = points[0], points[-1]
    if p1 > p0:
        per_epoch = (t1 - t0) / (p1 - p0)
        startup = t0 - launched - p0 * per_epoch
    elif p1 > 0:
        begin = launched if trace_start is None else trace_start
        per_epoch, startup = (t1 - begin) / p1, begin - launched
    else:
        return
    rec.startup_s, rec.seconds_per_epoch = max(0.0, startup), max(0.0, per_epoch)
    if cost > 0:
        rec.seconds_per_unit = rec.seconds_per_epoch / cost


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank, so the max for q=1 and for few values)."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


class TimeKeeper:
    """The budget as the agent sees it: a deadline, a reserve for the summary, and trial durations measured so far."""

    def __init__(self, deadline: float, reserve_s: float, *, quantile_q: float = 0.75, safety: float = 1.15):
        self.deadline, self.reserve_s, self.q, self.safety = deadline, reserve_s, quantile_q, safety
        self.records: list[TrialRecord] = []

    def left(self, now: float | None = None) -> float:
        """Seconds left for trials (the reserve for the final summary already taken off)."""
        return self.deadline - self.reserve_s - (time.time() if now is None else now)

    def expected_trial_s(self) -> float | None:
        """A high quantile of the durations of completed trials (None before any completed)."""
        done = [r.duration_s for r in self.records if r.state == "COMPLETE" and r.duration_s]
        if not done:  # only pruned / failed so far: their durations are all there is
            done = [r.duration_s for r in self.records if r.duration_s]
        return quantile(done, self.q) if done else None

    def margin_s(self, expected: float) -> float:
        return max(3.0, 0.1 * expected)

    def shortest_trial_s(self, min_epochs: int) -> float | None:
        """A trial of ``min_epochs`` at the median epoch time measured so far (epochs are fitted to the time left)."""
        per_epoch = [r.seconds_per_epoch for r in self.records if r.seconds_per_epoch]
        startup = self.startup_s()
        if not per_epoch or startup is None:
            return None
        return startup + min_epochs * quantile(per_epoch, 0.5) * self.safety

    def can_launch(self, now: float | None = None, min_epochs: int | None = None) -> tuple[bool, str]:
        """The stop rule: launch while the time left holds a trial plus a margin (always the first).

        A trial is the q75 of the completed trials' durations or, when ``min_epochs`` is given and shorter,
        a trial of ``min_epochs`` at the median epoch time (the next trial's epochs are fitted to the time left).
        """
        left = self.left(now)
        if left <= 0:
            return False, f"no time left ({left:.0f} s after the summary reserve)"
        expected = self.expected_trial_s()
        if expected is None:
            return True, "first trial"
        what = f"q{self.q:.2f} of {len(self.records)} trials"
        shortest = self.shortest_trial_s(min_epochs) if min_epochs else None
        if shortest is not None and shortest < expected:
            expected, what = shortest, f"{min_epochs} epoch(s) at the median epoch time"
        need = expected + self.margin_s(expected)
        if left < need:
            return False, f"{left:.0f} s left < {need:.0f} s for a trial ({what} + margin)"
        return True, f"{left:.0f} s left >= {need:.0f} s"

    def startup_s(self) -> float | None:
        values = [r.startup_s for r in self.records if r.startup_s is not None]
        return max(values) if values else None

    def rate(self) -> float | None:
        """Seconds per unit of epoch cost: a high quantile of the rates measured on trials (conservative)."""
        values = [r.seconds_per_unit for r in self.records if r.seconds_per_unit]
        return quantile(values, 0.8) if values else None

    def predict_s(self, epochs: int, epoch_cost: float) -> float | None:
        rate, startup = self.rate(), self.startup_s()
        if rate is None or startup is None:
            return None
        return startup + epochs * epoch_cost * rate * self.safety

    def fit_epochs(self, epochs: int, epoch_cost: float, now: float | None = None) -> int:
        """``epochs`` cut to what the time left can hold (unchanged before any measurement)."""
        rate, startup = self.rate(), self.startup_s()
        if rate is None or startup is None:
            return epochs
        room = self.left(now) - startup - self.margin_s(startup)
        return min(epochs, epochs_that_fit(room, epoch_cost * rate * self.safety))
