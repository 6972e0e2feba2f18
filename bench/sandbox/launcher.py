"""The first process inside a sandbox.

The inner end of the network bridges, and the agent's supervisor.

Run by bwrap as::

    python -I -S launcher.py [--listen HOST:PORT=UNIX_SOCKET ...] [--rlimit NAME=N ...]
        -- AGENT ARGV

Standard library only and imported by nothing it needs, because it runs before (and beside) any
agent code, with ``-I -S`` so that no ``PYTHONPATH``, user site or tracer hook is read.

Why it exists even without a network: with ``--unshare-pid`` every process of the sandbox dies the
moment its first process exits. If the agent were that process, the agent exiting on the budget's
SIGTERM would SIGKILL the training scripts it started at once, taking away the grace period the
harness promises them to write a last checkpoint. So this process starts the agent as its child and:

- the agent exits by itself: exit at once with its status (what the agent left running ends with the
  sandbox, as the harness would end it anyway; :mod:`bench.pipeline.watch`);
- SIGTERM/SIGINT/SIGHUP arrive (the watchdog signals the whole process group): pass them on to the
  agent, then stay until every other process of the sandbox has exited, so that the grace period
  plays out; the harness's SIGKILL at its end ends this process and with it the sandbox.

Its exit status is the agent's (128 + N when a signal N ended it). Each ``--listen`` makes it listen
on a loopback TCP port of the sandbox's own network namespace and carry every connection to a unix
socket that the harness serves outside (:mod:`bench.sandbox.network`): the only way out of
``--unshare-net``. Each ``--rlimit DATA=N`` / ``NPROC=N`` lowers that resource limit just before the
agent starts (the agent and all it starts inherit it; the launcher and bwrap, already running, keep
theirs): the memory and process limits of a run for which no cgroup could be made
(:mod:`bench.sandbox.resource_limits` says why DATA and not AS).
"""

from __future__ import annotations

import _signal as signal  # the C module: ``signal`` imports enum, a third of this process's start-up
import os
import sys
import time

# socket and threading are imported where they are used: without endpoints (the usual offline agent)
# the launcher starts in ~10 ms instead of ~30 ms; subprocess is not used for the same reason
TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket

POLL_S = 0.1
RESET = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # default for the agent


def pump(a: socket.socket, b: socket.socket, first: bytes = b"") -> None:
    """Copy bytes both ways until both sides are done (half-closes passed on), then close both."""
    import socket
    import threading

    def copy(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    try:
        if first:
            b.sendall(first)
        back = threading.Thread(target=copy, args=(b, a), daemon=True)
        back.start()
        copy(a, b)
        back.join()
    except OSError:
        pass
    finally:
        for s in (a, b):
            s.close()


def _bridge(conn: socket.socket, path: str) -> None:
    import socket

    out = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        out.connect(path)
    except OSError as e:
        print(f"[sandbox] bridge {path} unavailable: {e}", file=sys.stderr, flush=True)
        conn.close()
        out.close()
        return
    pump(conn, out)


def _serve(server: socket.socket, path: str) -> None:
    import threading

    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        threading.Thread(target=_bridge, args=(conn, path), daemon=True).start()


def listen(spec: str) -> list[socket.socket]:
    """``HOST:PORT=PATH``: listening sockets on the sandbox's loopback.

    ``localhost``: IPv4 and, when the namespace has it, IPv6, since clients may try ::1 first; each
    connection goes to the unix socket PATH.
    """
    import socket
    import threading

    address, _, path = spec.partition("=")
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    families = {
        "localhost": [("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6)],
        "::1": [("::1", socket.AF_INET6)],
    }
    servers = []
    for addr, family in families.get(host, [(host, socket.AF_INET)]):
        server = socket.socket(family, socket.SOCK_STREAM)
        try:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind((addr, int(port)))
            server.listen(128)
        except OSError:
            server.close()
            if addr == "::1" and host == "localhost":
                continue  # no IPv6 in this namespace: IPv4 alone
            raise
        servers.append(server)
        threading.Thread(target=_serve, args=(server, path), daemon=True).start()
    return servers


def others_alive() -> bool:
    """Whether a process of this PID namespace other than its init and this one is still running."""
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (1, me):
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X"):
            return True
    return False


def set_rlimits(specs: list[str]) -> None:
    """``NAME=N`` for each resource.RLIMIT_NAME to lower to N.

    Soft and hard; never above the hard limit.
    """
    import resource

    for spec in specs:
        name, _, value = spec.partition("=")
        res = getattr(resource, f"RLIMIT_{name}")
        _, hard = resource.getrlimit(res)
        n = int(value) if hard == resource.RLIM_INFINITY else min(int(value), hard)
        resource.setrlimit(res, (n, n))


def main(argv: list[str]) -> int:
    """Listen for the bridges, lower the limits, run the command; returns its exit status."""
    if "--" not in argv:
        print(
            "usage: launcher.py [--listen HOST:PORT=SOCKET ...] [--rlimit NAME=N ...] -- COMMAND ...", file=sys.stderr
        )
        return 2
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1 :]
    specs = [options[i + 1] for i, o in enumerate(options) if o == "--listen" and i + 1 < len(options)]
    rlimits = [options[i + 1] for i, o in enumerate(options) if o == "--rlimit" and i + 1 < len(options)]
    try:
        servers = [s for spec in specs for s in listen(spec)]
    except (OSError, ValueError) as e:
        print(f"[sandbox] cannot listen inside the sandbox: {e}", file=sys.stderr, flush=True)
        return 125
    state: dict = {"terminating": False, "child": None}  # child: its pid until it has been waited for

    def on_signal(signum: int, frame: object) -> None:
        state["terminating"] = True
        if state["child"] is not None:
            try:
                os.kill(state["child"], signum)
            except OSError:
                pass

    # handled here, so the agent (exec resets handlers) starts with the default action even though
    # the harness started bwrap with SIGTERM ignored
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    if not command:
        return 2
    if state["terminating"]:
        return 128 + signal.SIGTERM  # ended before the agent started
    try:
        set_rlimits(rlimits)
    except (AttributeError, ValueError, OSError) as e:
        print(f"[sandbox] cannot set the run's limits {rlimits}: {e}", file=sys.stderr, flush=True)
        return 125
    try:  # Python ignores SIGPIPE; the agent gets the default action of every signal, as from a shell
        state["child"] = pid = os.posix_spawnp(command[0], command, os.environ, setsigdef=RESET)
    except OSError as e:
        print(f"[sandbox] cannot start {command[0]}: {e}", file=sys.stderr, flush=True)
        return 127
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    state["child"] = None
    while state["terminating"] and others_alive():
        time.sleep(POLL_S)  # the grace period: scripts may still be writing their last checkpoint
    for server in servers:
        server.close()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main(sys.argv[1:]))
