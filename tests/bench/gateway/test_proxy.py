"""The metering gateway (bench.gateway.proxy) against the scripted mock over TLS, and its usage parsers.

Expected token counts are the mock's own replies (``TlsMock.usages``) or numbers written by hand into the
payloads; expected costs are worked out by hand from the price table's rows (USD per 1M tokens).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from pathlib import Path

import pytest

from bench.gateway import metering
from bench.gateway.budget import BUDGET_PREFIX
from bench.gateway.proxy import Gateway
from bench.gateway.usage import Usage, api_of, request_model
from bench.sandbox.network import UnixServer
from bench.tracking import schema
from tests.bench.agents.tlsmock import HOST, TlsMock, make_certs
from tests.mockllm import anthropic as mock_anthropic
from tests.mockllm import gemini as mock_gemini
from tests.mockllm import openai as mock_openai
from tests.mockllm.reply import Reply
from tests.mockllm.trajectory import answer

STREAMS = (
    Path(__file__).resolve().parents[1] / "fixtures" / "agent-streams"
)  # recorded from the real CLIs (PROVENANCE.md)
SECRET = "sk-secret-never-logged-42"


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("127.0.0.1", timeout=30)
        self.path = str(path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> tuple[Path, Path, Path]:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def mock(certs):
    with TlsMock([answer("All done here.")], cert=certs[1], key=certs[2], model="mock") as m:
        yield m


def serve(gw: Gateway, folder: Path) -> tuple[UnixServer, Path]:
    path = folder / "gw.sock"
    return UnixServer(path, gw.handle, "gateway"), path


def gateway(mock: TlsMock, certs, tmp_path: Path, suffix: str = "", **kw) -> Gateway:
    return Gateway(
        mock.url_for() + suffix, tmp_path / "llm.jsonl", resolve={HOST: "127.0.0.1"}, cafile=str(certs[0]), **kw
    )


def post(sock: Path, path: str, body: dict, headers: dict | None = None) -> tuple[int, dict, bytes]:
    c = UnixHTTP(sock)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json", **(headers or {})})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict(r.getheaders()), data


def lines(tmp_path: Path, n: int = 1) -> list[dict]:
    """The gateway's log once it has ``n`` lines (a line is written when its answer has been passed on)."""
    log, deadline = tmp_path / "llm.jsonl", time.time() + 20
    while time.time() < deadline and (not log.exists() or len(log.read_text().splitlines()) < n):
        time.sleep(0.05)
    return [json.loads(x) for x in log.read_text().splitlines()]


def feed_in_pieces(u: Usage, events: list[bytes], size: int = 7) -> None:
    data = b"".join(events)
    for i in range(0, len(data), size):  # cut anywhere, as TCP does
        u.feed(data[i : i + size])


# --- usage parsers -----------------------------------------------------------------------------------------


def test_usage_from_each_apis_stream_and_json():
    reply = Reply("m", text="hello " * 30, input_tokens=1234, output_tokens=56)
    cases = [
        ("anthropic", list(mock_anthropic.stream(reply)), mock_anthropic.message(reply)),
        ("responses", list(mock_openai.responses_stream(reply)), mock_openai.response(reply)),
        ("chat", list(mock_openai.chat_stream(reply)), mock_openai.completion(reply)),
        ("gemini", list(mock_gemini.stream(reply)), mock_gemini.generate(reply)),
    ]
    for api, events, whole in cases:
        streamed, body = Usage(api), Usage(api)
        feed_in_pieces(streamed, events)
        body.read_json(json.dumps(whole).encode())
        for u in (streamed, body):
            assert (u.input, u.output, u.cached, u.complete) == (1234, 56, 0, True), (api, u)


def test_anthropic_cache_tokens_and_a_cut_stream():
    # the shape of Anthropic's documented stream, numbers by hand: 10 fresh + 2000 read + 500 written = 2510 input
    start = {
        "type": "message_start",
        "message": {
            "model": "claude-opus-4-7",
            "usage": {
                "input_tokens": 10,
                "cache_read_input_tokens": 2000,
                "cache_creation_input_tokens": 500,
                "output_tokens": 1,
            },
        },
    }
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 321}}
    sse = [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in (start, delta)]
    cut = Usage("anthropic")
    feed_in_pieces(cut, sse[:1])
    assert (cut.input, cut.cached, cut.cache_write, cut.output, cut.complete) == (2510, 2000, 500, 1, False)
    whole = Usage("anthropic")
    feed_in_pieces(whole, [*sse, b'event: message_stop\ndata: {"type":"message_stop"}\n\n'])
    assert (whole.input, whole.output, whole.complete, whole.model) == (2510, 321, True, "claude-opus-4-7")
    # 10 x $5 + 2000 x $0.50 + 500 x $6.25 + 321 x $25, per 1M tokens
    from bench.agents import pricing

    assert pricing.cost("claude-opus-4-7", 2510, 321, 2000, 500) == pytest.approx(
        (10 * 5 + 2000 * 0.5 + 500 * 6.25 + 321 * 25) / 1e6
    )


def test_gemini_thinking_is_output_and_the_last_chunk_counts():
    chunks = [
        {"candidates": [{"content": {"parts": [{"text": "a"}]}}], "usageMetadata": {"promptTokenCount": 900}},
        {
            "candidates": [{"finishReason": "STOP"}],
            "modelVersion": "gemini-2.5-pro",
            "usageMetadata": {
                "promptTokenCount": 900,
                "candidatesTokenCount": 40,
                "thoughtsTokenCount": 60,
                "cachedContentTokenCount": 512,
            },
        },
    ]
    u = Usage("gemini")
    feed_in_pieces(u, [f"data: {json.dumps(c)}\r\n\r\n".encode() for c in chunks])
    assert (u.input, u.output, u.cached, u.complete, u.model) == (900, 100, 512, True, "gemini-2.5-pro")


def test_requests_the_real_clis_sent_are_recognised():
    seen = {}
    for name in ("claude_request_3", "codex_request_3", "gemini_request_3", "opencode_chat_request_4"):
        rec = json.loads((STREAMS / f"{name}.json").read_text())
        api = api_of("POST", rec["path"])
        seen[name] = (api, request_model(api, rec["path"], rec["body"]))
    assert seen == {
        "claude_request_3": ("anthropic", "claude-sonnet-4-5"),
        "codex_request_3": ("responses", "gpt-5.5"),
        "gemini_request_3": ("gemini", "gemini-2.5-pro"),
        "opencode_chat_request_4": ("chat", "mock-model"),
    }
    assert api_of("GET", "/v1/models") is None and api_of("POST", "/v1/messages/count_tokens") is None


# --- the gateway over TLS ------------------------------------------------------------------------------------


def test_json_and_sse_through_the_gateway_are_metered(mock, certs, tmp_path):
    gw = gateway(mock, certs, tmp_path)
    server, sock = serve(gw, tmp_path)
    try:
        headers = {"x-api-key": SECRET, "anthropic-version": "2023-06-01"}
        body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [{"role": "user", "content": "hi " * 50}]}
        status, _, data = post(sock, "/v1/messages?beta=true", body, headers)
        assert status == 200 and json.loads(data)["type"] == "message"
        status, h, data = post(sock, "/v1/messages", {**body, "stream": True}, headers)
        assert status == 200 and "text/event-stream" in h["Content-Type"] and b"message_stop" in data
        status, _, data = post(sock, "/v1/responses", {"model": "gpt-5.5", "input": "x", "stream": True})
        assert status == 200 and b"response.completed" in data
        chat = {"model": "gpt-5", "messages": [{"role": "user", "content": "x"}], "stream": True}
        status, _, data = post(sock, "/v1/chat/completions", chat)  # no include_usage: the gateway asks for it
        assert status == 200 and b'"usage"' in data
        status, _, data = post(
            sock,
            f"/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse&key={SECRET}",
            {"contents": [{"role": "user", "parts": [{"text": "x"}]}]},
        )
        assert status == 200 and b"usageMetadata" in data
    finally:
        server.close()
    got = lines(tmp_path, 5)
    assert [(r["api"], r["status"], r["stream"]) for r in got] == [
        ("anthropic", 200, False),
        ("anthropic", 200, True),
        ("responses", 200, True),
        ("chat", 200, True),
        ("gemini", 200, True),
    ]
    assert [(r["input"], r["output"]) for r in got] == mock.usages  # what the mock served, request by request
    assert all(r["complete"] and not r.get("cut") for r in got)
    # hand-computed costs: sonnet-4-5 3/15, gpt-5.5 5/30, gpt-5 1.25/10, gemini-2.5-pro 1.25/10 per 1M (LiteLLM's map)
    rates = {"claude-sonnet-4-5": (3, 15), "gpt-5.5": (5, 30), "gpt-5": (1.25, 10), "gemini-2.5-pro": (1.25, 10)}
    for r in got:
        rin, rout = rates[r["model"]]
        assert r["cost_usd"] == pytest.approx((r["input"] * rin + r["output"] * rout) / 1e6, abs=1e-6)
    # the key reached the API and never the log
    assert mock.calls("anthropic")[0].headers.get("x-api-key") == SECRET
    assert SECRET in mock.calls("gemini")[0].path
    assert SECRET not in (tmp_path / "llm.jsonl").read_text()
    assert mock.calls("chat")[0].body["stream_options"] == {"include_usage": True}
    s = metering.summary(got)
    assert s["metrics"][schema.TOKENS_INPUT] == sum(i for i, _ in mock.usages)
    assert s["metrics"][schema.TOKENS_OUTPUT] == sum(o for _, o in mock.usages)
    assert s["metrics"][schema.COST_USD] == pytest.approx(sum(r["cost_usd"] for r in got), abs=1e-6)
    assert (s["metrics"][schema.LLM_REQUESTS], s["metrics"][schema.LLM_ERRORS]) == (5, 0)
    last = {k: v for k, v, _, _ in metering.series(got, got[0]["t"])}  # cumulative: the last point is the total
    assert last[schema.TOKENS_OUTPUT] == s["metrics"][schema.TOKENS_OUTPUT] and last[schema.LLM_REQUESTS] == 5
    # a CLI's other calls through the gateway (a ChatGPT login's model list, an account check that fails) are in its
    # log but are not model requests: llm_requests and llm_errors stay those of the five above
    calls = (("/backend-api/codex/models", 200), ("/backend-api/wham/usage", 401))
    other = [
        {"t": got[-1]["t"] + i, "method": "GET", "path": p, "api": None, "status": st, "latency_s": 0.1}
        for i, (p, st) in enumerate(calls)
    ]
    s = metering.summary(got + other)
    assert (s["requests"], s["metrics"][schema.LLM_REQUESTS], s["metrics"][schema.LLM_ERRORS]) == (7, 5, 0)
    last = {k: v for k, v, _, _ in metering.series(got + other, got[0]["t"])}
    assert (last[schema.LLM_REQUESTS], last[schema.LLM_ERRORS]) == (5, 0)


def test_an_unverified_certificate_is_refused(mock, certs, tmp_path):
    gw = Gateway(mock.url_for(), tmp_path / "llm.jsonl", resolve={HOST: "127.0.0.1"})  # no test CA
    server, sock = serve(gw, tmp_path)
    try:
        with pytest.raises((http.client.HTTPException, OSError)):
            post(sock, "/v1/messages", {"model": "claude-sonnet-4-5", "messages": []})
    finally:
        server.close()
    (rec,) = lines(tmp_path)
    assert rec["status"] == 0 and "CERTIFICATE_VERIFY_FAILED" in rec["error"]
    assert not mock.calls()


class SlowSSE:
    """A TLS server that sends an Anthropic message_start, then waits for ``go`` before the rest: shows that the
    gateway passes events on as they come (the client reads the first while the server still holds the rest) and
    notices a client that leaves while the API is silent. ``finish``: after ``go``, the answer's end (a message_delta
    with the whole answer's output tokens, message_stop), as the API sends it when nothing cancels the generation."""

    def __init__(self, certs, finish: bool = False) -> None:
        import ssl

        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(certs[1], certs[2])
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.go = threading.Event()
        self.closed = threading.Event()
        self.finish = finish
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with self.ctx.wrap_socket(conn, server_side=True) as s:
            s.recv(65536)
            start = {
                "type": "message_start",
                "message": {"model": "claude-sonnet-4-5", "usage": {"input_tokens": 700, "output_tokens": 1}},
            }
            ev = f"event: message_start\ndata: {json.dumps(start)}\n\n".encode()
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            s.sendall(b"%x\r\n%s\r\n" % (len(ev), ev))
            self.go.wait(30)
            if self.finish:
                delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 50}}
                end = f"event: message_delta\ndata: {json.dumps(delta)}\n\n"
                end += f"event: message_stop\ndata: {json.dumps({'type': 'message_stop'})}\n\n"
                s.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(end), end.encode()))
                self.closed.set()
                return
            try:
                for _ in range(50):  # until the gateway, its client gone, drops the connection
                    s.sendall(b"%x\r\n%s\r\n" % (len(ev), ev))
                    time.sleep(0.05)
            except OSError:
                pass
            self.closed.set()


def _slow_gateway(slow: SlowSSE, certs, tmp_path: Path, drain_s: float) -> Gateway:
    return Gateway(
        f"https://{HOST}:{slow.port}", tmp_path / "llm.jsonl", resolve={HOST: "127.0.0.1"}, cafile=str(certs[0]),
        drain_s=drain_s,
    )  # fmt: skip


def test_a_stream_cut_midway_is_charged_its_max_tokens(certs, tmp_path):
    """The API silent past the drain's time after the client left: the upstream is cut, and since the API's final
    usage never came, the request is charged its max_tokens (2,000) at the output rate, named in the line."""
    slow = SlowSSE(certs)
    gw = _slow_gateway(slow, certs, tmp_path, drain_s=0.5)
    server, sock = serve(gw, tmp_path)
    try:
        c = UnixHTTP(sock)
        c.request(
            "POST", "/v1/messages", json.dumps({"model": "claude-sonnet-4-5", "stream": True, "max_tokens": 2000})
        )
        r = c.getresponse()
        first = r.read1(65536)
        assert b"message_start" in first  # arrived while the server still holds the rest: not buffered
        c.sock.shutdown(socket.SHUT_RDWR)
        c.close()  # the CLI killed mid-answer, while the model still "thinks": the API sends nothing more
        (rec,) = lines(tmp_path)  # written without waiting for the API's next byte
        slow.go.set()
        assert slow.closed.wait(30)
    finally:
        server.close()
    (rec,) = lines(tmp_path)
    assert rec["input"] == 700 and rec["complete"] is False and "client closed" in rec["cut"]
    assert (rec["output"], rec["cost_basis"], rec["charged_output"]) == (1, "max_tokens", 2000)
    assert rec["cost_usd"] == pytest.approx((700 * 3 + 2000 * 15) / 1e6)


def test_an_answer_that_ends_after_its_client_left_is_metered_whole(certs, tmp_path):
    """The CLI killed mid-answer while the API goes on generating (and billing): the gateway reads the answer to its
    end within the drain's time, so the line holds the API's own usage (700 in, 50 out: the server's figures), not
    what had streamed before the kill (700 in, 1 out)."""
    slow = SlowSSE(certs, finish=True)
    gw = _slow_gateway(slow, certs, tmp_path, drain_s=30)
    server, sock = serve(gw, tmp_path)
    try:
        c = UnixHTTP(sock)
        c.request("POST", "/v1/messages", json.dumps({"model": "claude-sonnet-4-5", "stream": True}))
        assert b"message_start" in c.getresponse().read1(65536)
        c.sock.shutdown(socket.SHUT_RDWR)
        c.close()
        time.sleep(0.5)  # the gateway notices the client gone (it looks every 0.25 s) before the API goes on
        log = tmp_path / "llm.jsonl"
        assert not log.exists() or not log.read_text().strip()  # no line yet: still reading the answer
        slow.go.set()
        assert slow.closed.wait(30) and gw.drain(30)
    finally:
        server.close()
    (rec,) = lines(tmp_path)
    assert (rec["input"], rec["output"], rec["complete"]) == (700, 50, True), rec
    assert rec["client_left"] is True and "cut" not in rec
    assert rec["cost_usd"] == pytest.approx((700 * 3 + 50 * 15) / 1e6)  # the price table's claude-sonnet-4-5 row


def test_the_budget_cap_answers_in_each_apis_format(mock, certs, tmp_path):
    gw = gateway(mock, certs, tmp_path, max_cost=1e-6)  # the first request spends more than that
    server, sock = serve(gw, tmp_path)
    try:
        body = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "x"}]}
        assert post(sock, "/v1/messages", body)[0] == 200
        status, _, data = post(sock, "/v1/messages", body)
        assert status == 402 and json.loads(data)["type"] == "error"
        assert json.loads(data)["error"]["message"].startswith(f"{BUDGET_PREFIX} of $1e-06 is spent")
        status, _, data = post(sock, "/v1/responses", {"model": "gpt-5.5", "input": "x"})
        assert status == 429 and json.loads(data)["error"]["code"] == "insufficient_quota"
        status, _, data = post(sock, "/v1beta/models/gemini-2.5-pro:generateContent", {"contents": []})
        assert status == 402 and BUDGET_PREFIX in json.loads(data)["error"]["message"]
    finally:
        server.close()
    assert len(mock.calls()) == 1  # the refused requests never reached the API
    # in the order the requests began: a line is written when its request is done with, and the first one's (its
    # cost, its body kept for the trace) may come after the second's refusal, written at once
    got = sorted(lines(tmp_path, 4), key=lambda r: r["t"])
    assert [r.get("refused") for r in got] == [None, "budget", "budget", "budget"]
    s = metering.summary(got, max_cost=1e-6)
    assert s["cap_hit"] and s["cap_hit_at"] == got[1]["t"]
    assert s["metrics"][schema.LLM_ERRORS] == 3 and s["metrics"][schema.TOKENS_INPUT] == mock.usages[0][0]


def test_json_answers_on_a_kept_alive_connection_reach_the_api_once_each(mock, certs, tmp_path):
    """Aider's requests (not streamed: whole JSON answers with a Content-Length) one after another on one connection:
    each reaches the API once. (http.client's read1 left such an answer open at its end, so the next request on the
    kept-alive upstream failed after it was sent, and the gateway's redial sent it again: billed twice.)"""
    gw = gateway(mock, certs, tmp_path, "/v1")
    server, sock = serve(gw, tmp_path)
    c = UnixHTTP(sock)
    try:
        for n in range(3):
            body = {"model": "gpt-5.5", "messages": [{"role": "user", "content": f"question {n}"}]}
            c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
            r = c.getresponse()
            assert r.status == 200 and json.loads(r.read())["object"] == "chat.completion"
    finally:
        c.close()
        server.close()
    got = lines(tmp_path, 3)
    assert len(mock.calls("chat")) == 3 and len(got) == 3  # not 5: no request sent twice
    assert [(r["input"], r["output"]) for r in got] == mock.usages
