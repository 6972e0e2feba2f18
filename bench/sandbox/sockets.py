"""Unix sockets of the host that a sandbox's view would show, so that they can be masked.

Why: ``connect()`` on a unix socket needs no write access to its file system, so a socket file at a
visible path is a way out of the sandbox even when that path is bound read-only (a database, a
Docker or X server, an agent of the user's). ``--unshare-net`` cuts off abstract sockets (they
belong to a network namespace) but not pathname ones. The view is an allow-list, so few sockets
remain visible at all; those that do (a socket a service keeps in a bound prefix, a workspace) get
/dev/null bound over them (``connect`` then fails with ECONNREFUSED), except the sandbox's own
bridges in its runtime folder.

What it sees: the pathname sockets of the harness's network namespace (``/proc/net/unix``) at the
moment a sandbox starts, with their paths as bound. What it cannot see: a socket bound later under a
bound path, and one bound by a relative path whose process has since changed its working directory.
The view binds no place where services keep sockets (``/run``, ``/var/run``, ``/tmp``, homes), which
is what keeps that gap small.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def bound(text: str | None = None) -> list[Path]:
    """The absolute paths of pathname sockets in ``/proc/net/unix``'s ``text`` (read when None).

    Listening stream sockets and datagram ones alike (``sendto`` a syslog-style socket needs
    no listener).

    A relative path (bound with a relative name) is resolved against the working directory of the
    process that holds the socket, when one can be found.
    """
    if text is None:
        try:
            text = Path("/proc/net/unix").read_text()
        except OSError:
            return []
    out, relative = [], {}
    for line in text.splitlines()[1:]:
        fields = line.split(None, 7)
        if len(fields) < 8 or fields[7].startswith("@"):  # no path, or abstract: nothing on disk
            continue
        path = fields[7].strip()
        if path.startswith("/"):
            out.append(Path(path))
        else:
            relative[fields[6]] = path
    if relative:
        out += _resolve_relative(relative)
    return list(dict.fromkeys(out))


def _resolve_relative(by_inode: dict[str, str]) -> list[Path]:
    """Relative socket names, against the cwd of a process holding ``socket:[inode]``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            links = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in fds}
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        for inode, name in list(by_inode.items()):
            if f"socket:[{inode}]" in links:
                found.append(Path(cwd) / name)
                del by_inode[inode]
        if not by_inode:
            break
    return found


def is_socket(path: Path) -> bool:
    """Whether ``path`` itself (not a link's target) is a unix socket."""
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False
