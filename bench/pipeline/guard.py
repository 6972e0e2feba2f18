"""Belt and braces for the steps after the watch (:func:`bench.runner.finish`).

A sabotaged run still ends properly.

Every read of what the agent left goes through :mod:`bench.untrusted`, so no file it makes should
crash a step. But the steps read a great deal (the spool, the checkpoints, the workspace, the
evidence) and a step that raises anyway used to end the harness with no ``result.json``, its MLflow
runs left RUNNING, and a ``--resume`` that fell into the same crash; a campaign then called it an
infrastructure failure, retried it into the same crash and gave it up, so an agent could erase a run
it judged bad and have the machine blamed (issue 29). So each step runs under :class:`StepGuard`: a
step that raises is recorded (the step, the error) and replaced by its empty result (no scripts
relayed, no checkpoint collected, no evaluation, an audit that says it could not check), the run
goes on to its record, and:

- the outcome says which step failed and why (a run with no scored checkpoint is ``failed``: final,
  never retried by a campaign, and never called an infrastructure failure);
- the audit carries a flagged finding naming the step and the error, for a person;
- every MLflow run of the run is closed (:func:`close_left_open`: script runs still RUNNING are
  KILLED).

KeyboardInterrupt (a signal during the evaluation: :mod:`bench.termination`) and a disk that refuses
``result.json`` (:class:`~bench.pipeline.state.RunStateError`: free space, then resume) are not
contained: they have their own, documented ends.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from bench.markup import one_line
from bench.pipeline.state import RunStateError, disk_error
from bench.result import FLAG, Audit, Outcome, RunResult, Violation
from bench.tracking import accounting
from bench.tracking.relay import Relay
from bench.tracking.writer import MlflowWriter, TrackingError

T = TypeVar("T")
LOG = "harness-errors.log"  # in the run directory: each contained failure's traceback, for whoever fixes it


class StepGuard:
    """Runs the steps of one run's end.

    Remembers each that raised (``failures``: (step, error) pairs).
    """

    def __init__(self, run_dir: Path, label: str) -> None:
        self.run_dir, self.label = Path(run_dir), label
        self.failures: list[tuple[str, str]] = []

    def run(self, step: str, fn: Callable[[], T], fallback: Callable[[], T]) -> T:
        """``fn()``, or, if it raises, ``fallback()`` with the failure recorded.

        Signals and a full disk pass.
        """
        try:
            return fn()
        except (KeyboardInterrupt, RunStateError):
            raise
        except Exception as e:
            error = one_line(f"{type(e).__name__}: {e}", 300)
            self.failures.append((step, error))
            then = "result.json is kept" if step == "record" else "the run goes on to its record"
            print(f"[bench] {self.label}: the {step} step failed ({error}); {then}", flush=True)
            try:
                with open(self.run_dir / LOG, "a") as log:
                    log.write(f"--- the {step} step\n{traceback.format_exc()}\n")
            except OSError:
                pass
            return fallback()

    def note(self) -> str:
        """The failures as one clause for the outcome's reason ('' when none)."""
        if not self.failures:
            return ""
        steps = "; ".join(f"the {step} step failed ({error})" for step, error in self.failures)
        return f"{steps}: the harness recorded what it could (traceback in {LOG})"

    def outcome(self, decided: Outcome) -> Outcome:
        """The outcome with the failures named in its reason.

        The status is what the remaining evidence gives.
        """
        note = self.note()
        return replace(decided, reason=f"{decided.reason}; {note}") if note else decided

    def audit(self, audited: Audit) -> Audit:
        """The audit with one flagged finding per failed step.

        Rule 0: the harness's own, not one of the nine.
        """
        found = [
            Violation(0, f"the harness's {step} step failed: {error}", FLAG, (f"{LOG}: the {step} step",))
            for step, error in self.failures
        ]
        return replace(audited, violations=(*found, *audited.violations)) if found else audited


def relay_summary(relay: Relay) -> dict:
    """What the relay did, when finishing it raised.

    Its counts so far (an empty summary if even they fail).
    """
    try:
        return relay.summary()
    except Exception:
        return accounting.summary([])


def record_failed(result: RunResult, writer: MlflowWriter, run_dir: Path) -> RunResult:
    """The record step raised something other than a tracking outage.

    Result.json is written (again, with the error as its tracking error, so ``bench record`` is the
    way on) and the agent run is closed as FAILED.
    """
    result.tracking_error = (result.tracking_error or f"the record step failed; see {LOG}")[:2000]
    try:
        result.write()
    except OSError as e:
        raise disk_error(result.result_file, e, run_dir) from e
    if result.mlflow_run_id:
        try:
            writer.end_run(result.mlflow_run_id, "FAILED")
        except TrackingError:
            pass
    return result


def close_left_open(writer: MlflowWriter, parent: str | None) -> None:
    """Close as KILLED the runs nested under the agent run that are still RUNNING.

    A script run created just before a kill, or left by a relay that failed; an unreachable store
    only skips this (``bench record`` later).
    """
    if not parent:
        return
    try:
        for run_id in writer.open_children(parent):
            writer.end_run(run_id, "KILLED")
    except TrackingError as e:
        print(f"[bench] could not close runs left open in MLflow ({e}); bench record later closes them", flush=True)
