"""``llm.jsonl``: the gateway's one line per request, written when it ends, with no key in it.

Each line is appended and flushed at once, so a killed run keeps every request so far; the log stops
at :data:`LOG_LIMIT` lines (a request loop must not fill the harness's disk). The path is logged
with the values of a query's key parameters removed (:func:`safe_path`); credential headers are
never part of a line.
"""

from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

LOG_NAME = "llm.jsonl"
LOG_LIMIT = 100_000  # lines; a request loop must not fill the harness's disk
SECRET_PARAMS = ("key", "api_key", "apikey", "access_token")


def safe_path(path: str) -> str:
    """The request path as logged: query parameters that carry keys have their values removed."""
    parts = urlsplit(path)
    if not parts.query:
        return parts.path
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    q = [(k, "REDACTED" if k.lower() in SECRET_PARAMS else v) for k, v in pairs]
    return f"{parts.path}?{urlencode(q)}"


class RequestLog:
    """One gateway's ``llm.jsonl``: lines appended from any thread, at most :data:`LOG_LIMIT`."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._lines = 0

    def note(self, rec: dict) -> None:
        """Append one line and flush it at once (a killed harness keeps every request so far)."""
        with self._lock:
            self._lines += 1
            if self._lines > LOG_LIMIT:
                return
            if self._lines == LOG_LIMIT:
                rec = {"t": rec.get("t"), "truncated": f"more than {LOG_LIMIT} requests: the log stops here"}
            with contextlib.suppress(OSError), open(self.path, "a") as f:
                f.write(json.dumps(rec) + "\n")
