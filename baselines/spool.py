"""A trial's trace: the spool file the tracer writes for the trial's process, read for validation scores and
marked at the trial's end.

The harness's tracer (``bench/tracking/hook/sitecustomize.py``) gives every traced script a spool file of its
own, ``$BENCH_SPOOL_DIR/<time_ns>-<pid>.jsonl``, and starts it with a ``start`` event. The task's
``prepare.log_metrics(step, **metrics)`` appends ``{"ev": "metrics", "t", "step", "metrics": {...}}`` to that
file at full precision (then prints the same values, rounded). The driver reads the validation scores there,
by the trial's pid, instead of parsing what the script prints. Events that the tracer's output tee parsed from
printed lines (``"src": "stdout"``) are skipped: they echo the helper's events, rounded to four decimals.

Like the relay (``bench/tracking/relay.py``), only complete lines are read: a partial last line is left for the
next read, when its writer has finished it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


def val_key(metric: str) -> str:
    """The key of the validation score in a script's metrics (T6: mse -> val_mse; T1: val_bpb)."""
    return metric if metric.startswith("val_") else f"val_{metric}"


@dataclass(frozen=True)
class Validation:
    """One validation score a trial script logged through ``log_metrics``."""

    t: float  # when the script logged it (time.time() on this machine)
    step: int
    value: float
    epoch: float | None  # the ``epoch`` logged with it (training progress in epochs), if the script logged one


class TrialSpool:
    """The spool file of the trial script with ``pid``, started at ``started`` (time.time()) in ``spool_dir``."""

    def __init__(self, spool_dir: Path, pid: int, started: float, key: str):
        self.spool_dir, self.pid, self.started, self.key = Path(spool_dir), pid, started, key
        self.path: Path | None = None
        self.offset = 0  # bytes read so far (complete lines only)
        self.started_t: float | None = None  # the start event's time: the interpreter was up

    def find(self) -> Path | None:
        """The file, once the tracer has created it (``*-<pid>.jsonl``, newer than the launch; else None)."""
        if self.path is None:
            for f in sorted(self.spool_dir.glob(f"*-{self.pid}.jsonl")):
                try:
                    if int(f.name.split("-", 1)[0]) / 1e9 >= self.started - 1:  # not an older process's pid
                        self.path = f
                        break
                except ValueError:
                    continue
        return self.path

    def read(self) -> list[Validation]:
        """The validations logged since the last read (complete lines only)."""
        path = self.find()
        if path is None:
            return []
        try:
            with open(path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1  # the writer may be mid-line: leave that line for the next read
        self.offset += end
        found = []
        for line in data[:end].splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a torn line (a killed writer) or a foreign one
            if not isinstance(event, dict):
                continue
            if event.get("ev") == "start" and self.started_t is None:
                self.started_t = _number(event.get("t"))
            validation = self._validation(event)
            if validation is not None:
                found.append(validation)
        return found

    def _validation(self, event: dict) -> Validation | None:
        if event.get("ev") != "metrics" or event.get("src") == "stdout":
            return None
        metrics = event.get("metrics")
        if not isinstance(metrics, dict) or self.key not in metrics:
            return None
        value, t = _number(metrics[self.key]), _number(event.get("t"))
        if value is None or t is None:
            return None
        step = _number(event.get("step"))
        return Validation(t=t, step=int(step or 0), value=value, epoch=_number(metrics.get("epoch")))

    def mark(self, events: list[dict]) -> bool:
        """Append ``events`` to the trace (the script's MLflow run shows them); False if there is no file."""
        path = self.find()
        if path is None:
            return False
        try:
            with open(path, "a", encoding="utf-8") as out:
                # a leading newline ends a line the killed script may have left half-written
                out.write("\n" + "".join(json.dumps(e) + "\n" for e in events))
        except OSError:
            return False
        return True


def _number(value) -> float | None:
    """A JSON number as a float (NaN and infinities included: the pruner's reporter skips them); else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
