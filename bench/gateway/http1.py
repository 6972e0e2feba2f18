"""The gateway's side of HTTP/1.1 with a CLI in the sandbox.

Parsed and framed by ``h11`` (a maintained parser).

Kept apart from :mod:`bench.gateway.proxy` (which forwards and meters) because it is the part that
reads what the agent's process sends, the hostile edge. A hand-written reader here was replaced by
h11's state machine: the request line, headers and body framing (Content-Length, chunked,
keep-alive, ``Connection: close``, pipelining) are h11's, with its checks of each; the reads stay
bounded (``MAX_HEAD`` for the request line and headers, h11's ``max_incomplete_event_size``;
``MAX_BODY`` for a body). A malformed request is answered 400 by h11's verdict and ends that one
connection. The answers are framed by h11 too (chunked where the upstream's length is unknown).

The request target is handed on as sent (h11 checks its characters only);
:func:`bench.gateway.routes.bad_target` judges whether it is a plain path.
"""

from __future__ import annotations

import json
import socket

import h11

MAX_HEAD = 64 * 1024
MAX_BODY = 64 << 20  # a request body larger than this is refused: the CLIs send tens of kB
REASONS = {400: "Bad Request", 401: "Unauthorized", 402: "Payment Required", 404: "Not Found", 429: "Too Many Requests"}
REASONS[431] = "Request Header Fields Too Large"


class ClientConnection:
    """One CLI connection: requests read with h11, answers written through it.

    :meth:`next_request` returns the next request, None at the connection's end; ValueError for a
    malformed or oversized one (answered 400 already).
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)

    def _event(self):
        while True:
            ev = self.h11.next_event()
            if ev is not h11.NEED_DATA:
                return ev
            self.h11.receive_data(self.sock.recv(65536))

    def next_request(self) -> tuple[str, str, list[tuple[str, str]], bytes] | None:
        """(method, target as sent, headers in order with their names as sent, body)."""
        if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
            self.h11.start_next_cycle()
        elif self.h11.our_state is not h11.IDLE:
            return None  # the last answer closed the connection (or broke off)
        try:
            ev = self._event()
            if isinstance(ev, h11.ConnectionClosed):
                return None
            if not isinstance(ev, h11.Request):
                raise ValueError(f"unexpected {type(ev).__name__}")
            body = bytearray()
            while not isinstance(part := self._event(), h11.EndOfMessage):
                if isinstance(part, h11.ConnectionClosed):
                    return None
                body += part.data
                if len(body) > MAX_BODY:
                    raise ValueError("request body too large")
        except (h11.RemoteProtocolError, ValueError) as e:
            self._refuse(str(e), getattr(e, "error_status_hint", 400))  # h11's status: 431 for a head too large
            raise ValueError(str(e)) from e
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in ev.headers.raw_items()]
        return ev.method.decode("ascii"), ev.target.decode("latin-1"), headers, bytes(body)

    def _refuse(self, why: str, status: int = 400) -> None:
        """A 4xx for a request h11 (or a bound) would not accept.

        Sent where the connection can still say so.
        """
        if self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            data = json.dumps({"error": {"message": f"1GC-7RC: malformed request: {why[:200]}"}}).encode()
            try:
                self.send_whole(status, [("Content-Type", "application/json")], data, close=True)
            except (OSError, h11.LocalProtocolError):
                pass

    # --- answers ----------------------------------------------------------------------------------
    def start(self, status: int, reason: str, headers: list[tuple[str, str]], close: bool = False) -> None:
        """The answer's status line and headers.

        With Content-Length where known; chunked otherwise.
        """
        if close:
            headers = [*headers, ("Connection", "close")]
        ev = h11.Response(status_code=status, reason=reason.encode("latin-1"), headers=headers)
        self.sock.sendall(self.h11.send(ev))

    def data(self, data: bytes) -> None:
        """Send a piece of the answer's body (nothing for an empty one)."""
        if data:
            self.sock.sendall(self.h11.send(h11.Data(data=data)))

    def end(self) -> None:
        """End the answer (h11 closes a chunked body)."""
        self.sock.sendall(self.h11.send(h11.EndOfMessage()))

    def send_whole(self, status: int, headers: list[tuple[str, str]], data: bytes, close: bool = False) -> None:
        """Send a whole answer whose body is known: status line, headers with its length, body."""
        self.start(status, REASONS.get(status, "Error"), [*headers, ("Content-Length", str(len(data)))], close)
        self.data(data)
        self.end()

    def send_json(self, status: int, payload: dict, close: bool = False) -> None:
        """Send ``payload`` as a whole JSON answer (the gateway's own refusals)."""
        self.send_whole(status, [("Content-Type", "application/json")], json.dumps(payload).encode(), close)

    @property
    def keep_alive(self) -> bool:
        """Whether another request may follow on this connection.

        h11's verdict, ``Connection: close`` included.
        """
        return self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE
