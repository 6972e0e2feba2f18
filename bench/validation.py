"""The models' validation errors, each said in one line the way the user wrote the value.

The toolkit's values are judged by their pydantic models only (:class:`bench.runspec.RunSpec`,
:class:`bench.sandbox.limits.Limits`, the campaign file of :mod:`bench.campaign.spec`,
:mod:`bench.settings`). A validator raises :func:`bad` with what is wrong and what to give;
pydantic's own errors (a wrong type, a missing or unknown key) get a phrase here. :func:`lines`
turns a ``ValidationError`` into one line per problem, each starting with the value's name as the
caller says the user wrote it: a flag (``--max-cost``), a file's key (``campaign.toml: max_cost:``)
or a stored field (``max_cost``). An unknown key is named with the nearest known one (``did you mean
memory?``). :func:`refuse` raises them as one :class:`bench.errors.InputError` or
:class:`bench.errors.Problems` (exit 2).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticCustomError

from bench.errors import InputError, Problems

Loc = tuple[str | int, ...]
Namer = Callable[[Loc], str]  # a value's place in the model -> its name as the user wrote it ("" for the whole)

FORM = "form"  # the validation context's key: "file" for a campaign file's text forms ("64G", "40m", "none")

# pydantic's own error types, said as what to give (a model's field may say it better: its
# "expects")
PHRASES = {
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "dict_type": "must be a table",
    "dataclass_type": "must be a table",
    "model_type": "must be a table",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "missing": "is missing",
    "literal_error": "must be one of {expected}",
    "greater_than_equal": "must be at least {ge}",
    "greater_than": "must be more than {gt}",
    "string_too_short": "must not be empty",
}


def bad(why: str, field: str | None = None) -> PydanticCustomError:
    """The error a validator raises.

    ``why`` is said after the value's name (``field``: a model-wide check's).
    """
    return PydanticCustomError("bench", "{why}", {"why": why, "field": field})


def form(info: Any) -> str:
    """The form the values are given in, from a validator's ``info``.

    "file" or "python" (typed values).
    """
    return (getattr(info, "context", None) or {}).get(FORM, "python")


def suggest(key: object, known: Iterable[str]) -> str:
    """``did you mean X?`` for the known key nearest ``key``, else the list of known keys."""
    known = sorted(known)
    near = difflib.get_close_matches(str(key), known, 1)
    return f"did you mean {near[0]}?" if near else f"known: {', '.join(known)}"


def fields_of(model: Any) -> dict[str, Any]:
    """A pydantic model's (or pydantic dataclass's) fields: name -> FieldInfo."""
    return dict(getattr(model, "__pydantic_fields__", {}))


def meta(model: Any, loc: Loc) -> dict[str, Any]:
    """The ``json_schema_extra`` of the field at ``loc``.

    Nested models are followed; {} where there is none.
    """
    extra: dict[str, Any] = {}
    for part in loc:
        info = fields_of(model).get(part)
        if info is None:  # a key or an index inside the field found last
            return extra
        extra, model = dict(info.json_schema_extra or {}), info.annotation
    return extra


def lines(error: ValidationError, name: Namer, model: Any = None) -> list[str]:
    """One line per problem of ``error``.

    The value's name (``name(loc)``), then what is wrong and what to do.
    """
    return list(dict.fromkeys(line for _, line in located(error, name, model)))


def located(error: ValidationError, name: Namer, model: Any = None) -> list[tuple[Loc, str]]:
    """:func:`lines`, each with its place in the model.

    An unknown key's place ends with the key.
    """
    out = []
    for e in error.errors(include_url=False):
        loc, ctx = tuple(e["loc"]), e.get("ctx") or {}
        if e["type"] == "bench":
            loc = (*loc, ctx["field"]) if ctx.get("field") else loc
            why = str(ctx["why"])
        elif e["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
            known = fields_of(_model_at(model, loc[:-1]))
            said = name(loc)
            out.append((loc, f"{said}{'' if said.endswith(':') else ':'} unknown key; {suggest(loc[-1], known)}"))
            continue
        else:
            expects = meta(model, loc).get("expects") if model is not None else None
            phrase = f"must be {expects}" if expects else PHRASES.get(e["type"], e["msg"]).format(**ctx)
            why = phrase if e["type"] == "missing" else f"{phrase} (got {e['input']!r})"
        said = name(loc)
        out.append((loc, f"{said} {why}" if said else why))
    return out


def _model_at(model: Any, loc: Loc) -> Any:
    for part in loc:
        info = fields_of(model).get(part)
        if info is None:
            return model
        model = info.annotation
    return model


def refuse(error: ValidationError, name: Namer, model: Any = None) -> InputError:
    """The error to raise for ``error``.

    One :class:`InputError` for one problem, :class:`Problems` for several.
    """
    found = lines(error, name, model)
    return InputError(found[0]) if len(found) == 1 else Problems(found)
