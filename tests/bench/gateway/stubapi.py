"""A stub LLM API on 127.0.0.1 (plain HTTP) that records every request line and header it receives, for the gateway's
edge tests (tests/bench/gateway/test_edge.py).

It answers the four model APIs with the wire shapes of tests/mockllm (Anthropic Messages, OpenAI Responses and Chat
Completions, Gemini), streamed when the request asks, one event every ``pace`` seconds, so that a client can leave
mid-answer; a whole JSON answer comes after ``delay`` seconds (requests in parallel are then all in flight at once).
Anything else is answered by a reflection of the request (its line and headers), as an upstream that echoes would:
what such an upstream could hand back to the agent is exactly what it received.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.mockllm import anthropic as mock_anthropic
from tests.mockllm import gemini as mock_gemini
from tests.mockllm import openai as mock_openai
from tests.mockllm.reply import Reply, sse


@dataclass
class Seen:
    line: str  # the request line as received: method, target, version
    headers: dict[str, str]
    body: bytes


def gemini_stream(reply: Reply) -> list[bytes]:
    """Gemini's stream as the API sends it: every chunk says the prompt's tokens, only the last one (with the finish
    reason) the answer's; tests/mockllm's chunks all carry the final counts, which would hide a stream left early."""
    out = []
    events = list(mock_gemini.stream(reply))
    for i, ev in enumerate(events):
        o = json.loads(ev.decode().split("data: ", 1)[1])
        if i < len(events) - 1:
            o["usageMetadata"] = {"promptTokenCount": reply.input_tokens}
        out.append(sse(o))
    return out


@dataclass
class StubAPI:
    """``reply``: what each model request is answered with (its usage: the API's own figures)."""

    reply: Reply
    pace: float = 0.0
    delay: float = 0.0
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a) -> None:
                pass

            def _any(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                stub.seen.append(Seen(self.requestline, {k.lower(): v for k, v in self.headers.items()}, body))
                stub.answer(self, body)

            do_GET = do_POST = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def events(self, path: str) -> list[bytes] | None:
        r = self.reply
        if path.startswith("/v1/messages"):
            return list(mock_anthropic.stream(r))
        if path.startswith("/v1/responses"):
            return list(mock_openai.responses_stream(r))
        if path.startswith("/v1/chat/completions"):
            return list(mock_openai.chat_stream(r))
        if ":streamGenerateContent" in path:
            return gemini_stream(r)
        return None

    def whole(self, path: str) -> dict | None:
        r = self.reply
        if path.split("?")[0] == "/v1/messages":
            return mock_anthropic.message(r)
        if path.startswith("/v1/responses"):
            return mock_openai.response(r)
        if path.startswith("/v1/chat/completions"):
            return mock_openai.completion(r)
        if ":generateContent" in path:
            return mock_gemini.generate(r)
        return None

    def answer(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        try:
            asked = json.loads(body) if body else {}
        except ValueError:
            asked = {}
        streamed = bool(isinstance(asked, dict) and asked.get("stream")) or ":streamGenerateContent" in h.path
        events = self.events(h.path) if streamed else None
        try:
            if events is not None:
                h.send_response(200)
                h.send_header("Content-Type", "text/event-stream")
                h.send_header("Transfer-Encoding", "chunked")
                h.end_headers()
                for ev in events:
                    h.wfile.write(b"%x\r\n%s\r\n" % (len(ev), ev))
                    h.wfile.flush()
                    time.sleep(self.pace)
                h.wfile.write(b"0\r\n\r\n")
                return
            time.sleep(self.delay)
            whole = self.whole(h.path)
            if whole is None:  # an upstream that reflects what it received
                whole = {"echo": {"line": h.requestline, "headers": dict(h.headers.items())}}
            data = json.dumps(whole).encode()
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        except OSError:
            pass  # the gateway cut the answer

    def __enter__(self) -> StubAPI:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
