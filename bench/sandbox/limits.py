"""The value of one run's resource limits, validated by its model wherever it is read.

The model is :class:`Limits`.

Each limit has a default that fits the paper's machine (Appendix B: one A100 80 GB of a DGX A100
node with 64 GB of system RAM and 16 cores allocated to the run), a ``bench run`` flag, a campaign
file's key (the flag's name with underscores) and a field of ``run.json``/``result.json``; the three
are read by this one model, so a limit no run can live with is refused whichever way it came (a
flag, a file, a hand-edited ``run.json`` on ``--resume``). How they are held (cgroups, rlimits) is
:mod:`bench.sandbox.resource_limits`'s.

The forms: a campaign file writes sizes as text (``"64G"``, ``"512M"``, powers of 1024, or a whole
number of bytes), durations as text (``"1h"``) and ``"none"`` to switch a limit off (the validation
context's form ``"file"``); the flags (after argparse) and the stored files give the values
themselves (bytes, seconds, null).
"""

from __future__ import annotations

import argparse
import math
import os
import re
from dataclasses import asdict
from typing import Any

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic.dataclasses import dataclass

from bench import validation
from bench.durations import parse_duration
from bench.errors import InputError, Problems

KIB, MIB, GIB = 2**10, 2**20, 2**30

DEFAULT_MEMORY = 64 * GIB  # the paper's allocation (Appendix B: 64 GB of system RAM per run)
MEMORY_SHARE = 0.8  # but never more than this share of this machine's RAM: the harness must outlive the agent
DEFAULT_PROCESSES = 4096  # processes and threads (a cgroup counts threads): data loaders, a Node CLI, OpenMP pools
DEFAULT_WORKSPACE = 200 * GIB  # the data copies (T3's VOC is the largest, ~2 GB) and many checkpoints
DEFAULT_LOG = 128 * MIB  # agent.log: the first and the last half of this are kept
LINE_BYTES = 4 * MIB  # one output line is read at most this long; the rest of it is dropped (and counted)
DEFAULT_EVAL_S = 3600.0  # all candidates of a run together; one candidate gets at most the scorer's own 15 min
MIN_EVAL_S = 10.0
# the least value a run can live with
LEAST = {"memory_bytes": 64 * MIB, "processes": 16, "workspace_bytes": MIB, "log_bytes": 64 * KIB}

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.I)


class LimitError(InputError):
    """A limit that cannot be used (not a size, too small).

    The message says what to give instead (exit 2).
    """


def parse_size(text: str) -> int:
    """``"64G"``, ``"512MiB"``, ``"1.5g"``, ``"1048576"`` -> bytes (powers of 1024)."""
    m = _SIZE.match(str(text))
    if not m:
        raise LimitError(f"{text!r} is not a size: give a number with an optional unit, e.g. 64G, 512M or 300MiB")
    return int(float(m.group(1)) * 1024 ** "_kmgt".index((m.group(2) or "_").lower()))


def machine_memory() -> int:
    """This machine's RAM in bytes (``/proc/meminfo``'s MemTotal; 0 when unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def default_memory() -> int:
    """:data:`DEFAULT_MEMORY`, or :data:`MEMORY_SHARE` of this machine's RAM when that is less."""
    total = machine_memory()
    return min(DEFAULT_MEMORY, int(total * MEMORY_SHARE)) if total else DEFAULT_MEMORY


def _limit(flag: str, kind: str, expects: str, doc: str) -> dict[str, Any]:
    """A limit's metadata: its flag, its campaign file key, its text form and what it expects.

    The flag is ``bench run``'s.
    """
    return {"flag": flag, "key": flag[2:].replace("-", "_"), "kind": kind, "expects": expects, "help": doc}


def _file_text(key: str, kind: str, value: object, info: ValidationInfo) -> object:
    """A campaign file's text form of a limit, as a value (bytes, seconds, None).

    Other forms pass unchanged.
    """
    if validation.form(info) != "file":
        return value
    off = isinstance(value, str) and value.strip().lower() == "none"
    if off and key == "log_limit":
        raise validation.bad('cannot be none: agent.log always has a limit; give a size, e.g. log_limit = "1G"')
    if off and key == "eval_budget":
        why = 'the evaluation always has a budget; give a duration, e.g. eval_budget = "1h"'
        raise validation.bad(f"cannot be none: {why}")
    if off:
        return None
    match kind, value:
        case "duration", str():
            try:
                seconds = float(parse_duration(value))
            except argparse.ArgumentTypeError as e:
                raise validation.bad(str(e)) from None
            if not (math.isfinite(seconds) and seconds >= MIN_EVAL_S):
                raise validation.bad(f'{value!r} cannot score a checkpoint: give at least {MIN_EVAL_S:g}s, e.g. "1h"')
            return seconds
        case "duration", _:
            raise validation.bad(f'write a duration as a string, e.g. {key} = "1h" (got {value!r})')
        case "size", str():
            try:
                size = parse_size(value)
            except LimitError as e:
                raise validation.bad(str(e)) from None
            least = LEAST[KEYS[key]]
            if size < least:
                shown = f'"{_size(least)}" (or "none")'
                raise validation.bad(f"{value!r} is too small to run anything: give at least {shown}")
            return size
        case "size", bool() | float():
            raise validation.bad(f'write a size as a string, e.g. {key} = "64G", or "none" (got {value!r})')
    return value  # a count, or a size in bytes: the field's own type decides


@dataclass(frozen=True, config=ConfigDict(extra="forbid", revalidate_instances="always"))
class Limits:
    """One run's limits; ``None`` switches a limit off (``--memory none``).

    ``result.json`` then shows it.
    """

    memory_bytes: int | None = Field(
        default_factory=default_memory,
        strict=True,
        json_schema_extra=_limit(
            "--memory", "size", "a whole number or null",
            "memory of the agent's processes together: 64G (default: 64G, at most 80%% of this machine's RAM), "
            "or none",
        ),
    )  # fmt: skip
    processes: int | None = Field(
        DEFAULT_PROCESSES,
        strict=True,
        json_schema_extra=_limit(
            "--max-processes", "count", "a whole number",
            "processes and threads of the agent (default 4096), or none",
        ),
    )  # fmt: skip
    workspace_bytes: int | None = Field(
        DEFAULT_WORKSPACE,
        strict=True,
        json_schema_extra=_limit(
            "--workspace-limit", "size", "a whole number or null",
            "workspace size; 10%% more ends the run (default 200G)",
        ),
    )  # fmt: skip
    log_bytes: int = Field(
        DEFAULT_LOG,
        strict=True,
        json_schema_extra=_limit(
            "--log-limit", "size", "a whole number", "agent.log: its first and last half kept (default 128M)"
        )
        | {"off": False},
    )
    eval_s: float = Field(
        DEFAULT_EVAL_S,
        strict=True,
        json_schema_extra=_limit(
            "--eval-budget", "duration", "a number of seconds", "evaluation time for all candidates (default 1h)"
        ),
    )

    @field_validator("memory_bytes", "processes", "workspace_bytes", "log_bytes", "eval_s", mode="before")
    @classmethod
    def _text(cls, value: object, info: ValidationInfo) -> object:
        extra = FIELDS[info.field_name].json_schema_extra
        return _file_text(extra["key"], extra["kind"], value, info)

    @field_validator("memory_bytes", "processes", "workspace_bytes", "log_bytes")
    @classmethod
    def _least(cls, value: int | None, info: ValidationInfo) -> int | None:
        least = LEAST[info.field_name]
        if value is not None and value < least:
            shown = str(least) if info.field_name == "processes" else f'"{_size(least)}"'
            if validation.form(info) != "file":
                shown = f"{least} (or 'none')"
            raise validation.bad(f"{value} is too small to run anything: give at least {shown}")
        return value

    @field_validator("eval_s")
    @classmethod
    def _scores(cls, value: float) -> float:
        if not (math.isfinite(value) and value >= MIN_EVAL_S):
            raise validation.bad(f"{value:g} s cannot score a checkpoint: give at least {MIN_EVAL_S:g}s, e.g. 1h")
        return value

    @model_validator(mode="before")
    @classmethod
    def _whole(cls, data: Any, info: ValidationInfo) -> Any:
        """A stored table of limits (``run.json``) names all five.

        One that lacks some was not written by a run.
        """
        if validation.form(info) == "json" and isinstance(data, dict):
            if missing := sorted(set(FIELDS) - set(data)):
                raise validation.bad(f"lacks {', '.join(missing)}")
        return data

    @property
    def line_bytes(self) -> int:
        """The longest output line kept whole: at most half the log, at most :data:`LINE_BYTES`."""
        return max(1024, min(LINE_BYTES, self.log_bytes // 2))

    def check(self, names: dict[str, str] | None = None) -> None:
        """LimitError for a limit no run can live with (a value set after the model judged it)."""
        try:
            Limits(**asdict(self))
        except ValidationError as e:
            named = {**FLAGS, **(names or {})}
            said = validation.lines(e, lambda loc: named.get(str(loc[0]), str(loc[0])) if loc else "")
            raise LimitError(said[0]) from None

    def to_dict(self) -> dict:
        """The limits as ``run.json`` and ``result.json`` store them.

        Bytes, seconds, null: no limit.
        """
        return asdict(self)


_ADAPTER = TypeAdapter(Limits)
FIELDS = validation.fields_of(Limits)
FLAGS = {name: info.json_schema_extra["flag"] for name, info in FIELDS.items()}  # each limit's bench run flag
KEYS = {info.json_schema_extra["key"]: name for name, info in FIELDS.items()}  # a campaign file's key -> field


def _size(n: int) -> str:
    """A limit's least size as a file would write it: "64M"."""
    unit, size = next((u, b) for u, b in (("G", GIB), ("M", MIB), ("K", KIB), ("", 1)) if n % b == 0)
    return f"{n // size}{unit}"


def read(raw: object, form: str, name: validation.Namer) -> Limits:
    """Limits from a table in ``form``, each problem named by ``name``.

    Forms: "file" (a campaign file's keys and text), "json" (``run.json``'s whole table), "python"
    (the flags' values). LimitError for one problem, Problems for several.
    """
    try:
        return _ADAPTER.validate_python(raw, context={validation.FORM: form})
    except ValidationError as e:
        found = validation.lines(e, name, Limits)
        if len(found) > 1:
            raise Problems(found) from None
        raise LimitError(found[0]) from None


def arg(kind: str, off: bool = True):
    """The argparse type of a limit's flag.

    A size or a count as text, or ``none`` (:data:`OFF`, where ``off``).
    """

    def parse(text: str) -> int | str:
        if text.strip().lower() == OFF:
            if not off:
                raise argparse.ArgumentTypeError("none: agent.log always has a limit; give a size, e.g. 1G")
            return OFF
        if kind == "count":
            try:
                return int(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{text!r} is not a count: give a whole number, e.g. 4096") from None
        try:
            return parse_size(text)
        except LimitError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = kind  # argparse names the type in its message
    return parse


OFF = "none"  # a flag's word for a limit switched off
