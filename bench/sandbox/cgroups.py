"""Where this harness may make a run's cgroups, and the cleanup of the groups it made.

:func:`cgroup_support` reads ``/proc/self/cgroup`` and ``/proc/self/mountinfo`` for the
hierarchies this process may write (cgroup v2 with the ``memory`` and ``pids`` controllers
delegated, else the v1 hierarchies); the rest reads a group's counters and removes groups.
:class:`bench.sandbox.resource_limits.RunGroup` uses them.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path


def _own_groups(proc_cgroup: str = "/proc/self/cgroup") -> dict[str, str]:
    """The run's own cgroups, from ``/proc/self/cgroup``.

    ``{"": "/path"}`` for v2 and ``{"memory": "/path", "pids": "/path"}`` for v1.
    """
    out = {}
    for line in Path(proc_cgroup).read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            out[c] = path
    return out


def _mounts(mountinfo: str = "/proc/self/mountinfo") -> dict[str, Path]:
    """Where each hierarchy is mounted: ``""`` (v2) and the v1 controllers' names."""
    out: dict[str, Path] = {}
    for line in Path(mountinfo).read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        if rest[0] == "cgroup2":
            out.setdefault("", Path(fields[4]))
        elif rest[0] == "cgroup":
            for option in rest[2].split(","):
                if option in ("memory", "pids"):
                    out.setdefault(option, Path(fields[4]))
    return out


@dataclass(frozen=True)
class CgroupSupport:
    """Where this harness may make the run's groups.

    ``version`` 2 (one parent) or 1 (memory and pids parents).
    """

    version: int
    parents: dict[str, Path]  # "" for v2; "memory" and "pids" for v1


def _writable_dir(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


def cgroup_support(
    proc_cgroup: str = "/proc/self/cgroup", mountinfo: str = "/proc/self/mountinfo"
) -> CgroupSupport | None:
    """The cgroups this process can make with memory and pids limits.

    None when it can make none (then rlimits).

    v2 needs both controllers in the own group's ``cgroup.subtree_control`` (delegated, e.g. by
    ``systemd-run --user --scope -p Delegate=yes``) and the group writable; v1 needs the two
    hierarchies writable.
    """
    try:
        own, mounts = _own_groups(proc_cgroup), _mounts(mountinfo)
    except (OSError, ValueError):
        return None
    if "" in own and "" in mounts:
        parent = mounts[""] / own[""].lstrip("/")
        try:
            enabled = (parent / "cgroup.subtree_control").read_text().split()
        except OSError:
            enabled = []
        if {"memory", "pids"} <= set(enabled) and _writable_dir(parent):
            return CgroupSupport(2, {"": parent})
    if {"memory", "pids"} <= set(own) and {"memory", "pids"} <= set(mounts):
        parents = {c: mounts[c] / own[c].lstrip("/") for c in ("memory", "pids")}
        if all(_writable_dir(p) for p in parents.values()):
            return CgroupSupport(1, parents)
    return None


STALE_S = 3600.0  # an empty run group this old was left by a harness or scorer that was killed: removed


def sweep(parent: Path) -> None:
    """Remove the empty ``bench-*`` groups under ``parent`` older than :data:`STALE_S`.

    A SIGKILLed scorer cannot remove its predictor's group; an empty group holds nothing but a
    directory.
    """
    now = time.time()
    for path in parent.glob("bench-*"):
        try:
            if now - path.stat().st_mtime > STALE_S and not (path / "cgroup.procs").read_text().strip():
                path.rmdir()
        except OSError:
            continue


def remove_groups(paths: dict[str, Path]) -> None:
    """Kill what is left in each group and remove it; a folder that is not a cgroup is left."""
    for path in paths.values():
        if not path.exists():
            continue
        kill = path / "cgroup.kill"
        try:
            if kill.exists():
                kill.write_text("1")
            else:
                for pid in (path / "cgroup.procs").read_text().split():
                    try:
                        os.kill(int(pid), 9)
                    except OSError:
                        pass
        except OSError:
            pass
        for _ in range(50):  # the killed processes leave the group within moments
            try:
                path.rmdir()
                break
            except OSError:
                if not (path / "cgroup.procs").exists():
                    break  # not a cgroup (a test's folder): nothing will leave it
                time.sleep(0.1)


def keyed(path: Path) -> dict[str, int]:
    """A cgroup file of ``key value`` lines as a table ({} when it cannot be read)."""
    try:
        return {k: int(v) for k, v in (line.split() for line in path.read_text().splitlines() if line.strip())}
    except (OSError, ValueError):
        return {}


def read_int(path: Path) -> int:
    """A cgroup file holding one number (0 when it cannot be read)."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return 0
