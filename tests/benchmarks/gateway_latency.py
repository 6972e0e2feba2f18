"""Benchmark: what the metering gateway adds to each LLM request (prints figures; not a test).

    python tests/benchmarks/gateway_latency.py [--runs 50] [--smoke] [--code DIR]

A local stub API (plain HTTP on 127.0.0.1) answers an Anthropic Messages request (a 20 kB body, as a CLI's turn)
with a streamed answer of 40 events or a whole JSON answer; each is timed from the request sent to the answer's last
byte, ``--runs`` times on one kept-alive connection, direct to the stub and through a gateway (on a unix socket, as
the sandbox reaches it), alternately. Figures are medians in milliseconds; ``added`` is through minus direct.

- ``stream``/``json``: no budget; ``budget``: the same stream under an API budget far from spent (the worst-case
  reservation); ``parallel4``: four clients at once under that budget (a CLI's side requests beside its
  turn: the gateway before reservations held each such request up to 0.5 s for the others to be counted).

``--code DIR`` imports ``bench`` from another checkout (``--code /work/main``: the gateway before a change), so the
same script measures before and after. ``--smoke`` runs the smallest size once. Lines are ``figure: value``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL = "claude-sonnet-4-5"


def sse(obj: dict) -> bytes:
    return f"event: {obj['type']}\ndata: {json.dumps(obj)}\n\n".encode()


def anthropic_events(pieces: int = 40) -> list[bytes]:
    start = {"type": "message_start", "message": {"model": MODEL, "usage": {"input_tokens": 5000, "output_tokens": 1}}}
    out = [sse(start)]
    out += [
        sse({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "word " * 5}})
    ] * pieces
    out.append(sse({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 200}}))
    out.append(sse({"type": "message_stop"}))
    return out


WHOLE = json.dumps(
    {"type": "message", "model": MODEL, "content": [{"type": "text", "text": "ok"}],
     "usage": {"input_tokens": 5000, "output_tokens": 200}}
).encode()  # fmt: skip


class Stub(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    events = anthropic_events()

    def log_message(self, *a) -> None:
        pass

    def setup(self) -> None:
        super().setup()  # as an API's server does: its head and body are not held back by Nagle's algorithm
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if json.loads(body).get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for ev in self.events:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(ev), ev))
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(WHOLE)))
            self.end_headers()
            self.wfile.write(WHOLE)


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("127.0.0.1", timeout=60)
        self.unix = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.unix)


def body(stream: bool) -> bytes:
    text = "x" * 20_000
    msg = {"model": MODEL, "max_tokens": 4096, "stream": stream, "messages": [{"role": "user", "content": text}]}
    return json.dumps(msg).encode()


def one(conn: http.client.HTTPConnection, data: bytes) -> float:
    t0 = time.perf_counter()
    conn.request("POST", "/v1/messages", data, {"Content-Type": "application/json", "x-api-key": "k"})
    r = conn.getresponse()
    r.read()
    assert r.status == 200, r.status
    return time.perf_counter() - t0


def measure(runs: int, direct, through, data: bytes) -> tuple[float, float]:
    a, b = [], []
    for _ in range(runs):
        a.append(one(direct, data))
        b.append(one(through, data))
    return statistics.median(a) * 1000, statistics.median(b) * 1000


def parallel(runs: int, sock: str, data: bytes, clients: int = 4) -> float:
    times: list[float] = []

    def client() -> None:
        c = UnixHTTP(sock)
        for _ in range(runs):
            times.append(one(c, data))
        c.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--smoke", action="store_true", help="the smallest size, once")
    ap.add_argument("--code", type=Path, default=ROOT, help="the checkout whose bench/ is measured")
    args = ap.parse_args()
    runs = 1 if args.smoke else args.runs
    sys.path.insert(0, str(args.code.resolve()))
    try:
        from bench.gateway.proxy import Gateway
    except ImportError:  # a checkout from before the gateway had its own package
        from bench.agents.gateway import Gateway
    from bench.sandbox.network import UnixServer

    stub = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    stub.daemon_threads = True
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{stub.server_address[1]}"
    print(f"code: {args.code.resolve()}")
    print(f"runs: {runs}")
    with tempfile.TemporaryDirectory() as tmp:
        servers = []
        socks = {}
        for name, cost in (("free", None), ("budget", 1000.0)):
            gw = Gateway(url, Path(tmp) / f"{name}.jsonl", max_cost=cost, family="anthropic")
            socks[name] = str(Path(tmp) / f"{name}.sock")
            servers.append(UnixServer(Path(socks[name]), gw.handle, "gateway"))
        direct = http.client.HTTPConnection("127.0.0.1", stub.server_address[1], timeout=60)
        for label, sock, stream in (("stream", "free", True), ("json", "free", False), ("budget", "budget", True)):
            through = UnixHTTP(socks[sock])
            one(through, body(stream))  # warm: the upstream connection opened
            d, g = measure(runs, direct, through, body(stream))
            through.close()
            print(f"{label} direct ms: {d:.2f}")
            print(f"{label} gateway ms: {g:.2f}")
            print(f"{label} added ms: {g - d:.2f}")
        print(f"parallel4 gateway ms: {parallel(runs, socks['budget'], body(True)):.2f}")
        direct.close()
        for s in servers:
            s.close()
    stub.shutdown()


if __name__ == "__main__":
    main()
