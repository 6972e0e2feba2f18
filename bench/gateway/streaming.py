"""One answer streamed back to the CLI as it arrives, and read on for its usage if the CLI leaves.

The answer is passed on piece by piece (SSE is never buffered whole), each piece also handed to the
gateway's meters (``feed``). **A stream left early is paid for what the API will bill**: when the
client (the CLI, killed at its budget) leaves mid-answer, the answer is still read, not passed on,
for up to the gateway's ``drain_s`` and :data:`DRAIN_MAX_BYTES`, because the API bills the
generation it goes on with, and some APIs say their usage only at the end. A watch thread notices
the client leaving while the answer is still coming and cuts the upstream once ``drain_s`` has
passed, so the request's line is written then at the latest, not when the API next speaks.
"""

from __future__ import annotations

import contextlib
import http.client
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import h11

from bench.gateway.http1 import ClientConnection
from bench.gateway.upstream import HOP

# After the client (the CLI, killed at its budget) leaves mid-answer, the answer is still read, not
# passed on, for up to this long: the API bills the generation it goes on with, and OpenAI's
# Responses and Chat Completions streams (Codex, OpenCode, Aider) say their usage only at the end,
# so reading on is what makes the run's tokens and cost the API's own. Past it the upstream is cut
# and the line keeps what had streamed (marked cut). That time is Gateway.drain_s:
# BENCH_GATEWAY_DRAIN_S (bench.settings, 20 s by default).
DRAIN_MAX_BYTES = 64 << 20  # the most read of an answer after its client left (its usage comes at its end)


@dataclass
class Passed:
    """How passing one answer on ended."""

    cut: str | None  # why the answer ended before its end (None: read to its end)
    first: float | None  # when its first piece came (None: never)
    keep: bool  # whether the client's connection takes its next request
    left: bool  # the client left before the end: the rest was read for its usage only


def pass_on(
    client: ClientConnection,
    resp: http.client.HTTPResponse,
    up: http.client.HTTPConnection,
    *,
    close: bool,
    drain_s: float,
    feed: Callable[[bytes], None],
) -> Passed:
    """Stream ``resp`` back to ``client`` as it arrives, each piece (the empty last one too) fed.

    ``close``: the client asked for its connection to close after this answer. If the client
    leaves mid-answer, the rest is read, passed on to no one, for ``drain_s`` and
    :data:`DRAIN_MAX_BYTES` at most, then ``up`` is cut. The caller closes or reuses ``up``.
    """
    whole = resp.getheader("Content-Length") is not None and resp.getheader("Transfer-Encoding") is None
    head = [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP | {"content-encoding"}]
    head += [("Content-Length", str(resp.length))] if whole else []  # else h11 frames it chunked
    cut, first, keep, left, drained = None, None, not close, False, 0
    gone = _watch_client(client.sock, up, drain_s)
    try:
        client.start(resp.status, resp.reason, head, close)
    except (OSError, h11.LocalProtocolError):
        left, keep = True, False  # the answer is still read for its usage (drain_s), passed on to no one
    while cut is None:
        try:
            data = resp.read1(65536)
        except (OSError, http.client.HTTPException) as e:
            cut, keep = f"the API's answer broke off: {type(e).__name__}", False
            if gone.cut:  # cut here, because the client had left and the drain's time ran out
                cut = "the client closed its connection mid-answer"
            break
        if first is None:
            first = time.time()
        if left or gone.closed:  # read on for the usage only, bounded in bytes as in time (drain_s)
            drained += len(data)
            if drained > DRAIN_MAX_BYTES:
                cut, keep = f"the client left and the answer passed {DRAIN_MAX_BYTES} bytes after it", False
                break
        feed(data)
        if not data:
            if not left:
                with contextlib.suppress(OSError, h11.LocalProtocolError):
                    client.end()
            break
        if not left:
            try:
                client.data(data)
            except (OSError, h11.LocalProtocolError):
                left, keep = True, False  # read on for the usage (the watch cuts it after drain_s)
    gone.set()  # the answer is over: stop watching
    if gone.cut and cut is None:  # the upstream was cut: the client left and the drain's time ran out
        cut, keep = "the client closed its connection mid-answer", False
    keep = keep and client.keep_alive  # h11's verdict: the answer whole, the connection reusable
    if left or gone.closed:  # the answer was read to its end without the client: its usage is the API's
        keep, left = False, True
    return Passed(cut, first, keep, left)


class _Watch(threading.Event):
    closed = False  # the client closed its end while the answer was still coming
    cut = False  # ... and the answer did not end within the drain's time: the upstream was cut


def _watch_client(conn: socket.socket, up: http.client.HTTPConnection, drain_s: float) -> _Watch:
    """A thread that cuts the upstream connection when the client leaves mid-answer.

    It notices the client (the CLI, killed at its budget) closing its connection while the answer is
    still coming, gives the answer ``drain_s`` more to end (its usage), then cuts the upstream
    connection, so the request's line is written then at the latest, not when the API next speaks.
    Set the returned event when the answer ends.
    """
    done = _Watch()

    def watch() -> None:
        while not done.wait(0.25):
            try:
                readable, _, _ = select.select([conn], [], [], 0)
                if not readable or conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                    continue  # nothing yet, or the client's next request (left in place)
            except BlockingIOError:
                continue
            except OSError:
                pass
            done.closed = True
            if done.wait(drain_s):
                return  # the answer ended within the drain: its usage is read
            done.cut = True
            with contextlib.suppress(OSError, AttributeError):
                up.sock.shutdown(socket.SHUT_RDWR)
            return

    threading.Thread(target=watch, name="gateway-client-watch", daemon=True).start()
    return done
