"""An agent whose model API keeps failing.

Found in its parsed event stream, ended early, recorded as an infrastructure failure (outcome
``interrupted``; campaigns run it again) rather than the agent's failure or timeout.

The signals are the API errors the CLIs themselves report, as the stream parsers turn them into
error events (measured with Claude Code 2.1.197 and Codex 0.169.0 against the mock,
tests/bench/agents/test_health.py): Claude Code's ``api_retry`` events (``error_status`` 401/403, or
none for a refused connection), Codex's ``Reconnecting... n/5 (unexpected status 401 ...)`` and
``Reconnecting... waiting for network``, and the error texts of Gemini CLI, OpenCode and Aider
(``Authentication``/``APIConnection`` errors, HTTP statuses). Each error text is classed by
:func:`classify`:

- ``auth``: 401/403, an invalid key, "Not logged in", an exhausted quota or credit: the account
  cannot be used;
- ``connection``: refused, reset, no route, a name that does not resolve, a timeout, "Reconnecting";
- ``unavailable``: 429, 5xx, overloaded: the service does not serve;
- anything else (a 400 for a malformed request, a tool's error) is not an API failure.

The rule (:class:`ApiHealth`): API failures with no sign that the model answered in between (a token
count, a tool call, an assistant text) that span :func:`window_s` (default 3 min,
``--api-fail-window``): the run is ended at the next failure past the window. An agent that ends (by
itself or at its budget) without the model ever having answered, after such failures, is an
infrastructure failure too (Codex with a revoked key exits in seconds; a budget spent on
"Reconnecting..." is not the agent's timeout). The harness's own proxy and bridges are not read:
each CLI reports the failures it meets, including those the bridges cause.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable

from bench import settings

_AUTH = re.compile(
    r"\b(?:401|403)\b|unauthori[sz]ed|authenticat|forbidden|permission[ _]denied|invalid[ _-]?(?:x-)?api[ _-]?key|"
    r"incorrect api key|api key not valid|not logged in|please run /login|invalid bearer|oauth token|"
    r"insufficient_quota|credit balance is too low|billing",
    re.I,
)
_CONNECTION = re.compile(
    r"reconnecting|connection (?:refused|reset|error|failed|closed)|econnrefused|econnreset|enotfound|eai_again|"
    r"ehostunreach|enetunreach|no route|getaddrinfo|name or service not known|network (?:error|is unreachable)|"
    r"fetch failed|error sending request|stream disconnected|unable to connect|apiconnectionerror|socket hang up|"
    r"timed? ?out|timeout",
    re.I,
)
_UNAVAILABLE = re.compile(
    r"\b(?:429|500|502|503|504|529)\b|overloaded|rate[ _-]?limit|resource[ _]exhausted|service unavailable|"
    r"internal server error|bad gateway",
    re.I,
)


def classify(text: str | None) -> str | None:
    """``auth``, ``connection``, ``unavailable`` or None (not an API failure) for one error text."""
    if not text:
        return None
    for kind, pattern in (("auth", _AUTH), ("connection", _CONNECTION), ("unavailable", _UNAVAILABLE)):
        if pattern.search(text):
            return kind
    return None


def window_s() -> float:
    """The window of the API-failure rule, in seconds.

    ``--api-fail-window``, else ``BENCH_API_FAIL_WINDOW`` seconds, else 180
    (:data:`bench.settings.API_FAIL_WINDOW_S`).
    """
    return settings.API_FAIL_WINDOW_S.get()


class ApiHealth:
    """Fed every parsed event of one run (:meth:`add`).

    Trips once by the rule of the module docstring, calling the ``end`` callback given to
    :meth:`end_with` (the watchdog's early end) with the reason.
    """

    def __init__(self, window: float | None = None, clock: Callable[[], float] = time.time) -> None:
        self.window = window_s() if window is None else float(window)
        self.clock = clock
        self.answered = False  # the model answered at least once
        self.failures = 0  # API failures since the last answer
        self.total = 0  # API failures in all
        self.first_t: float | None = None  # the first failure since the last answer
        self.last: tuple[str, str] | None = None  # (kind, text) of the last failure
        self.tripped: str | None = None  # why the run was ended
        self.started = clock()
        self._end: Callable[[str], None] | None = None
        self._lock = threading.Lock()

    def add(self, ev) -> None:
        """One parsed event (:class:`bench.agents.events.Event`)."""
        if ev.kind == "tool_call" or ev.tokens_output > 0 or (ev.kind == "message" and ev.text and not ev.is_error):
            with self._lock:
                self.answered, self.failures, self.first_t = True, 0, None
            return
        kind = classify(ev.text) if ev.is_error and ev.kind in ("message", "final") else None
        if kind is None:
            return
        now = self.clock()
        with self._lock:
            self.failures += 1
            self.total += 1
            self.first_t = now if self.first_t is None else self.first_t
            self.last = (kind, " ".join(str(ev.text).split())[:200])
            trip = self.tripped is None and self.failures >= 2 and now - self.first_t >= self.window
            if trip:
                self.tripped = self._why(now)
            end = self._end
        if trip and end is not None:
            end(self.ended())

    def end_with(self, end: Callable[[str], None]) -> None:
        """The callback that ends the run (called at once if the rule already tripped)."""
        with self._lock:
            self._end, why = end, self.tripped
        if why is not None:
            end(self.ended())

    def ended(self) -> str:
        """The watchdog's short reason for the early end (the details are in :meth:`failure`)."""
        return f"the model API kept failing for {self.window / 60:g} min (an infrastructure failure)"

    def _why(self, now: float) -> str:
        kind, text = self.last or ("?", "")
        span = (now - self.first_t) / 60 if self.first_t is not None else 0.0
        return f"the model API kept failing ({kind}: {text}; {self.failures} errors over {span:.1f} min)"

    def failure(self) -> dict | None:
        """The run's infrastructure failure, at its end, or None.

        For ``result.json``'s ``agent_events``.
        """
        with self._lock:
            if self.tripped is None and (self.answered or self.last is None):
                return None
            kind, text = self.last or ("?", "")
            why = self.tripped or f"the model API never answered ({kind}: {text}; {self.total} errors)"
            return {"kind": kind, "why": why, "errors": self.total, "ended_early": self.tripped is not None}


__all__ = ["ApiHealth", "classify", "window_s"]
