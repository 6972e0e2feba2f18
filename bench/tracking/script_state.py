"""What the relay knows about one traced process, and how spool fields are read.

The state is kept in ``relay.json``.

Every field of a spool event is the agent's: a name becomes a plain file name, a pid or a time that
MLflow could not store becomes 0 or now, never an exception that would stop the relay.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from bench.tracking import relay_limits, schema
from bench.tracking.hook._bench_once import Seen
from bench.tracking.relay_limits import Tally

# what a batch the store did not take must not leave counted (its lines are read again)
COUNTED = ("seconds_step", "last_step", "metrics", "dropped", "examples", "checkpoint_events", "uploaded")
COUNTED += ("not_uploaded", "deferred", "params_dropped", "checkpoints", "params_logged", "lines_dropped")


@dataclass
class ScriptState:
    """What the relay knows about one traced process."""

    file: str
    offset: int = 0
    run_id: str | None = None
    script: str = ""
    pid: int = 0  # as the spool says: the pid inside the sandbox's namespace (often 4), meaningless on the host
    host_pid: int = 0  # the host process the harness bound it to and sampled (bench.tracking.hostpids); 0: none
    started: float = 0.0
    ended: float | None = None
    status: str | None = None  # FINISHED | FAILED | KILLED once closed
    error: str | None = None
    params_logged: bool = False
    metrics: int = 0
    recent: list[list] = field(default_factory=list)  # [key, step, value, traced] of the last pairs logged (Seen)
    last_step: int = 0  # the latest training step the script logged: the step axis of checkpoints and system metrics
    seconds_step: int | None = None  # the step of the last wall-seconds value kept (one per step)
    checkpoints: list[dict] = field(default_factory=list)  # the first MAX_RECORDED checkpoint events
    closed: bool = False
    # the accounting of issue 21: every value read is relayed (metrics), dropped (by reason) or left
    # (unrelayed)
    dropped: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)  # reason -> the first value dropped for it
    unrelayed: int = 0  # values in spool bytes not relayed when the relay finished (the store unreachable)
    unread_bytes: int = 0  # spool bytes past relay_limits.MAX_SPOOL_BYTES, never read
    store_error: str | None = None  # why the store did not take the rest, when it did not
    checkpoint_events: int = 0
    uploaded: int = 0
    not_uploaded: dict[str, int] = field(default_factory=dict)
    deferred: list[str] = field(default_factory=list)  # checkpoints past the upload cap (the first MAX_DEFERRED)
    params_dropped: int = 0
    lines_dropped: dict[str, int] = field(default_factory=dict)  # lines that are no event, by why (too-deep, bad-json)
    in_long_line: bool = False  # the read ended inside a line longer than a whole read (passed over to its end)

    @property
    def checkpoint_count(self) -> int:
        """Checkpoint events read (``checkpoints`` keeps only the first ones)."""
        return self.checkpoint_events


def metric_rows(s: ScriptState, ev: dict, recent: Seen, queued: int = 0, others: int = 0) -> list[tuple]:
    """The ``(key, value, step, time)`` rows of a metrics event that MLflow takes.

    The others counted in ``s.dropped`` under their reason (``queued``: rows of the script not
    logged yet, which count towards its cap; ``others``: values the run's other scripts relayed,
    which count towards the run's).
    """
    raw = ev.get("metrics")
    if not isinstance(raw, dict):
        return []
    tally = Tally(s.dropped, s.examples)
    step, why = relay_limits.step_of(ev.get("step"))
    why = why or relay_limits.time_problem(ev.get("t"))
    if why:
        tally.drop(why, ev.get("step") if why.startswith("step") else ev.get("t"), len(raw))
        return []
    values = {}
    for key, value in raw.items():
        number, why = relay_limits.value_of(value)
        why = relay_limits.key_problem(key) or why
        if why:
            tally.drop(why, key if why.startswith("key") else f"{key}={value}")
        else:
            values[key] = number
    # one value, traced or printed: a printed value that copies one logged at its key and step is
    # dropped, and a traced one that a line printed just before it copies (the output tee drops the
    # copies it reads later)
    traced = ev.get("src") != "stdout"
    for k in [k for k, v in values.items() if recent.copy_of(k, step, v, traced)]:
        tally.drop("copy", f"{k} at step {step}")
        del values[k]
    for k, v in values.items():
        recent.add(k, step, v, traced)
    # wall seconds are a series of their own, one value per training step (the first logged at that
    # step), so that a step logging a loss line and a validation line does not draw two points at
    # one x
    if schema.SCRIPT_SECONDS in values:
        if s.seconds_step == step:
            del values[schema.SCRIPT_SECONDS]
            tally.drop("repeat", f"{schema.SCRIPT_SECONDS} at step {step}")
        else:
            s.seconds_step = step
    s.last_step = max(s.last_step, step)
    room = max(0, relay_limits.MAX_VALUES_PER_SCRIPT - s.metrics - queued)
    if len(values) > room:
        tally.drop("over-cap", f"step {step}", len(values) - room)
        values = dict(list(values.items())[:room])
    room = max(0, relay_limits.MAX_VALUES_PER_RUN - others - s.metrics - queued)
    if len(values) > room:
        tally.drop("over-run-cap", f"step {step}", len(values) - room)
        values = dict(list(values.items())[:room])
    t = ev.get("t")
    return [(k, v, step, t) for k, v in values.items()]


def safe_name(raw: object) -> str:
    """A script name from a spool event as a plain file name.

    It names MLflow runs and artifact paths.
    """
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", str(raw or "?"))[-128:]
    return name if name.strip(".") else "_"


def _int(raw: object) -> int:
    try:
        value = int(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return 0
    return value if relay_limits.INT64_MIN <= value <= relay_limits.INT64_MAX else 0


def _time(raw: object) -> float:
    """A spool time, or now when it is not one MLflow can store.

    NaN, infinite, negative, past 2**63 ms.
    """
    if raw is None or relay_limits.time_problem(raw):
        return time.time()
    return float(raw)  # type: ignore[arg-type]


def _text(raw: object) -> str | None:
    return None if raw is None else str(raw)[:2000]
