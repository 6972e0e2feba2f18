"""A scripted LLM behind the four wire protocols the agent CLIs speak, for end-to-end tests offline.

Standard library only (``http.server`` + threads), bound to 127.0.0.1 on a free port::

    with MockLLM(default_trajectory(run1)) as llm:
        env = {"ANTHROPIC_BASE_URL": llm.url, ...}
        ...
        assert llm.requests[0].path == "/v1/messages?beta=true"

Every request is recorded (path, headers, parsed body). Every model turn is SSE-streamed in the
API's own event format when the client asks for a stream, else one JSON body, with token usage.
Side requests that carry no tools (titles, quota probes, next-speaker checks) get a short text
or a JSON answer and do not move the trajectory. Two failure modes: ``fail_status=400`` answers
every model request with that HTTP status and the API's error body; :meth:`MockLLM.stop` closes
the port, so that clients get "connection refused".
"""

from __future__ import annotations

import gzip
import json
import re
import socket
import threading
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from tests.mockllm import aider, anthropic, gemini, openai
from tests.mockllm.reply import Reply, estimate_tokens
from tests.mockllm.trajectory import Step, answer, find_cwd, next_step, tool_call

TITLE = "Mock training run"


@dataclass
class Request:
    """One request as the mock saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict | None
    api: str = "other"  # anthropic, responses, chat, gemini, count_tokens, models, other
    step: int | None = None  # tool results in the conversation (None: not a trajectory turn)
    status: int = 200
    reply: dict = field(default_factory=dict)  # what the mock answered: {"text": ...} or {"tool": ..., "args": ...}


class MockLLM:
    """The server. ``trajectory``: the steps of the scripted agent (see ``trajectory.default_trajectory``)."""

    def __init__(self, trajectory: list[Step] | None = None, *, fail_status: int | None = None, model: str = "mock"):
        self.trajectory = trajectory or [answer("Nothing to do.")]
        self.fail_status = fail_status
        self.model = model
        # True: a Chat Completions stream carries usage only when asked (stream_options.include_usage), as OpenAI's
        # does; False: a stream that does not say gets the usage chunk, one that says False has usage on its finish
        self.usage_only_when_asked = False
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[socket.socket] = set()
        self.port = 0

    # --- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> MockLLM:
        handler = type("Handler", (_Handler,), {"mock": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="mockllm", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and drop open connections: from now on, connection refused on this port."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> MockLLM:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The base URL without a version suffix: http://127.0.0.1:PORT."""
        return f"http://127.0.0.1:{self.port}"

    # --- queries for tests -------------------------------------------------------------------------------
    def calls(self, api: str | None = None) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if api is None or r.api == api]

    def turns(self) -> list[Request]:
        """The requests that played a trajectory step."""
        return [r for r in self.calls() if r.step is not None]

    def summary(self) -> list[str]:
        """One line per request: METHOD path -> status (what was answered), for logs and reports."""
        out = []
        for r in self.calls():
            what = r.reply.get("tool") or (r.reply.get("text") or "")[:40]
            out.append(f"{r.method} {r.path} -> {r.status} [{r.api}, step {r.step}] {what}")
        return out

    def _record(self, req: Request) -> None:
        with self._lock:
            self.requests.append(req)

    # --- the model ---------------------------------------------------------------------------------------
    def turn(self, req: Request, tools: dict, done: int) -> Reply:
        """The reply to one model request: the next scripted step with the CLI's own tools, or text."""
        body_text = "\n".join(_strings(req.body))
        n_in = estimate_tokens(len(json.dumps(req.body)))
        if req.api == "gemini" and (schema := gemini.json_schema(req.body)) is not None:
            text = json.dumps(gemini.from_schema(schema))
        elif not tools and req.api == "chat" and aider.is_aider(req.body):
            req.step = aider.turns_done(req.body)
            text = aider.reply(self.trajectory, req.step)
        elif not tools:
            text = TITLE
        else:
            req.step = done
            step = next_step(self.trajectory, done)
            call = tool_call(step, tools, find_cwd(body_text))
            if call is not None:
                req.reply = {"tool": call.name, "args": call.args if call.raw is None else call.raw}
                return Reply(
                    self.model, call=call, input_tokens=n_in, output_tokens=estimate_tokens(len(call.arguments))
                )
            text = step.text or f"(no tool for step {step.kind})"
        req.reply = {"text": text}
        return Reply(self.model, text=text, input_tokens=n_in, output_tokens=estimate_tokens(len(text)))


class _Handler(BaseHTTPRequestHandler):
    mock: MockLLM
    protocol_version = "HTTP/1.1"  # keep-alive, chunked SSE: what node and reqwest clients expect
    timeout = 300

    def setup(self) -> None:
        super().setup()
        with self.mock._lock:
            self.mock._conns.add(self.connection)

    def finish(self) -> None:
        with self.mock._lock:
            self.mock._conns.discard(self.connection)
        super().finish()

    def log_message(self, format, *args) -> None:  # quiet: the tests read .requests instead
        pass

    # --- plumbing ----------------------------------------------------------------------------------------
    def _body(self) -> dict | None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raw = b""
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                raw += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
        else:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        enc = self.headers.get("Content-Encoding", "").lower()
        try:
            if enc == "gzip":
                raw = gzip.decompress(raw)
            elif enc == "deflate":
                raw = zlib.decompress(raw)
            return json.loads(raw) if raw else None
        except (ValueError, OSError, zlib.error):
            return None

    def _send_json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", "req_mock")
        self.end_headers()
        self.wfile.write(data)

    def _send_sse(self, events) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("request-id", "req_mock")
        self.end_headers()
        for ev in events:
            self.wfile.write(f"{len(ev):x}\r\n".encode() + ev + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # --- routing -----------------------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._handle(None)

    def do_POST(self) -> None:
        self._handle(self._body())

    def _handle(self, body: dict | None) -> None:
        path = urlsplit(self.path).path
        req = Request(self.command, self.path, dict(self.headers.items()), body, api=_api(self.command, path))
        self.mock._record(req)
        try:
            self._answer(req, body or {}, path)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _answer(self, req: Request, body: dict, path: str) -> None:
        mock, api = self.mock, req.api
        errors = {"anthropic": anthropic.error, "count_tokens": anthropic.error, "gemini": gemini.error}
        error = errors.get(api, gemini.error if path.startswith("/v1beta") else openai.error)
        if api == "other":
            req.status = 404
            return self._send_json(404, error(404, f"mock: no such endpoint {self.command} {path}"))
        if mock.fail_status and api != "models":
            req.status = mock.fail_status
            return self._send_json(mock.fail_status, error(mock.fail_status, "mock: the request was rejected"))
        if api == "models":
            if path.startswith("/v1beta"):
                return self._send_json(200, gemini.models(mock.model))
            return self._send_json(200, {**openai.models(mock.model), **anthropic.models(mock.model)})
        if api == "count_tokens":
            n = estimate_tokens(len(json.dumps(body)))
            payload = gemini.count_tokens(n) if path.endswith(":countTokens") else anthropic.count_tokens(n)
            return self._send_json(200, payload)
        if api == "anthropic":
            reply = mock.turn(req, anthropic.tools(body), anthropic.tool_results(body))
            if body.get("stream"):
                return self._send_sse(anthropic.stream(reply))
            return self._send_json(200, anthropic.message(reply))
        if api == "responses":
            reply = mock.turn(req, openai.responses_tools(body), openai.responses_tool_results(body))
            if body.get("stream"):
                return self._send_sse(openai.responses_stream(reply))
            return self._send_json(200, openai.response(reply))
        if api == "chat":
            reply = mock.turn(req, openai.chat_tools(body), openai.chat_tool_results(body))
            if body.get("stream"):
                strict = mock.usage_only_when_asked
                usage = bool((body.get("stream_options") or {}).get("include_usage", not strict))
                return self._send_sse(openai.chat_stream(reply, include_usage=usage, usage_unasked=not strict))
            return self._send_json(200, openai.completion(reply))
        reply = mock.turn(req, gemini.tools(body), gemini.tool_results(body))  # gemini
        if ":streamGenerateContent" in path:
            return self._send_sse(gemini.stream(reply))
        return self._send_json(200, gemini.generate(reply))


def _strings(obj) -> list[str]:
    """Every string in a JSON body, where the CLI's system prompt and context (the cwd) can be found."""
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


def _api(method: str, path: str) -> str:
    """Which API a path belongs to (base URLs come with or without a /v1 prefix)."""
    if method == "GET":
        return "models" if re.search(r"/models/?$", path) or re.search(r"/models/[^/:]+$", path) else "other"
    if path.endswith("/messages/count_tokens") or path.endswith(":countTokens"):
        return "count_tokens"
    if path.endswith("/messages"):
        return "anthropic"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/chat/completions"):
        return "chat"
    if re.search(r"/models/[^/]+:(stream)?[gG]enerateContent$", path):
        return "gemini"
    return "other"
