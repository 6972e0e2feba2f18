"""Agent-made text as lines and JSON: each line, depth and length bounded.

A spool line of 100,000 ``[`` or a megabyte with no newline is a ``too-deep`` / ``too-long``
finding, never a crash, a recursion error or a megabyte string.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path

from bench.untrusted.findings import BAD_JSON, TOO_DEEP, TOO_LONG, TOO_MANY, UNREADABLE, Finding
from bench.untrusted.limits import DEFAULT, Limits
from bench.untrusted.opening import check_regular, open_fd


def iter_lines(
    path: Path | str, base: Path, max_line: int | None = None, max_lines: int | None = None, limits: Limits = DEFAULT
) -> Iterator[str | Finding]:
    """The lines of a regular file (without their newline), each at most ``max_line`` bytes.

    An over-long line yields one ``too-long`` finding and is skipped to its end without being held;
    past ``max_lines`` one ``too-many`` finding ends the iteration. A file that cannot be opened
    yields its finding. Sparse files are refused (the holes read as NULs, megabytes of one "line").
    """
    max_line = limits.max_line if max_line is None else max_line
    max_lines = limits.max_entries if max_lines is None else max_lines
    fd = open_fd(path, Path(base))
    if isinstance(fd, Finding):
        yield fd
        return
    try:
        st = check_regular(fd, str(path), 0, limits, whole=False)
        if isinstance(st, Finding):
            yield st
            return
        with os.fdopen(fd, "rb", closefd=False) as raw:
            reader = io.BufferedReader(raw, 1 << 16)
            n = 0
            while True:
                line = reader.readline(max_line + 1)
                if not line:
                    return
                n += 1
                if n > max_lines:
                    yield Finding(str(path), TOO_MANY, f"more than {max_lines} lines")
                    return
                if len(line) > max_line and not line.endswith(b"\n"):
                    while line and not line.endswith(b"\n"):
                        line = reader.readline(1 << 16)
                    yield Finding(str(path), TOO_LONG, f"line {n} longer than {max_line} bytes")
                    continue
                yield line.rstrip(b"\n").decode("utf-8", "replace")
    except OSError as exc:
        yield Finding(str(path), UNREADABLE, exc.strerror or str(exc))
    finally:
        os.close(fd)


def json_depth_ok(text: str, max_depth: int) -> bool:
    """Whether ``text``'s brackets nest at most ``max_depth`` deep (strings skipped).

    Checked in one pass without recursion, so that ``json.loads`` never meets a depth that would
    exhaust Python's stack.
    """
    if text.count("[") + text.count("{") <= max_depth:  # the common case, at C speed: cannot nest deeper
        return True
    depth = 0
    in_str = False
    escaped = False
    for ch in text:
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > max_depth:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def loads_json(
    text: str | bytes, max_depth: int = DEFAULT.max_depth, max_len: int = DEFAULT.max_line, *, where: str = ""
) -> object | Finding:
    """``json.loads`` of agent-made text, bounded.

    Too long, too deep or invalid is a finding, never a raise.
    """
    import json

    if len(text) > max_len:
        return Finding(where, TOO_LONG, f"{len(text)} characters > {max_len}")
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not json_depth_ok(text, max_depth):
        return Finding(where, TOO_DEEP, f"nested deeper than {max_depth}")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        return Finding(where, BAD_JSON, str(exc)[:200])
