"""``bench run``'s flags of the run's description, generated from the model's fields.

The model: :mod:`bench.runspec`.

Each field of :class:`bench.runspec.RunSpec` (and of :class:`bench.sandbox.limits.Limits`) that
declares an ``arg`` kind becomes a flag here, with its help; :func:`layer` reads them back as the
command line's layer of the description. A field added to the model with a flag is a flag of ``bench
run`` without a line here.
"""

from __future__ import annotations

import argparse
from typing import Any

from bench import runspec, validation
from bench.durations import parse_duration
from bench.sandbox import limits as limits_model


def key_value(text: str) -> tuple[str, str]:
    """``--agent-option KEY=VALUE`` -> (key, value); argparse's error otherwise."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def tag(text: str) -> tuple[str, str]:
    """``--tag KEY=VALUE`` -> (key, value).

    Argparse's error (``bench`` exits 2) saying what is expected.
    """
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}: e.g. --tag team=vision")
    if why := runspec._bad_tag(key, value):
        raise argparse.ArgumentTypeError(f"{text!r}: {why}")
    return key, value


# each kind's argparse options: a flag's text -> the field's value (the model judges the value)
KINDS: dict[str, dict[str, Any]] = {
    "duration": {"type": parse_duration, "metavar": "DURATION"},
    "float": {"type": float},
    "int": {"type": int},
    "str": {},
    "switch": {"action": "store_const", "const": True},
    "unswitch": {"action": "store_const", "const": False},
    "pairs": {"action": "append", "type": key_value, "metavar": "KEY=VALUE"},
    "tags": {"action": "append", "type": tag, "metavar": "KEY=VALUE"},
}
LIMIT_METAVARS = {"size": "SIZE", "count": "N"}


def _flags(model: type) -> list[tuple[str, dict[str, Any]]]:
    """(field, metadata) of each field of ``model`` (and its limits) given by a generated flag."""
    found = [(name, dict(info.json_schema_extra or {})) for name, info in validation.fields_of(model).items()]
    found += [(f"limits.{name}", {**meta, "arg": meta["kind"]}) for name, info in limits_model.FIELDS.items()
              for meta in [dict(info.json_schema_extra or {})]]  # fmt: skip
    return [(name, m) for name, m in found if m.get("arg")]


def add_flags(parser: argparse.ArgumentParser, model: type | None = None) -> None:
    """The description's flags on ``bench run``'s parser.

    ``model``: :class:`bench.runspec.RunSpec` by default.
    """
    for name, m in _flags(model or runspec.RunSpec):
        if m["arg"] in LIMIT_METAVARS:
            options = {"type": limits_model.arg(m["arg"], m.get("off", True)), "metavar": LIMIT_METAVARS[m["arg"]]}
        else:
            options = dict(KINDS[m["arg"]])
            if m["arg"] not in ("switch", "unswitch"):  # --grace GRACE, not the dest's SPEC:GRACE_S
                options["metavar"] = m.get("metavar") or options.get("metavar") or m["flag"][2:].upper()
        parser.add_argument(m["flag"], dest=f"spec:{name}", default=None, help=m.get("help"), **options)


def layer(args: argparse.Namespace, model: type | None = None) -> dict[str, Any]:
    """The command line's layer of the description.

    A flag left out is None, so the layer below stays.
    """
    out: dict[str, Any] = {"limits": {}}
    for name, m in _flags(model or runspec.RunSpec):
        value = getattr(args, f"spec:{name}", None)
        if value is not None and m["arg"] in ("pairs", "tags"):
            value = dict(value)
        if name.startswith("limits."):
            if value is not None:  # given; "none": switched off
                out["limits"][name.removeprefix("limits.")] = None if value == limits_model.OFF else value
        else:
            out[name] = value
    return out
