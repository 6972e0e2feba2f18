"""The gateway's side of HTTP/1.1 with a CLI in the sandbox: one request read (bounded), one JSON answer sent.

Kept apart from :mod:`bench.agents.gateway` (which forwards and meters) because it is the part that parses what the
agent's process sends: each read is bounded (``MAX_HEAD`` for the request line and headers, ``MAX_BODY`` for a
body, chunked or not), and a malformed request raises ValueError, which ends that one connection.
"""

from __future__ import annotations

import json
import socket

MAX_HEAD = 64 * 1024
MAX_BODY = 64 << 20  # a request body larger than this is refused: the CLIs send tens of kB


def read_request(rfile) -> tuple[str, str, list[tuple[str, str]], bytes] | None:
    """One HTTP/1.1 request (method, target as sent: :func:`bench.agents.routes.bad_target` judges it, headers in
    order, body); None at a clean end of the
    connection. Raises ValueError for a malformed one."""
    line = rfile.readline(MAX_HEAD)
    while line in (b"\r\n", b"\n"):
        line = rfile.readline(MAX_HEAD)
    if not line:
        return None
    parts = line.decode("latin-1").split()
    if len(parts) != 3:
        raise ValueError("not an HTTP request line")
    method, target, _ = parts
    headers, size = [], 0
    while (h := rfile.readline(MAX_HEAD)) not in (b"\r\n", b"\n", b""):
        size += len(h)
        if size > MAX_HEAD:
            raise ValueError("request head too large")
        k, _, v = h.decode("latin-1").partition(":")
        headers.append((k.strip(), v.strip()))
    names = {k.lower(): v for k, v in headers}
    if "chunked" in names.get("transfer-encoding", "").lower():
        body = bytearray()
        while (n := int(rfile.readline(1024).split(b";")[0].strip() or b"0", 16)) > 0:
            body += rfile.read(n)
            rfile.readline(1024)
            if len(body) > MAX_BODY:
                raise ValueError("request body too large")
        while rfile.readline(MAX_HEAD) not in (b"\r\n", b"\n", b""):
            pass  # trailers
        return method, target, headers, bytes(body)
    length = int(names.get("content-length") or 0)
    if length > MAX_BODY:
        raise ValueError("request body too large")
    return method, target, headers, rfile.read(length) if length else b""


def send_json(conn: socket.socket, status: int, payload: dict) -> None:
    data = json.dumps(payload).encode()
    reasons = {400: "Bad Request", 401: "Unauthorized", 402: "Payment Required", 404: "Not Found"}
    reason = {**reasons, 429: "Too Many Requests"}.get(status, "Error")
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    conn.sendall(head.encode() + data)
