"""Validation scores -> the pruner: reports on a common grid of training progress."""

from __future__ import annotations

import math

from bench.tasks import Direction


class GridReporter:
    """Validation reports -> ``trial.report(best_so_far, step)`` on a common grid of ``grid`` steps per epoch.

    Trials with different batch sizes validate at different points; Optuna's median pruner compares trials
    at equal steps. Each grid point gets the best score known when training had got that far: points passed
    between two validations carry the earlier best, the point of a validation gets the new best.
    """

    def __init__(self, trial, grid: int, direction: Direction):
        self.trial, self.grid, self.direction = trial, max(1, int(grid)), direction
        self.last = -1  # last grid step reported
        self.best: float | None = None

    def add(self, progress_epochs: float, value: float) -> bool:
        """Record a validation at ``progress_epochs``; True if a new grid step was reported (ask the pruner)."""
        if not math.isfinite(value):
            return False
        k = int(math.floor(progress_epochs * self.grid + 1e-6))
        previous = self.best
        if self.direction.better(value, self.best):
            self.best = value
        if k <= self.last:
            return False
        if previous is not None:
            for g in range(self.last + 1, k):
                self.trial.report(previous, g)
        self.trial.report(self.best, k)
        self.last = k
        return True
