"""Benchmark: what the metering gateway adds to each LLM request, this tree's and before reservations, side by side
(prints figures; not a test).

    python tests/benchmarks/gateway_latency.py [--runs 100] [--rounds 2] [--before COMMIT] [--smoke]

A local stub API (plain HTTP on 127.0.0.1) answers an Anthropic Messages request (a 20 kB body, as a CLI's turn)
with a streamed answer of 40 events or a whole JSON answer; each is timed from the request sent to the answer's last
byte, ``--runs`` times on one kept-alive connection, direct to the stub and through a gateway (on a unix socket, as
the sandbox reaches it), alternately. Each round is a process of its own that measures one gateway: this tree's, or
that of ``--before`` (a commit from before the budget's reservations; its ``bench`` extracted by git archive), the
two in turn for ``--rounds`` rounds. Figures are medians in milliseconds (of the rounds' medians); ``added`` is
through minus direct.

- ``stream``/``json``: no budget; ``budget``: the same stream under an API budget far from spent (the worst-case
  reservation); ``parallel4``: four clients at once under that budget (a CLI's side requests beside its
  turn: the gateway before reservations held each such request up to 0.5 s for the others to be counted).

``make bench`` runs ``--runs 100 --rounds 2`` (10-12 s on the shared 2-core machine at load 5-6). ``--smoke``: one
run, one round (its figures mean nothing). Needs the git history (``--before`` must be in the clone).
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.figures import Span, add_smoke  # noqa: E402

MODEL = "claude-sonnet-4-5"
BEFORE = "435a5ea"  # the last gateway before each model request reserved its worst case against the budget


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


def checkout(commit: str, into: Path) -> Path:
    """The ``bench`` package of ``commit``, extracted into ``into`` (git archive: the working tree is not touched)."""
    blob = subprocess.run(["git", "archive", commit, "bench"], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(blob)) as tar:
        tar.extractall(into, filter="data")
    return into


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


def measure(code: str, runs: int) -> dict[str, float]:
    """In this process (a child: its ``bench`` is ``code``'s): the medians in ms, direct and through a gateway."""
    sys.path.insert(0, code)
    for name in [m for m in sys.modules if m == "bench" or m.startswith("bench.")]:
        del sys.modules[name]
    try:
        from bench.gateway.proxy import Gateway
    except ImportError:  # a checkout from before the gateway had its own package
        from bench.agents.gateway import Gateway
    from bench.sandbox.network import UnixServer

    assert Path(sys.modules["bench"].__file__).is_relative_to(code), sys.modules["bench"].__file__
    stub = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    stub.daemon_threads = True
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{stub.server_address[1]}"
    out: dict[str, float] = {}
    # a folder of the parent's (its cwd), removed by the parent once this process has ended: a gateway's thread may
    # still be writing its log as this one returns
    tmp = tempfile.mkdtemp(dir=Path.cwd())
    servers, socks = [], {}
    for name, cost in (("free", None), ("budget", 1000.0)):
        gw = Gateway(url, Path(tmp) / f"{name}.jsonl", max_cost=cost, family="anthropic")
        socks[name] = str(Path(tmp) / f"{name}.sock")
        servers.append(UnixServer(Path(socks[name]), gw.handle, "gateway"))
    direct = http.client.HTTPConnection("127.0.0.1", stub.server_address[1], timeout=60)
    for label, sock, stream in (("stream", "free", True), ("json", "free", False), ("budget", "budget", True)):
        through = UnixHTTP(socks[sock])
        one(through, body(stream))  # warm: the upstream connection opened
        a, b = [], []
        for _ in range(runs):  # direct and through alternately
            a.append(one(direct, body(stream)))
            b.append(one(through, body(stream)))
        through.close()
        out[f"{label}.direct"], out[f"{label}.gateway"] = statistics.median(a) * 1000, statistics.median(b) * 1000
    out["parallel4"] = parallel(runs, socks["budget"], body(True))
    direct.close()
    for s in servers:
        s.close()
    stub.shutdown()
    return out


def main() -> None:
    if sys.argv[1:2] == ["--measure"]:  # the child: one round of one side
        return print(json.dumps(measure(sys.argv[2], int(sys.argv[3]))))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--before", default=BEFORE, help="the commit whose gateway is measured beside this tree's")
    add_smoke(ap)
    args = ap.parse_args()
    runs, rounds = (1, 1) if args.smoke else (args.runs, args.rounds)
    known = subprocess.run(["git", "cat-file", "-e", f"{args.before}^{{commit}}"], cwd=ROOT, capture_output=True)
    if known.returncode != 0:
        raise SystemExit(f"--before {args.before}: no such commit in {ROOT} (a shallow clone? git fetch --unshallow)")
    print(f"runs: {runs}, rounds: {rounds}, before: {args.before}")
    got: dict[str, list[dict[str, float]]] = {"after": [], "before": []}
    with tempfile.TemporaryDirectory() as tmp:
        codes = {"after": ROOT, "before": checkout(args.before, Path(tmp) / "before")}
        span = Span()
        for _ in range(rounds):
            for side, code in codes.items():
                argv = [sys.executable, __file__, "--measure", str(code), str(runs)]
                done = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, check=False)
                assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
                got[side].append(json.loads(done.stdout.splitlines()[-1]))
                print(f"{side}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in got[side][-1].items()), flush=True)
    what = f"median of {runs} a round, {rounds} rounds (each a process), the two gateways in turn"
    for side, suffix, who in (("after", "", "this tree's gateway"), ("before", "_before", f"{args.before}'s")):
        for label in ("stream", "json", "budget"):
            added = statistics.median(r[f"{label}.gateway"] - r[f"{label}.direct"] for r in got[side])
            rows = "; ".join(f"{r[f'{label}.direct']:.2f} -> {r[f'{label}.gateway']:.2f} ms" for r in got[side])
            span.figure(f"gateway_latency.{label}.added{suffix}", f"{added:+.1f} ms",
                        f"{who}, {label}, through minus direct ({rows}), {what}")  # fmt: skip
        took = statistics.median(r["parallel4"] for r in got[side])
        span.figure(f"gateway_latency.parallel4{suffix}", f"{took:.1f} ms",
                    f"{who}, 4 clients at once under a budget, each request, {what}")  # fmt: skip


if __name__ == "__main__":
    main()
