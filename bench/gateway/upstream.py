"""The gateway's connection to the real API: dialled, verified over TLS, a request sent on it.

The gateway forwards over TLS with the certificate verified against the upstream's host, as any
client would; ``resolve`` lets a non-loopback name be dialled at another address (tests serve such
names on this machine). Hop-by-hop headers are never passed on, either way; the request goes out
with its own ``Host`` and ``Content-Length`` and asks for no encoding, so the answer can be read as
it streams. A kept-alive connection the API closed meanwhile is redialled once.
"""

from __future__ import annotations

import http.client
import socket
import ssl
from collections.abc import Callable

UPSTREAM_TIMEOUT_S = 600.0  # the longest silence inside an answer (a model thinking before its first token)
HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer", "transfer-encoding"}
HOP |= {"upgrade", "host", "content-length", "accept-encoding"}


class _Upstream(http.client.HTTPSConnection):
    """An HTTPS connection to ``host`` that may dial another address (``resolve``).

    Tests' non-loopback names served on this machine are dialled that way; the certificate is still
    checked against ``host``.
    """

    def __init__(self, host: str, port: int, address: str, context: ssl.SSLContext) -> None:
        super().__init__(host, port, timeout=UPSTREAM_TIMEOUT_S, context=context)
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def dial(scheme: str, host: str, port: int, address: str, context: ssl.SSLContext) -> http.client.HTTPConnection:
    """A new connection to the API (opened by its first request).

    HTTPS to ``host`` at ``address``, verified with ``context``; plain HTTP for an ``http`` upstream
    (a loopback mock).
    """
    if scheme == "https":
        return _Upstream(host, port, address, context)
    return http.client.HTTPConnection(address, port, timeout=UPSTREAM_TIMEOUT_S)


def request_head(headers: list[tuple[str, str]], host: str, port: int, body: bytes) -> list[tuple[str, str]]:
    """The headers a request is forwarded with.

    The client's, less the hop-by-hop ones; then the upstream's ``Host``, ``Accept-Encoding:
    identity`` and the body's ``Content-Length``.
    """
    out = [(k, v) for k, v in headers if k.lower() not in HOP]
    out += [("Host", host if port in (80, 443) else f"{host}:{port}")]
    out += [("Accept-Encoding", "identity"), ("Content-Length", str(len(body)))]
    return out


def send(
    up: http.client.HTTPConnection | None,
    dial: Callable[[], http.client.HTTPConnection],
    method: str,
    path: str,
    head: list[tuple[str, str]],
    body: bytes,
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """Send one request on ``up`` (or a new connection) and return the connection and its answer.

    A kept-alive upstream connection may have been closed meanwhile: a failed send is tried once
    more on a new connection (``dial``). If that fails too, the connection is closed and the error
    raised (``OSError`` or ``http.client.HTTPException``).
    """
    first = up if up is not None else dial()
    try:
        return first, _exchange(first, method, path, head, body)
    except (OSError, http.client.HTTPException):
        first.close()
    again = dial()
    try:
        return again, _exchange(again, method, path, head, body)
    except (OSError, http.client.HTTPException):
        again.close()
        raise


def _exchange(
    up: http.client.HTTPConnection, method: str, path: str, head: list[tuple[str, str]], body: bytes
) -> http.client.HTTPResponse:
    up.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    for k, v in head:
        up.putheader(k, v)
    up.endheaders(body if body or method in ("POST", "PUT", "PATCH") else None)
    return up.getresponse()
