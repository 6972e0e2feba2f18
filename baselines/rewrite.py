"""A trial's script: the workspace's ``train.py`` with its module-level ``CONFIG = {...}`` changed, nothing else.

The values of the keys a trial changes are replaced in place (their comments stay), new keys are added at
the end of the dict, and every other byte of ``train.py`` is kept, so that the diff of ``run_<k>.py``
against ``train.py`` (logged on the trial's MLflow run) shows exactly the trial's configuration.

Standard library only: the Optuna driver reads and writes sources without importing torch.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from bench.errors import InputError


class ConfigError(InputError):
    """The script has no module-level ``CONFIG = {...}`` dict literal that can be read or rewritten."""


def find_config(source: str) -> ast.Dict:
    """The dict literal assigned to the module-level name ``CONFIG`` (the last assignment wins)."""
    found = None
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CONFIG" for t in node.targets):
            found = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "CONFIG":
            found = node.value
    if not isinstance(found, ast.Dict):
        raise ConfigError("no module-level `CONFIG = {...}` dict literal")
    if any(k is None or not isinstance(k, ast.Constant) or not isinstance(k.value, str) for k in found.keys):
        raise ConfigError("CONFIG must be a dict literal with string keys (no ** unpacking)")
    return found


def module_constants(source: str) -> dict[str, Any]:
    """Module-level ``NAME = <literal>`` assignments (e.g. ``SEQ_LEN = 336`` in prepare.py).

    ``NAME = len(OTHER)`` of an earlier literal counts too (``N_CLASSES = len(CLASSES)``): nothing is executed.
    """
    out: dict[str, Any] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            if (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Name)
                and value.func.id == "len"
                and len(value.args) == 1
                and isinstance(value.args[0], ast.Name)
                and value.args[0].id in out
            ):
                out[node.targets[0].id] = len(out[value.args[0].id])
                continue
            try:
                out[node.targets[0].id] = ast.literal_eval(value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                pass
    return out


def read_config(source: str, constants: dict[str, Any] | None = None) -> dict[str, Any]:
    """CONFIG's values: literals, and names resolved through ``constants`` (e.g. ``SEQ_LEN`` from prepare.py).

    An entry computed by code (``"pretrained": weights_path("convnext_tiny")``) is left out: it is not a knob
    a search can set, and rewriting the other entries leaves it as written.
    """
    names = {**(constants or {}), **module_constants(source)}
    node = find_config(source)
    out = {}
    for key, value in zip(node.keys, node.values, strict=True):
        try:
            out[key.value] = ast.literal_eval(value)
        except ValueError:
            if isinstance(value, ast.Name) and value.id in names:
                out[key.value] = names[value.id]
    return out


def literal(value: Any) -> str:
    """Python source for a plain value, in the style of the task files (double quotes, lists)."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        inner = ", ".join(literal(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items()) + "}"
    raise ConfigError(f"cannot write {type(value).__name__} value {value!r} into CONFIG")


def rewrite_config(source: str, overrides: dict[str, Any], comment: str | None = None) -> str:
    """``source`` with CONFIG's values for ``overrides`` replaced (or added), every other byte unchanged.

    ``comment`` goes after ``CONFIG = {`` when that line has no comment yet (e.g. ``# optuna trial 3``).
    """
    data = source.encode("utf-8")  # ast offsets are UTF-8 byte columns
    starts = [0]
    for line in data.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def pos(lineno: int, col: int) -> int:
        return starts[lineno - 1] + col

    node = find_config(source)
    edits: list[tuple[int, int, bytes]] = []  # (start, end, replacement), applied from the end
    present = set()
    for key, value in zip(node.keys, node.values, strict=True):
        if key.value in overrides:
            present.add(key.value)
            a, b = pos(value.lineno, value.col_offset), pos(value.end_lineno, value.end_col_offset)
            edits.append((a, b, literal(overrides[key.value]).encode()))
    added = [k for k in overrides if k not in present]
    close = pos(node.end_lineno, node.end_col_offset) - 1  # the closing brace
    if added:
        comma = True  # is there a comma after the last entry already (or no entry at all)?
        last_end = close
        if node.values:
            last = node.values[-1]
            last_end = pos(last.end_lineno, last.end_col_offset)
            comma = b"," in data[last_end:close].split(b"#")[0]
        if node.lineno != node.end_lineno and data[starts[node.end_lineno - 1] : close].strip() == b"":
            # the closing brace on a line of its own: one line per new key, above it
            if not comma:
                edits.append((last_end, last_end, b","))
            indent = _indent(data, starts, node)
            text = "".join(f"{indent}{literal(k)}: {literal(overrides[k])},  # added by the trial\n" for k in added)
            at = starts[node.end_lineno - 1]
            edits.append((at, at, text.encode()))
        else:
            prefix = "" if not node.values else (" " if comma else ", ")
            text = prefix + ", ".join(f"{literal(k)}: {literal(overrides[k])}" for k in added)
            edits.append((close, close, text.encode()))
    if comment:
        line_end = starts[node.lineno] if node.lineno < len(starts) - 1 else len(data)
        line = data[starts[node.lineno - 1] : line_end]
        brace = pos(node.lineno, node.col_offset) + 1
        if node.lineno != node.end_lineno and b"#" not in line and data[brace:line_end].strip() == b"":
            eol = starts[node.lineno - 1] + len(line.rstrip(b"\r\n"))
            edits.append((eol, eol, f"  # {comment}".encode()))
    for a, b, text in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        data = data[:a] + text + data[b:]
    out = data.decode("utf-8")
    ast.parse(out)  # never hand out a script that does not parse
    return out


def _indent(data: bytes, starts: list[int], node: ast.Dict) -> str:
    """The indentation of CONFIG's entries (4 spaces if it cannot be seen)."""
    if node.keys and node.keys[0].lineno != node.lineno:
        line = data[starts[node.keys[0].lineno - 1] : starts[node.keys[0].lineno]].decode("utf-8")
        return line[: len(line) - len(line.lstrip())]
    return "    "
