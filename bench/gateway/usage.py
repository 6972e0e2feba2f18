"""Token usage read from the LLM API's own answers, as the metering gateway sees them.

The gateway: :mod:`bench.gateway.proxy`.

Four wire formats, each JSON or SSE-streamed, carry usage in different places:

- Anthropic Messages: ``usage`` of the message; streamed, ``message_start`` (input, cache reads and
  writes) and ``message_delta`` (output so far: cumulative, the last one counts);
- OpenAI Responses: ``usage`` of the response; streamed, on ``response.completed``
  (or ``.incomplete``/``.failed``);
- Chat Completions: ``usage`` of the completion; streamed, on the last chunk when
  ``stream_options.include_usage`` is set (the gateway sets it);
- Gemini ``generateContent``: ``usageMetadata``; streamed, on every chunk, cumulative: the last
  one counts.

Semantics as in :mod:`bench.agents.pricing`: ``input`` is every prompt token, cached ones included;
``cached`` the part read from the prompt cache; ``cache_write`` the part written to it (Anthropic
bills it apart). A stream that ended before its usage arrived (the CLI killed at the budget, a
dropped connection) keeps what had arrived, and ``complete`` is False: Responses and Chat streams
report nothing before their end, Anthropic's the input at its start.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

_GEMINI = re.compile(r"/models/([^/:]+):(stream)?[gG]enerateContent")


def api_of(method: str, path: str) -> str | None:
    """Which model API a request path calls (base URLs with or without /v1).

    None for anything else (model lists, token counts: metered as requests, no tokens).
    """
    p = path.split("?", 1)[0]
    if method != "POST":
        return None
    if p.endswith("/messages"):
        return "anthropic"
    if p.endswith("/responses"):
        return "responses"
    if p.endswith("/chat/completions"):
        return "chat"
    if _GEMINI.search(p):
        return "gemini"
    return None


def _n(d: object, *keys: str) -> int:
    """The sum of the integer fields ``keys`` of ``d``.

    0 where absent, not a number, or ``d`` not a dict.
    """
    if not isinstance(d, dict):
        return 0
    return sum(v for k in keys if isinstance(v := d.get(k), int) and not isinstance(v, bool) and v > 0)


@dataclass
class Usage:
    """What one request used, as far as its answer said."""

    api: str | None
    model: str | None = None
    input: int = 0
    output: int = 0
    cached: int = 0
    cache_write: int = 0
    complete: bool = False  # the answer's final usage arrived (a whole JSON body, a stream's closing event)
    _buf: bytes = field(default=b"", repr=False)

    # --- whole JSON answers -----------------------------------------------------------------------
    def read_json(self, body: bytes) -> None:
        """Read the usage of a whole JSON answer (a body that is no JSON is left unread)."""
        try:
            o = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return
        if isinstance(o, list):  # Gemini's non-SSE stream: a JSON array of chunks
            for chunk in o:
                self.event(chunk)
        elif isinstance(o, dict):
            self.event(o, whole=True)

    # --- SSE --------------------------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        """Bytes of an SSE stream as they arrive, in any cut.

        Each complete ``data:`` line is read.
        """
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            line = line.rstrip(b"\r")
            if line.startswith(b"data:"):
                payload = line[5:].strip()
                if payload and payload != b"[DONE]":
                    try:
                        o = json.loads(payload)
                    except (ValueError, UnicodeDecodeError):
                        continue
                    if isinstance(o, dict):
                        self.event(o)
        if len(self._buf) > 16 << 20:  # a line without end: not SSE as we know it
            self._buf = b""

    # --- one JSON object of any of the four APIs --------------------------------------------------
    def event(self, o: dict, whole: bool = False) -> None:
        """Read the usage one JSON object carries (an SSE event, or, ``whole``, a whole answer)."""
        t = o.get("type")
        if self.api == "anthropic":
            if t == "message_start":
                self._anthropic(o.get("message") or {})
            elif t == "message_delta":
                self._anthropic(o, delta=True)
            elif t == "message_stop":
                self.complete = True
            elif whole and t == "message":
                self._anthropic(o)
                self.complete = True
        elif self.api == "responses":
            r = o.get("response") if isinstance(o.get("response"), dict) else (o if whole else {})
            self.model = r.get("model") or self.model
            if t in ("response.completed", "response.incomplete", "response.failed") or whole:
                u = r.get("usage") or {}
                self.input, self.output = _n(u, "input_tokens"), _n(u, "output_tokens")
                self.cached = _n(u.get("input_tokens_details"), "cached_tokens")
                self.complete = True
        elif self.api == "chat":
            self.model = o.get("model") or self.model
            if isinstance(u := o.get("usage"), dict):
                self.input, self.output = _n(u, "prompt_tokens"), _n(u, "completion_tokens")
                self.cached = _n(u.get("prompt_tokens_details"), "cached_tokens")
                self.complete = True
        elif self.api == "gemini":
            self.model = o.get("modelVersion") or self.model
            if isinstance(u := o.get("usageMetadata"), dict):
                self.input = _n(u, "promptTokenCount")
                self.output = _n(u, "candidatesTokenCount", "thoughtsTokenCount")  # thinking is billed as output
                self.cached = _n(u, "cachedContentTokenCount")
                self.complete = self.complete or whole or any(c.get("finishReason") for c in _list(o, "candidates"))

    def _anthropic(self, m: dict, delta: bool = False) -> None:
        self.model = m.get("model") or self.model
        u = m.get("usage")
        if not isinstance(u, dict):
            return
        if "input_tokens" in u or not delta:  # message_start, or a delta that repeats the input (newer API)
            self.cached = _n(u, "cache_read_input_tokens")
            self.cache_write = _n(u, "cache_creation_input_tokens")
            self.input = _n(u, "input_tokens") + self.cached + self.cache_write
        if "output_tokens" in u:
            self.output = _n(u, "output_tokens")  # cumulative: the last one counts


def _list(o: dict, key: str) -> list[dict]:
    v = o.get(key)
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def request_model(api: str | None, path: str, body: dict | None) -> str | None:
    """The model a request asks for: in the body (``model``), or for Gemini in the path."""
    if api == "gemini" and (m := _GEMINI.search(path.split("?", 1)[0])):
        return m.group(1)
    model = (body or {}).get("model")
    return model if isinstance(model, str) else None
