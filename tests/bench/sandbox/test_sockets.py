"""Unix sockets of the host, attacked from inside both sandboxes (the agent's and the predictor's).

A host process listens on a pathname socket inside a folder the view binds read-only (the venv: connect()
needs no write access), and on an abstract socket; code inside tries both. Neither may connect, and the
host's listeners must have accepted nothing. Without the mask the pathname one connects (checked first, so
that the test can fail)."""

from __future__ import annotations

import json
import shutil
import socket
import sys
import uuid
from pathlib import Path

import pytest

from bench.sandbox import Policy, default_hidden, default_readable

pytestmark = pytest.mark.usefixtures("bwrap_ok")

TRY_CONNECT = r"""
import errno, json, socket, sys
out = {}
for name, address in json.loads(sys.argv[1]).items():
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(address.replace("@", "\0", 1) if address.startswith("@") else address)
        s.sendall(b"hello from inside")
        out[name] = "connected"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
"""


@pytest.fixture
def host_sockets():
    """A listening pathname socket in a fresh folder inside the venv (bound read-only in every view) and an
    abstract one; removed afterwards."""
    folder = Path(sys.prefix) / f"bench-sock-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    path, abstract = folder / "s.sock", f"bench-test-{uuid.uuid4().hex}"
    servers = [socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)]
    servers[0].bind(str(path))
    servers[1].bind("\0" + abstract)
    for s in servers:
        s.listen(8)
        s.setblocking(False)
    try:
        yield {"path": str(path), "abstract": "@" + abstract}, servers
    finally:
        for s in servers:
            s.close()
        shutil.rmtree(folder, ignore_errors=True)


def _accepted(servers: list[socket.socket]) -> int:
    n = 0
    for s in servers:
        try:
            while True:
                s.accept()[0].close()
                n += 1
        except BlockingIOError:
            pass
    return n


def test_the_socket_is_reachable_without_the_mask(host_sockets, harness, inside, policy_of, monkeypatch):
    """The attack works against a view that binds the venv but masks nothing (no socket found by the scan):
    the reason for the mask."""
    addresses, servers = host_sockets
    monkeypatch.setattr("bench.sandbox.sockets.bound", lambda text=None: [])
    seen = inside(
        policy_of(harness), f"import sys; sys.argv[1:] = [{json.dumps(json.dumps(addresses))}]\n" + TRY_CONNECT
    )
    assert seen["path"] == "connected" and _accepted(servers) == 1
    assert seen["abstract"] == "ECONNREFUSED"  # --unshare-net: abstract sockets belong to the network namespace


@pytest.mark.parametrize("purpose", ["agent", "predictor"])
def test_no_host_socket_is_reachable_from_either_sandbox(purpose, host_sockets, harness, inside, policy_of):
    addresses, servers = host_sockets
    if purpose == "agent":
        policy = policy_of(harness)
    else:
        eval_dir = harness.run_dir / "eval" / "best"
        eval_dir.mkdir(parents=True)
        readable = (*default_readable("predictor"), eval_dir)
        policy = Policy(cwd=eval_dir, writable=(), readable=readable, hidden=default_hidden())
    code = f"import sys; sys.argv[1:] = [{json.dumps(json.dumps(addresses))}]\n" + TRY_CONNECT
    seen = inside(policy, code)
    assert seen == {"path": "ECONNREFUSED", "abstract": "ECONNREFUSED"}, seen
    assert _accepted(servers) == 0
