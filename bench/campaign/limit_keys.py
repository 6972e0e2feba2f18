"""A campaign file's limits: the ``bench run`` limit flags as top-level keys (``--memory`` -> ``memory``,
``--max-processes`` -> ``max_processes``, ...), with the flags' meaning and defaults
(:mod:`bench.sandbox.resource_limits`),
checked with the rest of the file (:mod:`bench.campaign.spec`); and the Slurm job's evaluation margin, which must
follow the evaluation budget: a job whose time limit ends inside its run's evaluation is killed there, requeued,
and evaluates again from the start.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from bench.durations import fmt_s, parse_duration
from bench.pipeline.evaluate import SCORER_GRACE_S
from bench.preflight import InputError
from bench.sandbox.resource_limits import LEAST, MIN_EVAL_S, LimitError, Limits, parse_size

KEYS = {  # the key of each limit (Limits' field), named after its bench run flag
    "memory": "memory_bytes", "max_processes": "processes", "workspace_limit": "workspace_bytes",
    "log_limit": "log_bytes", "eval_budget": "eval_s",
}  # fmt: skip
AFTER_EVAL_S = 10 * 60  # a Slurm job's time after the evaluation: the relay's last values, collect, audit, record


def parse(raw: dict, bad: Callable[[str, str], Exception]) -> Limits:
    """The ``memory``, ``max_processes``, ``workspace_limit``, ``log_limit`` and ``eval_budget`` keys, each
    checked as its ``bench run`` flag is (:func:`bench.preflight.parse_limits`); the defaults for those absent."""
    values = Limits().to_dict()
    for key, name in KEYS.items():
        if key not in raw:
            continue
        value = raw[key]
        off = isinstance(value, str) and value.strip().lower() == "none"
        if off and key in ("log_limit", "eval_budget"):
            what = 'agent.log always has a limit; give a size, e.g. log_limit = "1G"'
            if key == "eval_budget":
                what = 'the evaluation always has a budget; give a duration, e.g. eval_budget = "1h"'
            raise bad(key, f"cannot be none: {what}")
        if off:
            values[name] = None
        elif key == "eval_budget":
            if not isinstance(value, str):
                raise bad(key, f'write a duration as a string, e.g. eval_budget = "1h" (got {value!r})')
            try:
                values[name] = float(parse_duration(value))
            except Exception as e:  # argparse's error type: the message is the one line
                raise bad(key, str(e)) from None
            if not (math.isfinite(values[name]) and values[name] >= MIN_EVAL_S):
                raise bad(key, f'{value!r} cannot score a checkpoint: give at least {MIN_EVAL_S:g}s, e.g. "1h"')
        elif key == "max_processes":
            if isinstance(value, bool) or not isinstance(value, int):
                raise bad(key, f"must be a whole number (got {value!r})")
            values[name] = value
        elif isinstance(value, str):
            try:
                values[name] = parse_size(value)
            except LimitError as e:
                raise bad(key, str(e)) from None
        elif isinstance(value, int) and not isinstance(value, bool):
            values[name] = value  # bytes
        else:
            raise bad(key, f'write a size as a string, e.g. {key} = "64G", or "none" (got {value!r})')
        least = LEAST.get(name)
        if least is not None and values[name] is not None and values[name] < least:
            raise bad(key, f'{value!r} is too small to run anything: give at least {_size(least, key)} (or "none")')
    return Limits(**values)


def _size(n: int, key: str) -> str:
    """A limit's least value as the file would write it: 16 processes, "64M" bytes."""
    if key == "max_processes":
        return str(n)
    unit, size = next((u, b) for u, b in (("G", 2**30), ("M", 2**20), ("K", 2**10), ("", 1)) if n % b == 0)
    return f'"{n // size}{unit}"'


def eval_margin_s(limits: Limits) -> float:
    """A Slurm job's time after the agent's (``slurm.eval_margin`` left out): the evaluation budget, the scorer's
    grace to report after it, and :data:`AFTER_EVAL_S` for the rest."""
    return limits.eval_s + SCORER_GRACE_S + AFTER_EVAL_S


def fit_to_margin(given_s: float, limits: Limits) -> Limits:
    """The limits with an evaluation budget that fits a ``slurm.eval_margin`` given without ``eval_budget`` (a file
    written before the key existed keeps working): the margin less the scorer's grace and the time after the
    evaluation (:data:`AFTER_EVAL_S`, at most half the margin); a 20-minute margin leaves 9 minutes. A margin too
    short for even :data:`MIN_EVAL_S` is left to :func:`check_margin` to refuse."""
    fitted = given_s - SCORER_GRACE_S - min(AFTER_EVAL_S, given_s / 2)
    if fitted < MIN_EVAL_S:
        return limits
    return Limits(**{**limits.to_dict(), "eval_s": min(limits.eval_s, fitted)})


def check_margin(given_s: float | None, limits: Limits, where: str) -> None:
    """InputError for a ``slurm.eval_margin`` that does not cover the evaluation budget and the scorer's grace."""
    least = limits.eval_s + SCORER_GRACE_S
    if given_s is not None and given_s < least:
        raise InputError(
            f"{where}: slurm.eval_margin: {fmt_s(given_s)} does not cover the evaluation budget "
            f"({fmt_s(limits.eval_s)}) and the scorer's {SCORER_GRACE_S:.0f} s to report: Slurm would end jobs in "
            f"their evaluation; give at least {fmt_s(least)} or leave it out (then {fmt_s(eval_margin_s(limits))})"
        )
