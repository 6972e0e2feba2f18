"""The gateway's hostile edge, driven directly as an agent that reads the gateway's code would drive it,
against a stub API on 127.0.0.1 that records every request line and header (tests/bench/gateway/stubapi.py).

- a request target another server could read as another path is refused (400) before any route check;
- the real key leaves only in the family's credential header, never in a URL; the run's token anywhere else is
  refused and counted;
- a stream the client leaves early is recorded at the API's final usage (or charged its max_tokens, named);
- 20 parallel requests under a $1.00 budget spend at most $1.00 plus one request's worst case.

Expected costs are worked out here from the price table's rows (USD per 1M tokens, as in test_proxy.py:
claude-sonnet-4-5 3/15 with cache writes at 3.75, gpt-5.5 5/30, gpt-5 1.25/10, gemini-2.5-pro 1.25/10).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from bench.gateway import budget, key_swap, metering, routes
from bench.gateway.proxy import Gateway
from bench.sandbox.network import UnixServer
from tests.bench.gateway.stubapi import StubAPI
from tests.mockllm.reply import Reply

TOKEN = "bench-run-" + "ab" * 16
REAL = "sk-real-key-0123456789abcdef"


def raw(sock: Path, request: bytes, timeout: float = 30) -> tuple[int, bytes]:
    """Send ``request`` as bytes (no client library between: it would normalise the target) and read the answer to
    its end; the status and the body."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(str(sock))
    s.sendall(request)
    data = b""
    while chunk := s.recv(65536):
        data += chunk
        head, sep, rest = data.partition(b"\r\n\r\n")
        if sep and b"content-length:" in head.lower():
            n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            if len(rest) >= n:
                break
    s.close()
    return int(data.split(b" ", 2)[1]), data.partition(b"\r\n\r\n")[2]


def request(method: str, target: str, headers: dict[str, str] | None = None, body: bytes = b"") -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", "Connection: close", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def log(tmp_path: Path, n: int) -> list[dict]:
    path, deadline = tmp_path / "llm.jsonl", time.time() + 60
    while time.time() < deadline and (not path.exists() or len(path.read_text().splitlines()) < n):
        time.sleep(0.05)
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.fixture
def served(tmp_path):
    """serve(gateway) -> the unix socket a client reaches it on; every server closed at the end."""
    servers = []

    def serve(gw: Gateway) -> Path:
        path = tmp_path / f"gw{len(servers)}.sock"
        servers.append(UnixServer(path, gw.handle, "gateway"))
        return path

    yield serve
    for s in servers:
        s.close()


# --- 1. the path checked is the path forwarded -----------------------------------------------------------------

BAD_TARGETS = [
    "/v1/models/../files",  # a dot segment: /v1/files after RFC 3986's remove_dot_segments
    "/v1/models/..",
    "/v1/./files",
    "/v1/models/%2e%2e/files",  # percent-encoded dots
    "/v1/models/%2E%2E",
    "/v1/models%2ffiles",  # a percent-encoded slash
    "/v1/models/x%5c..%5cfiles",  # a percent-encoded backslash
    "/v1/models/x\\..\\files",  # a backslash
    "http://127.0.0.1/v1/models",  # absolute form
    "//evil.example/v1/models",  # a network-path reference
    "/v1/models#frag",  # a fragment
    "/v1//models",  # an empty segment
]


@pytest.mark.parametrize("target", BAD_TARGETS)
def test_a_target_another_server_could_read_as_another_path_is_refused_before_any_route(target, tmp_path, served):
    with StubAPI(Reply("gpt-5.5", text="x")) as stub:
        gw = Gateway(stub.url + "/v1", tmp_path / "llm.jsonl", keys={TOKEN: REAL}, family="openai")
        status, body = raw(served(gw), request("GET", target, {"Authorization": f"Bearer {TOKEN}"}))
        assert status == 400, body
        assert "request target refused" in json.loads(body)["error"]["message"]
        assert stub.seen == []  # never forwarded
    (rec,) = log(tmp_path, 1)
    assert rec["refused"] == "target"


def test_dot_segments_passed_the_route_list_that_now_never_sees_them():
    """Why the target is judged before the routes: the id pattern of GET /v1/models/{id} matches '..'."""
    assert routes.allowed("openai", "GET", "/v1/models/..", "/v1")  # the route list alone would forward it
    assert routes.bad_target("/v1/models/..") is not None
    for good in ("/v1/messages?beta=true", "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
                 "/v1/models/openai/gpt-4o:free", "/backend-api/wham/usage", "/v1/messages/"):  # fmt: skip
        assert routes.bad_target(good) is None, good


def test_a_plain_target_is_forwarded_byte_for_byte(tmp_path, served):
    with StubAPI(Reply("gpt-5.5", text="x")) as stub:
        gw = Gateway(stub.url + "/v1", tmp_path / "llm.jsonl", keys={TOKEN: REAL}, family="openai")
        status, _ = raw(served(gw), request("GET", "/v1/models/gpt-5.5?x=1", {"Authorization": f"Bearer {TOKEN}"}))
        assert status == 200
        (seen,) = stub.seen
    assert seen.line == "GET /v1/models/gpt-5.5?x=1 HTTP/1.1"


# --- 2. the key only in the family's header ---------------------------------------------------------------------

FAMILIES = [
    # family, upstream path, model request target, the header the family's CLI sends its key in (value template)
    ("anthropic", "", "/v1/messages", ("x-api-key", "{}")),
    ("openai", "/v1", "/v1/chat/completions", ("Authorization", "Bearer {}")),
    ("gemini", "", "/v1beta/models/gemini-2.5-pro:generateContent", ("x-goog-api-key", "{}")),
]
BODY = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(("family", "base", "target", "header"), FAMILIES)
def test_the_key_leaves_only_in_the_familys_header_and_a_token_anywhere_else_is_refused(
    family, base, target, header, tmp_path, served
):
    name, template = header
    good = {name: template.format(TOKEN), "Content-Type": "application/json"}
    body = json.dumps(BODY).encode()
    with StubAPI(Reply("m", text="fine", input_tokens=5, output_tokens=2)) as stub:
        gw = Gateway(stub.url + base, tmp_path / "llm.jsonl", keys={TOKEN: REAL}, family=family)
        sock = served(gw)
        assert raw(sock, request("POST", target, good, body))[0] == 200
        assert raw(sock, request("POST", f"{target}?key={TOKEN}", good, body))[0] == 400  # the token in a query
        assert raw(sock, request("POST", f"{target}?key={TOKEN}", {"Content-Type": "application/json"}, body))[0] == 400
        assert raw(sock, request("POST", target, good, json.dumps({**BODY, "x": TOKEN}).encode()))[0] == 400  # body
        assert raw(sock, request("POST", target, {**good, "X-Debug": TOKEN}, body))[0] == 400  # another header
        assert raw(sock, request("POST", target, {"Content-Type": "application/json"}, body))[0] == 401  # none
        # an upstream that reflects its request: what it got (and could hand back) holds the key in the header only
        listing = {"anthropic": ("POST", "/v1/messages/count_tokens"), "openai": ("GET", "/v1/models")}
        status, echoed = raw(sock, request(*listing.get(family, ("GET", "/v1beta/models")), good))
        assert status == 200
    assert len(stub.seen) == 2  # the model request and the model list; nothing refused reached the API
    for seen in stub.seen:
        assert REAL not in seen.line and TOKEN not in seen.line  # no key, no token in any request line
        assert [k for k, v in seen.headers.items() if REAL in v] == [name.lower()]
        assert seen.headers[name.lower()] == template.format(REAL)
        assert REAL.encode() not in seen.body
    assert REAL in echoed.decode() and REAL not in json.loads(echoed)["echo"]["line"]
    got = log(tmp_path, 7)
    assert REAL not in (tmp_path / "llm.jsonl").read_text()
    s = metering.summary(got)
    assert s["refused"] == {"misplaced": 4, "token": 1}  # the probes, counted
    assert gw.probes == 4


def test_a_gemini_key_in_the_query_is_never_forwarded_even_without_a_header(tmp_path, served):
    """The Gemini CLI sends x-goog-api-key (its recorded request, fixtures/agent-streams); a client that puts the run's
    token in ?key= is refused, not given a URL with the real key in it."""
    recorded = Path(__file__).resolve().parents[1] / "fixtures" / "agent-streams" / "gemini_request_3.json"
    sent = json.loads(recorded.read_text())
    assert "key=" not in sent["path"] and "x-goog-api-key" in sent["headers"]
    with StubAPI(Reply("gemini-2.5-pro", text="x")) as stub:
        gw = Gateway(stub.url, tmp_path / "llm.jsonl", keys={TOKEN: REAL}, family="gemini")
        target = f"/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse&key={TOKEN}"
        status, body = raw(served(gw), request("POST", target, {}, b"{}"))
        assert status == 400 and "query" in json.loads(body)["error"]["message"]
        assert stub.seen == []


def test_swap_touches_only_the_familys_header():
    headers = [("Authorization", f"Bearer {TOKEN}"), ("x-api-key", TOKEN), ("X-Other", TOKEN)]
    assert key_swap.swap(headers, {TOKEN: REAL}, "openai") == [
        ("Authorization", f"Bearer {REAL}"), ("x-api-key", TOKEN), ("X-Other", TOKEN)
    ]  # fmt: skip
    assert key_swap.swap(headers, {TOKEN: REAL}, "anthropic")[1] == ("x-api-key", REAL)
    assert key_swap.misplaced([("x-goog-api-key", TOKEN)], "/m", b"{}", {TOKEN: REAL}, "gemini") is None
    assert key_swap.misplaced([("x-goog-api-key", TOKEN)], f"/m?k={TOKEN}", b"", {TOKEN: REAL}, "gemini") == "query"


# --- 3. a stream left early is paid for what the API bills -----------------------------------------------------

STREAMS = [
    # family, model, target, body, (input, output rate per 1M)
    ("anthropic", "claude-sonnet-4-5", "/v1/messages", {"max_tokens": 64000}, (3, 15)),
    ("openai", "gpt-5.5", "/v1/responses", {"input": "x " * 1500, "max_output_tokens": 64000}, (5, 30)),
    ("openai", "gpt-5", "/v1/chat/completions", {"messages": [], "max_tokens": 64000}, (1.25, 10)),
    ("gemini", "gemini-2.5-pro", "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
     {"generationConfig": {"maxOutputTokens": 64000}}, (1.25, 10)),
]  # fmt: skip


def _leave_early(sock: Path, target: str, body: dict, first: bytes) -> None:
    """Send a streamed request, read until ``first`` arrived, and hang up (the agent read what it wanted)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(str(sock))
    data = json.dumps({**body, "stream": True}).encode()
    s.sendall(request("POST", target, {"x-api-key": TOKEN, "Content-Type": "application/json"}, data))
    got = b""
    while first not in got:
        got += s.recv(65536)
    s.shutdown(socket.SHUT_RDWR)
    s.close()


@pytest.mark.parametrize(("family", "model", "target", "body", "rates"), STREAMS)
def test_a_stream_left_early_is_recorded_at_the_apis_final_usage(family, model, target, body, rates, tmp_path, served):
    """1,000 input tokens, 40 text pieces, a closing usage of 64,000 output tokens (Anthropic: in its closing
    message_delta; OpenAI: its last event; Gemini: its last chunk); the client hangs up after the first piece."""
    reply = Reply(model, text="word " * 190, input_tokens=1000, output_tokens=64000)  # 40 pieces of 24 characters
    with StubAPI(reply, pace=0.02) as stub:
        gw = Gateway(stub.url, tmp_path / "llm.jsonl", family="any", drain_s=30)
        _leave_early(served(gw), target, {"model": model, **body}, b"data:")
        (rec,) = log(tmp_path, 1)
    assert rec.get("client_left") is True and "cut" not in rec, rec
    assert (rec["input"], rec["output"], rec["complete"]) == (1000, 64000, True)
    assert rec["cost_usd"] == pytest.approx((1000 * rates[0] + 64000 * rates[1]) / 1e6)
    assert "cost_basis" not in rec


@pytest.mark.parametrize(("family", "model", "target", "body", "rates"), STREAMS[:2])
def test_a_stream_whose_usage_never_comes_is_charged_its_max_tokens(
    family, model, target, body, rates, tmp_path, served
):
    """The same stream, too slow to end within the drain's time: the line says cost_basis max_tokens, its cost is at
    least what the API's final usage would have said, and the run's cost_source names it."""
    reply = Reply(model, text="word " * 190, input_tokens=1000, output_tokens=64000)
    with StubAPI(reply, pace=0.5) as stub:
        gw = Gateway(stub.url, tmp_path / "llm.jsonl", family="any", drain_s=0.5)
        _leave_early(served(gw), target, {"model": model, **body}, b"data:")
        (rec,) = log(tmp_path, 1)
    assert rec["complete"] is False and "client closed" in rec["cut"]
    assert rec["cost_basis"] == "max_tokens" and rec["charged_output"] == 64000
    if family == "anthropic":  # message_start said the input: 1,000
        expected = (1000 * rates[0] + 64000 * rates[1]) / 1e6
    else:  # Responses say nothing before their end: every body byte an input token
        sent = len(json.dumps({"model": model, **body, "stream": True}).encode())
        assert rec["charged_input"] == sent
        expected = (sent * rates[0] + 64000 * rates[1]) / 1e6
    assert rec["cost_usd"] == pytest.approx(expected)
    assert rec["cost_usd"] >= (1000 * rates[0] + 64000 * rates[1]) / 1e6 - 1e-9  # the API's own bill, at least
    events = metering.merge({}, tmp_path / "llm.jsonl")
    assert events["cost_source"] == "gateway+max_tokens" and events["gateway"]["charged_max_tokens"] == 1


# --- 4. a budget parallel requests cannot pass -----------------------------------------------------------------


def test_twenty_parallel_requests_spend_at_most_the_budget_plus_one_worst_case(tmp_path, served):
    """Each answer: 100 input + 30,000 output tokens of claude-sonnet-4-5 = $0.4503, after 0.5 s (all 20 in flight
    at once). Before reservations all 20 were forwarded ($9.00 under $1.00)."""
    reply = Reply("claude-sonnet-4-5", text="ok", input_tokens=100, output_tokens=30000)
    body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 32000, "messages": []}).encode()
    worst = (len(body) * 3.75 + 32000 * 15) / 1e6  # every byte a cache-written token, plus max_tokens of output
    assert budget.worst_case("claude-sonnet-4-5", "anthropic", body, json.loads(body)) == pytest.approx(worst)
    with StubAPI(reply, delay=0.5) as stub:
        gw = Gateway(stub.url, tmp_path / "llm.jsonl", family="anthropic", max_cost=1.0)
        sock = served(gw)
        statuses: list[int] = []
        barrier = threading.Barrier(20)

        def one() -> None:
            barrier.wait()
            statuses.append(raw(sock, request("POST", "/v1/messages", {"Content-Type": "application/json"}, body))[0])

        threads = [threading.Thread(target=one) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        forwarded = len(stub.seen)
    got = log(tmp_path, 20)
    each = (100 * 3 + 30000 * 15) / 1e6
    spent = sum(r.get("cost_usd") or 0 for r in got)
    assert spent == pytest.approx(forwarded * each) and gw.spent == pytest.approx(spent)
    assert spent <= 1.0 + worst, (spent, forwarded)
    print(f"forwarded {forwarded}, spent ${spent:.4f}, bound ${1.0 + worst:.4f}")
    assert forwarded >= 2  # admitted while spent + reserved stayed below $1.00: 0, then 0.48, then 0.96
    assert sorted(statuses) == [200] * forwarded + [402] * (20 - forwarded)
    assert [r.get("refused") for r in got].count("budget") == 20 - forwarded


def test_a_reservation_waits_for_those_in_flight_and_is_then_admitted_or_refused():
    b = budget.Budget(1.0)
    first = b.admit(0.6)
    second = b.admit(0.6)  # 0.6 committed < 1.0: admitted, now 1.2 committed
    assert first and second
    assert b.admit(0.6, wait_s=0.2) is None  # committed past the budget and nothing settles: refused
    threading.Timer(0.1, b.settle, (first, 0.45)).start()  # 0.45 spent + 0.6 reserved: still past the budget
    threading.Timer(0.3, b.settle, (second, 0.1)).start()  # 0.55 spent, nothing reserved
    third = b.admit(0.6, wait_s=30)  # admitted once the second settled
    assert third and b.spent == pytest.approx(0.55) and b.committed() == pytest.approx(1.15)
    b.settle(third, 0.9)
    assert b.exhausted and b.admit(0.01, wait_s=30) is None  # spent: refused at once, no wait
    assert budget.Budget(None).admit(5.0) is not None  # no budget: always admitted


# --- 5. the agent-facing side parsed by h11, bounded ----------------------------------------------------------


MALFORMED = {
    "not a request line": (b"GARBAGE\r\n\r\n", 400),
    "a head past 64 KiB": (b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (70 * 1024) + b"\r\n\r\n", 431),
    "a body past its bound": (request("POST", "/v1/chat/completions", {}, b"x" * 2000), 400),
    "two lengths": (b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400),
    "a bad chunk": (b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
}


@pytest.mark.parametrize("what", list(MALFORMED))
def test_a_malformed_request_is_answered_4xx_and_never_forwarded(what, tmp_path, served, monkeypatch):
    from bench.gateway import http1

    monkeypatch.setattr(http1, "MAX_BODY", 1000)  # the bound, small enough to pass in a test
    with StubAPI(Reply("gpt-5.5", text="x")) as stub:
        gw = Gateway(stub.url + "/v1", tmp_path / "llm.jsonl", family="openai")
        sent, expected = MALFORMED[what]
        status, _ = raw(served(gw), sent)
        assert status == expected, what
        assert stub.seen == []


def test_pipelined_requests_on_one_connection_are_answered_in_order(tmp_path, served):
    """Keep-alive and pipelining are h11's: two requests sent at once get two answers, each forwarded once."""
    with StubAPI(Reply("gpt-5.5", text="x")) as stub:
        gw = Gateway(stub.url + "/v1", tmp_path / "llm.jsonl", family="openai")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(str(served(gw)))
        one = b"GET /v1/models/a HTTP/1.1\r\nHost: x\r\n\r\n"
        two = b"GET /v1/models/b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        s.sendall(one + two)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        s.close()
        assert data.count(b"HTTP/1.1 200") == 2
        assert [x.line for x in stub.seen] == ["GET /v1/models/a HTTP/1.1", "GET /v1/models/b HTTP/1.1"]
