"""What the relay takes from a spool, value by value.

The tracking store's limits and the relay's own caps.

A spool is written by the agent's processes, so any value in it may be one the store refuses. MLflow
checks a whole batch and refuses all of it for one bad value, and some values it takes only to fail
in the database (a step past 2**63 on SQLite: "Python int too large to convert to SQLite INTEGER",
an internal error, not a refusal). One such value used to stop a script's relay for good. So each
value is checked here first, against the limits read from the installed MLflow (3.17,
``mlflow/utils/validation.py`` and the SQL store; ``tests/bench/tracking/test_relay_limits.py``
checks them against it): a value that breaks one is dropped, counted under its reason, and never
retried.

The caps bound what a flood costs the harness (time to relay, memory, artifact space); each cut is
counted, so ``result.json`` still accounts for every value: relayed + dropped (by reason) + left
unrelayed = written.
"""

from __future__ import annotations

import math
import re

# --- MLflow's limits (mlflow.utils.validation, the SQL store's columns) ---------------------------
MAX_KEY_LENGTH = 250  # MAX_ENTITY_KEY_LENGTH: metric names and param keys
_KEY_CHARACTERS = re.compile(r"^[/\w.\- :]*$")  # validate_param_and_metric_name on POSIX (Windows: no colon)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # steps and timestamps are BigInteger columns (a wider one: OverflowError)

# --- the relay's caps (per traced script) ---------------------------------------------------------
# A real run logs far fewer: T1 logging 3 values at every one of ~36,000 steps an hour is ~110,000.
# The store takes ~5,000 values per CPU-second (MLflow 3.17, SQLite, the 2-core CPU machine;
# ~1,000/s of wall time there when it was shared by 8 busy processes), so a run at its cap costs the
# harness ~7 CPU-minutes at its end if nothing was relayed live; the harness's memory does not grow
# with it (the spool is read 16 MB at a time).
MAX_VALUES_PER_SCRIPT = 500_000
MAX_VALUES_PER_RUN = 2_000_000  # all scripts of a run together (a thousand small floods are one big one)
# Checkpoint files uploaded live per script (the ones the evaluation scores are uploaded at the end
# in any case).
MAX_CHECKPOINT_UPLOADS = 100
# Spool bytes read per script: past this the relay reads nothing more of the file (it says how many
# bytes it left).
MAX_SPOOL_BYTES = 1 << 30
MAX_EXAMPLE = 200  # characters of an example kept per reason (the key or value that was dropped)

REASONS = {
    "key-too-long": f"a name longer than MLflow's {MAX_KEY_LENGTH} characters",
    "key-characters": "a name with characters MLflow refuses (it takes letters, digits, _ - . / : and spaces)",
    "key-path": "a name MLflow refuses because it resolves to another path ('a/../b', '/a', '', '.')",
    "value-not-a-number": "a value that is not a number (a string, a boolean, null)",
    "value-infinite": "an infinite value (MLflow would store +-1.8e308, another number)",
    "step-out-of-range": "a step outside MLflow's 64-bit integers",
    "step-not-an-integer": "a step that is not an integer",
    "timestamp-out-of-range": "a time that is not a number in MLflow's range (a non-negative 64-bit count of ms)",
    "over-cap": f"past the cap of {MAX_VALUES_PER_SCRIPT:,} values per script",
    "over-run-cap": f"past the cap of {MAX_VALUES_PER_RUN:,} values per run",
    "copy": "a printed copy of a value the script traced (one value, relayed once)",
    "repeat": "a second wall-seconds value at one step (one per step)",
    "store-refused": "refused by the tracking store (its message is kept)",
}
MERGED = ("copy", "repeat")  # not losses: the value is relayed once (result.json counts them apart, as "merged")
CHECKPOINT_REASONS = {
    "over-cap": f"past the cap of {MAX_CHECKPOINT_UPLOADS} uploads per script",
    "no-such-file": "the file it names does not exist",
    "outside-checkpoints": "the file it names is not in the workspace's checkpoints/",
    "too-large": "larger than the upload limit",
    "link": "a symbolic link (never followed: issue 29)",
    "not-regular": "not a regular file (a FIFO, a directory, a socket, a device)",
    "sparse": "a sparse file (its apparent size is not what it holds)",
    "same-file": "a file already uploaded (a hard link of it, named again)",
    "unreadable": "a file the harness could not open",
    "store-refused": "refused by the tracking store",
}


def key_problem(key: object) -> str | None:
    """Why MLflow would refuse ``key`` as a metric name or param key; None if it takes it."""
    if not isinstance(key, str) or not _KEY_CHARACTERS.match(key):
        return "key-characters"
    if len(key) > MAX_KEY_LENGTH:
        return "key-too-long"
    normal = _normpath(key)
    if normal != key or normal == "." or normal.startswith(("..", "/")):
        return "key-path"
    return None


def _normpath(key: str) -> str:
    import posixpath

    return posixpath.normpath(key)


def value_of(raw: object) -> tuple[float | None, str | None]:
    """A spool value as the float MLflow stores, or why it cannot be one.

    NaN is kept (MLflow stores it as NaN).
    """
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return None, "value-not-a-number"
    try:
        value = float(raw)
    except OverflowError:  # an integer past the float range
        return None, "value-infinite"
    return (None, "value-infinite") if math.isinf(value) else (value, None)


def step_of(raw: object) -> tuple[int | None, str | None]:
    """A spool step as MLflow's 64-bit integer, or why it cannot be one."""
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    if isinstance(raw, bool) or not isinstance(raw, int):
        return None, "step-not-an-integer"
    return (raw, None) if INT64_MIN <= raw <= INT64_MAX else (None, "step-out-of-range")


def time_problem(raw: object) -> str | None:
    """Why a spool time (seconds) cannot be a metric's timestamp.

    None when it can (or is absent: the relay's now).
    """
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        return "timestamp-out-of-range"
    return None if 0 <= raw * 1000 <= INT64_MAX else "timestamp-out-of-range"


class Tally:
    """Dropped values by reason, each with its first example (bounded).

    What ``result.json`` reports.
    """

    def __init__(self, counts: dict[str, int], examples: dict[str, str]):
        self.counts, self.examples = counts, examples

    def drop(self, reason: str, example: object, n: int = 1) -> None:
        """Count ``n`` values dropped for ``reason``, keeping the first example."""
        self.counts[reason] = self.counts.get(reason, 0) + n
        self.examples.setdefault(reason, str(example)[:MAX_EXAMPLE])


def describe(counts: dict[str, int], what: str = "values") -> list[str]:
    """One line per reason, largest first.

    Each reads like ``key-too-long: 3 values (a name longer than MLflow's 250 ...)``.
    """
    reasons = CHECKPOINT_REASONS if what == "checkpoints" else REASONS
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [f"{k}: {n:,} {what} ({reasons.get(k, k)})" for k, n in ordered if n]
