"""SIGTERM and SIGINT to the harness while one run is under way: what each does, by phase.

Why: SIGTERM is what a Slurm time limit, ``scancel``, a preemption or ``kill`` sends, and Python's
default for it ends the process where it stands. Arriving during the evaluation, it used to leave no
result.json, the MLflow run RUNNING and ``bench record`` failing. The policy:

- before the agent is launched, a signal raises KeyboardInterrupt at once: nothing of the agent ran;
- once it is launched, a signal is noted and never raised here. The watch
  (:func:`bench.pipeline.watch.watch`) ends the agent's wait on it; after the wait, collect,
  evaluate, audit and record go on, so that result.json and the closed MLflow run exist when the
  process ends (the runner raises KeyboardInterrupt after the record, so that
  ``bench run --repeats N`` starts nothing more and exits 130);
- a second SIGINT raises KeyboardInterrupt (a person pressing Ctrl-C again wants out now): the run
  directory keeps its run.json and ``bench run --resume`` finishes it. SIGTERM never escalates: a
  scheduler that insists follows with SIGKILL, which leaves the same resumable run directory;
- if a signal came and an evaluation failed, the scorer may have been stopped by the same signal
  (Slurm signals every process of a job): the runner then writes no result from it and leaves the
  run to ``--resume``.

The handler only appends to a list (no printing: a signal can land inside a write to stdout).
"""

from __future__ import annotations

import signal
import threading

SIGNALS = (signal.SIGTERM, signal.SIGINT)

_current: list[Termination] = []  # the innermost active one (a stack: a resume inside a run is not nested, but safe)


class Termination:
    """A context manager installing the policy above for one run; inert outside the main thread."""

    def __init__(self, *, launched: bool = False) -> None:
        self.launched = launched  # False: a signal raises KeyboardInterrupt (nothing of the agent ran yet)
        self.signals: list[str] = []  # names, in the order received
        self._old: dict[int, object] = {}

    @property
    def pending(self) -> bool:
        """A signal arrived: the run goes on to its record, then the process stops."""
        return bool(self.signals)

    def describe(self) -> str:
        """``SIGTERM`` or ``SIGTERM, SIGINT``: the signals received, each once."""
        return ", ".join(dict.fromkeys(self.signals))

    def __enter__(self) -> Termination:
        if threading.current_thread() is threading.main_thread():
            self._old = {sig: signal.signal(sig, self._handle) for sig in SIGNALS}
        _current.append(self)
        return self

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old = {}
        if self in _current:
            _current.remove(self)

    def _handle(self, signum: int, frame) -> None:
        self.signals.append(signal.Signals(signum).name)
        if not self.launched:
            raise KeyboardInterrupt
        if signum == signal.SIGINT and self.signals.count("SIGINT") >= 2:
            raise KeyboardInterrupt


def current() -> Termination | None:
    """The policy in force in this process (None outside a run)."""
    return _current[-1] if _current else None
