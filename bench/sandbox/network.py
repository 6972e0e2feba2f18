"""The only way out of a sandbox's empty network namespace.

Bridges to the endpoints a run may reach.

Inside, the sandbox has its own loopback and nothing else (``--unshare-net``): no DNS, no route, and
the host's 127.0.0.1 is not its 127.0.0.1. Each allowed endpoint gets a bridge whose outer end lives
here, in daemon threads of the harness (so it dies with it), listening on a unix socket in the
sandbox's runtime folder; the inner end is the launcher (:mod:`bench.sandbox.launcher`), listening
on a loopback port inside:

- a loopback endpoint (``http://127.0.0.1:P/...``, ``http://localhost:P``: a gateway or the test
  mock on this machine) is bridged port for port: 127.0.0.1:P inside reaches 127.0.0.1:P outside,
  and no other port;
- every other endpoint (``https://api.anthropic.com``) goes through one HTTP proxy, reached at
  127.0.0.1:3128 inside through the same kind of bridge, with ``HTTPS_PROXY`` and friends pointing
  at it. The proxy tunnels (``CONNECT``) or forwards (absolute-form ``GET http://...``, one request
  per connection) only to an allowed host:port and answers 403 to anything else, so that bytes only
  ever go to the model's API.

With no endpoints there is no bridge and no proxy: no network at all. Given a ``log``, the proxy
runs anyway (allowing nothing) and writes one JSON line per request it receives, allowed or refused:
the harness's own record of what the run tried to reach (tools that honour ``HTTPS_PROXY``: pip,
curl, wget, git, requests, urllib, Node); a client that ignores the variables finds no route and
leaves no line.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from bench.errors import InputError
from bench.sandbox.launcher import pump

PROXY_PORT = 3128
MAX_HEADER = 64 * 1024  # a proxy request's head; more is refused
HEADER_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 30.0
LOOPBACK_NAMES = ("localhost",)


@dataclass(frozen=True)
class Endpoint:
    """One URL a sandbox may reach, as host and port."""

    url: str
    scheme: str
    host: str  # lower case, no brackets
    port: int

    @property
    def loopback(self) -> bool:
        """Whether the endpoint is on this machine (a loopback name or address)."""
        if self.host in LOOPBACK_NAMES:
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def parse_endpoint(url: str) -> Endpoint:
    """``https://api.anthropic.com`` -> (https, api.anthropic.com, 443).

    Raises :class:`~bench.errors.InputError` (a ValueError) without a host.
    """
    parts = urlsplit(url if "://" in url else f"https://{url}")
    if not parts.hostname:
        raise InputError(f"not an endpoint URL (no host): {url!r}; give one such as https://api.anthropic.com")
    port = parts.port or {"http": 80, "https": 443, "ws": 80, "wss": 443}.get(parts.scheme, 443)
    return Endpoint(url, parts.scheme, parts.hostname.lower(), port)


class UnixServer:
    """Accepts connections on a unix socket and hands each to ``handler`` in a daemon thread."""

    def __init__(self, path: Path, handler, name: str) -> None:
        self.path, self.handler, self.name = Path(path), handler, name
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(self.path))
        self._sock.listen(128)
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name=f"sandbox-{name}", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                self._open.add(conn)
            threading.Thread(target=self._handle, args=(conn,), name=f"sandbox-{self.name}-conn", daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            self.handler(conn)
        except Exception:  # one broken connection never takes the bridge down
            conn.close()
        finally:
            with self._lock:
                self._open.discard(conn)

    def close(self) -> None:
        """Stop accepting and cut the connections still open."""
        with self._lock:
            self._closed = True
            conns, self._open = list(self._open), set()
        for s in [self._sock, *conns]:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


def forward_to(host: str, port: int):
    """A handler that carries a connection to host:port (a loopback endpoint) unchanged."""

    def handle(conn: socket.socket) -> None:
        try:
            upstream = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
        except OSError:
            conn.close()  # the sandbox sees a connection closed at once, as if refused
            return
        upstream.settimeout(None)
        pump(conn, upstream)

    return handle


def _reply(conn: socket.socket, status: str, text: str) -> None:
    body = (text + "\n").encode()
    head = f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    with contextlib.suppress(OSError):
        conn.sendall(head.encode() + body)
    conn.close()


def _read_head(conn: socket.socket) -> tuple[bytes, bytes] | None:
    """The request head (through the blank line) and what came after it; None if it never ends."""
    conn.settimeout(HEADER_TIMEOUT_S)
    buf = b""
    while b"\r\n\r\n" not in buf:
        if len(buf) > MAX_HEADER:
            return None
        data = conn.recv(65536)
        if not data:
            return None
        buf += data
    conn.settimeout(None)
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head + b"\r\n\r\n", rest


def _target(method: str, target: str) -> tuple[str, int] | None:
    if method == "CONNECT":
        host, sep, port = target.rpartition(":")
        return (host.strip("[]").lower(), int(port)) if sep and port.isdigit() else None
    parts = urlsplit(target)
    if parts.scheme not in ("http", "ws") or not parts.hostname:
        return None
    return parts.hostname.lower(), parts.port or 80


def _origin_form(head: bytes) -> bytes:
    """A proxied request as its server expects it.

    ``GET /path`` instead of ``GET http://host/path``, and one request per connection
    (``Connection: close``), so that a second request cannot ride to another host.
    """
    lines = head.rstrip(b"\r\n").split(b"\r\n")
    method, target, version = lines[0].split(b" ", 2)
    parts = urlsplit(target.decode("latin-1"))
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    drop = (b"connection:", b"proxy-connection:", b"keep-alive:")
    headers = [h for h in lines[1:] if not h.lower().startswith(drop)]
    return b"\r\n".join([b" ".join((method, path.encode("latin-1"), version)), *headers, b"Connection: close"]) + (
        b"\r\n\r\n"
    )


class RequestLog:
    """One JSON line per proxy request, appended and flushed at once.

    Each line: time, method, host, port, allowed. After ``limit`` lines one last line says the log
    stopped (a request loop must not fill the harness's disk).
    """

    def __init__(self, path: Path, limit: int = 10_000) -> None:
        self.path, self.limit, self.lines = Path(path), limit, 0
        self._lock = threading.Lock()

    def note(self, method: str, dest: tuple[str, int] | None, allowed: bool, target: str = "") -> None:
        """Append one request's line (past the limit, once, the line that says the log stopped)."""
        with self._lock:
            self.lines += 1
            n = self.lines
        if n > self.limit + 1:
            return
        if n == self.limit + 1:
            method, dest, target = "TRUNCATED", None, f"more than {self.limit} requests: the log stops here"
        host, port = dest if dest else ("", 0)
        rec = {"t": round(time.time(), 3), "method": method[:16], "host": host[:255], "port": port, "allowed": allowed}
        if dest is None:
            rec["target"] = target[:255]
        with self._lock, contextlib.suppress(OSError), open(self.path, "a") as f:
            f.write(json.dumps(rec) + "\n")


def connect_proxy(allowed: set[tuple[str, int]], log: RequestLog | None = None):
    """A handler speaking enough HTTP proxy to tunnel or forward to an allowed (host, port).

    403 otherwise.
    """

    def handle(conn: socket.socket) -> None:
        try:
            got = _read_head(conn)
        except OSError:
            got = None
        if got is None:
            return _reply(conn, "400 Bad Request", "bench sandbox proxy: incomplete request")
        head, rest = got
        line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        dest = _target(line[0].upper(), line[1]) if len(line) == 3 else None
        if log is not None:
            log.note(line[0] if line else "", dest, dest in allowed, line[1] if len(line) > 1 else "")
        if dest is None:
            return _reply(conn, "400 Bad Request", "bench sandbox proxy: CONNECT host:port or an absolute http URL")
        if dest not in allowed:
            return _reply(conn, "403 Forbidden", f"bench sandbox: {dest[0]}:{dest[1]} is not an allowed endpoint")
        try:
            upstream = socket.create_connection(dest, timeout=CONNECT_TIMEOUT_S)
        except OSError as e:
            return _reply(conn, "502 Bad Gateway", f"bench sandbox proxy: {dest[0]}:{dest[1]}: {e}")
        upstream.settimeout(None)
        if line[0].upper() == "CONNECT":
            conn.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            pump(conn, upstream, rest)
        else:
            pump(conn, upstream, _origin_form(head) + rest)

    return handle


class Network:
    """The bridges of one sandbox.

    ``listen`` are the launcher's ``--listen`` arguments, ``env`` the proxy variables for inside;
    both empty without endpoints. Start with :meth:`start`, end with :meth:`close`.
    """

    def __init__(
        self,
        endpoints: tuple[str, ...],
        runtime_dir: Path | None,
        log: Path | None = None,
        services: dict[int, Callable[[socket.socket], None]] | None = None,
    ) -> None:
        self.endpoints = [parse_endpoint(u) for u in endpoints]
        self.log = RequestLog(log) if log is not None else None
        # loopback ports inside served by a handler here (the metering gateway:
        # bench.gateway.proxy), not forwarded
        self.services = dict(services or {})
        if (self.endpoints or log is not None or self.services) and runtime_dir is None:
            raise ValueError("endpoints need a runtime folder for their bridges' sockets")
        self.runtime_dir = Path(runtime_dir) if runtime_dir is not None else None
        self.listen: list[str] = []
        self.env: dict[str, str] = {}
        self._servers: list[UnixServer] = []

    def start(self) -> Network:
        """Open the bridges' unix sockets and their servers; returns the network itself."""
        ports: dict[int, Endpoint] = {}
        for e in self.endpoints:
            if e.loopback:
                ports.setdefault(e.port, e)
        for n, (port, e) in enumerate(sorted(ports.items())):
            path = Path(self.runtime_dir) / f"port-{n}.sock"
            self._servers.append(UnixServer(path, forward_to(e.host, port), f"port-{port}"))
            host = f"[{e.host}]" if ":" in e.host else e.host  # localhost: the launcher listens on v4 and v6
            self.listen.append(f"{host}:{port}={path}")
        for port, handler in sorted(self.services.items()):
            path = Path(self.runtime_dir) / f"service-{port}.sock"
            self._servers.append(UnixServer(path, handler, f"service-{port}"))
            self.listen.append(f"127.0.0.1:{port}={path}")
        remote = {(e.host, e.port) for e in self.endpoints if not e.loopback}
        if remote or self.log is not None:
            proxy_port = PROXY_PORT
            while proxy_port in ports or proxy_port in self.services:
                proxy_port += 1
            path = Path(self.runtime_dir) / "proxy.sock"
            self._servers.append(UnixServer(path, connect_proxy(remote, self.log), "proxy"))
            self.listen.append(f"127.0.0.1:{proxy_port}={path}")
            url = f"http://127.0.0.1:{proxy_port}"
            for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
                self.env[name] = url
            self.env.update({"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"})
            self.env["NODE_USE_ENV_PROXY"] = "1"  # Node >= 24's fetch honours the variables only with this
        return self

    def close(self) -> None:
        """Close every bridge's server (the run has ended)."""
        for server in self._servers:
            server.close()
        self._servers = []
