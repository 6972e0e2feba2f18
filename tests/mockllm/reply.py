"""What the mock model says in one turn, independent of the wire format, and SSE framing helpers."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

from tests.mockllm.trajectory import Call

_ids = itertools.count(1)


def new_id(prefix: str) -> str:
    return f"{prefix}{next(_ids):08d}mock"


@dataclass(frozen=True)
class Reply:
    """One assistant turn: a text, or a tool call (with an optional short text before it)."""

    model: str
    text: str = ""
    call: Call | None = None
    input_tokens: int = 1
    output_tokens: int = 1

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def sse(data: dict | str, event: str | None = None) -> bytes:
    """One server-sent event: an optional ``event:`` line, one ``data:`` line, a blank line."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def chunks(text: str, size: int = 24) -> list[str]:
    """Split a text into deltas, as a real stream does (at least one, possibly empty)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def estimate_tokens(n_chars: int) -> int:
    return max(1, n_chars // 4)
