"""What a sandbox's processes may see and touch, and the bwrap arguments for that view.

The arguments build exactly that view.

The view is an allow-list (:mod:`.view` lists its entries and why each is there): the sandbox's root
is an empty read-only tmpfs, and only the system's programs and libraries, ``/etc`` without its
secrets, Python, the files of this package a sandbox runs, the CLIs, the GPU's needs and the run's
own folders are bound into it. A path nobody bound does not exist inside: a dataset copy in
``/data`` or another user's home cannot be found by any ``find /``. Read-write are only the
workspace (or nothing, for the predictor), the private home and what an adapter declares. Harness
places (:func:`.view.harness_places`) that lie under a bound path are covered by an empty read-only
tmpfs; unix sockets of the host that the view would show are masked (:mod:`.sockets`). Every path
keeps its own name inside, so spool paths, checkpoint paths and the cwd-based process monitoring
mean the same on both sides. Mounts are made parents first: the most specific path wins.

Why the capability drop and the read-only ``/proc/sys``: run by root, bwrap keeps every capability
unless told otherwise, and uid 0 without capabilities may still write most of ``/proc/sys`` (a
kernel setting such as ``kernel.core_pattern`` is a way out of any sandbox); bwrap's own cover of
``/proc/sys`` is skipped when the directory itself is not writable, which is the usual case.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from bench.sandbox import sockets
from bench.sandbox.view import (
    DEV,
    DEVFS,
    EMPTY,
    LINK,
    MASK,
    PROCFS,
    RO,
    RO_TRY,
    RW,
    SCRATCH,
    Bind,
    gpu_binds,
    harness_places,
    readable_binds,
    system_binds,
)

TEMP_DIRS = (Path("/tmp"), Path("/var/tmp"))
# proc entries that write to the kernel of the whole machine, not the sandbox's namespaces
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
_RANK = {EMPTY: 0, SCRATCH: 1, RO: 2, RW: 3}  # same path: the higher wins

Grant = Path | Bind  # a path (its reason given by the field it is in) or a Bind with its own reason


@dataclass(frozen=True)
class Policy:
    """One sandbox's view of the file system and the network.

    ``scratch`` paths are private, empty, writable tmpfs mounts lost at the end (the sandbox's
    /tmp); a ``hidden`` path is an empty read-only tmpfs where it lies under a bound path (so that a
    write into a harness place fails loudly instead of vanishing) and absent everywhere else. A path
    both hidden and scratch is scratch. ``system``: the system part of the allow-list (``/usr``,
    ``/etc``, ...; off only in tests that check the order of the mounts); ``gpu``: the GPU's part.
    """

    cwd: Path
    writable: tuple[Grant, ...]  # bound read-write at the same path (a workspace, a private HOME)
    readable: tuple[Grant, ...] = ()  # bound read-only at the same path
    hidden: tuple[Path, ...] = ()  # harness places: an empty read-only tmpfs wherever a bound path shows them
    endpoints: tuple[str, ...] = ()  # URLs reachable from inside; () = no network at all
    network_log: Path | None = None  # where the proxy records each request (the audit's rule 3 evidence); the
    # proxy then runs even without endpoints, refusing everything, so that attempts are seen, not
    # only blocked
    gpu: bool = True  # the NVIDIA device nodes, driver libraries and toolkits when present (view.gpu_binds)
    scratch: tuple[Path, ...] = TEMP_DIRS
    system: bool = True
    # (a file of the harness, where it appears inside) bound read-only after every other mount: a
    # CLI's login given to its run's sandbox at the place in the private home where the CLI reads it
    # (its mount point is made, and removed again, by bench.sandbox.Sandbox, so no copy and no stub
    # stays in the run's folder)
    files: tuple[tuple[Path, Path], ...] = ()
    # the seccomp profile (bench.sandbox.seccomp: "agent" or "predictor"; None: no filter, tests of
    # the view only): the calls through which two sandboxes could talk on a shared inode or read
    # another process
    seccomp: str | None = "agent"
    # whether the run's own cgroup is shown at /sys/fs/cgroup (read-only, in a cgroup namespace
    # rooted at it); the host's tree never is. Off for predictors: a group's peak-memory counters
    # outlive its processes (a channel)
    own_cgroup: bool = True


def default_hidden() -> tuple[Path, ...]:
    """The harness's places (:func:`.view.harness_places`)."""
    return harness_places()


def default_readable(purpose: str = "agent", pythonpath: str = "") -> tuple[Bind, ...]:
    """What a sandbox of ``purpose`` reads beyond the system (:mod:`.view`).

    ``purpose``: ``agent`` or ``predictor``.
    """
    return tuple(readable_binds(purpose, sys.executable, pythonpath))


def _resolve(path: Path | str) -> Path:
    return Path(os.path.realpath(path))


def _unique(paths: Iterable[Path | str]) -> tuple[Path, ...]:
    return tuple(dict.fromkeys(_resolve(p) for p in paths))


def _under(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def _grants(items: Iterable[Grant], mode: str, why: str) -> list[Bind]:
    out = []
    for item in items:
        if isinstance(item, Bind):
            out.append(Bind(_resolve(item.path), mode, item.why))
        else:
            out.append(Bind(_resolve(item), mode, why))
    return out


def _order(bind: Bind) -> tuple:
    return (len(bind.path.parts), _RANK.get(bind.mode, 4), str(bind.path))


def mounts(binds: Iterable[Bind], keep_missing: bool = False) -> list[Bind]:
    """The ro/rw/empty/scratch binds the view needs, parents first.

    For each path the strongest mode, then without missing paths (unless ``keep_missing``: a view
    printed for a run not made yet) and without a mount that would show what its nearest mounted
    ancestor shows already (a hidden place under nothing bound is simply absent; scratch and bound
    paths under nothing bound are mounted). A hidden place under a private scratch tmpfs (a clone or
    cache in ``/tmp``) stays an empty read-only folder: it shows nothing of the host either, but a
    write there fails loudly instead of vanishing with the sandbox's ``/tmp``.
    """
    best: dict[Path, Bind] = {}
    for bind in binds:
        if not (keep_missing or bind.path.exists()) or (bind.path == Path("/") and bind.mode != RW):
            continue  # never hide nor re-bind the root (HOME=/): it is the sandbox's own, read-only
        old = best.get(bind.path)
        if old is None or _RANK[bind.mode] > _RANK[old.mode]:
            best[bind.path] = bind
    kept: list[Bind] = []
    for bind in sorted(best.values(), key=_order):
        parent = next((k.mode for k in reversed(kept) if _under(bind.path, k.path)), None)
        if parent is None and bind.mode == EMPTY:
            continue  # absent anyway
        if bind.mode != parent:
            kept.append(bind)
    return kept


def plan(
    policy: Policy,
    runtime_dir: Path | None = None,
    socket_paths: Iterable[Path] | None = None,
    keep_missing: bool = False,
) -> list[Bind]:
    """Every entry of ``policy``'s view in the order bwrap makes them.

    ``runtime_dir``: the network bridges' sockets, read-only; ``socket_paths``: the host's bound
    unix sockets (:func:`.sockets.bound` when None).
    """
    out = [Bind(Path("/dev"), DEVFS, "minimal /dev: null, zero, full, random, urandom, tty, pts, shm")]
    out.append(Bind(Path("/proc"), PROCFS, "the sandbox's own processes only (its PID namespace)"))
    out += [Bind(Path(p), RO_TRY, "kernel settings of the whole machine: read-only") for p in PROC_READ_ONLY]
    binds = system_binds() if policy.system else []
    masks = [b for b in binds if b.mode == MASK]
    links = [b for b in binds if b.mode == LINK]
    extra = gpu_binds() if policy.gpu else []
    devs = [b for b in extra if b.mode == DEV]
    binds = [b for b in binds + extra if b.mode in _RANK]
    binds += _grants(policy.readable, RO, "declared readable")
    binds += _grants(policy.hidden, EMPTY, "a harness place")
    binds += _grants(policy.scratch, SCRATCH, "private scratch space, empty at the start, lost at the end")
    binds += _grants(policy.writable, RW, "declared writable (the workspace, the private home)")
    if runtime_dir is not None:
        binds.append(Bind(_resolve(runtime_dir), RO, "the network bridges' sockets (the only way out)"))
    kept = mounts(binds, keep_missing)
    out += sorted(links + kept + devs + masks + _socket_masks(kept, runtime_dir, socket_paths), key=_order)
    return out


def _socket_masks(kept: list[Bind], runtime_dir: Path | None, socket_paths: Iterable[Path] | None) -> list[Bind]:
    """A mask over each host socket the mounts would show, but the sandbox's own bridges."""
    out = []
    for path in sockets.bound() if socket_paths is None else socket_paths:
        path = _resolve(path)
        if runtime_dir is not None and _under(path, _resolve(runtime_dir)):
            continue
        shown = next((k.mode for k in reversed(kept) if _under(path, k.path)), None)
        if shown in (RO, RW) and sockets.is_socket(path):
            out.append(Bind(path, MASK, "a host's unix socket (connect needs no write access)"))
    return out


def _low_port_args(endpoints: tuple[str, ...]) -> list[str]:
    """The one capability kept when a loopback endpoint has a port below 1024.

    The launcher must listen on the same port inside (the sandbox's own network namespace only). A
    non-root user keeps it only as uid 0 of a user namespace of its own.
    """
    from bench.sandbox.network import parse_endpoint

    if not any(e.loopback and e.port < 1024 for e in map(parse_endpoint, endpoints)):
        return []
    as_root = [] if os.geteuid() == 0 else ["--unshare-user", "--uid", "0", "--gid", "0"]
    return [*as_root, "--cap-add", "CAP_NET_BIND_SERVICE"]


def render(binds: Iterable[Bind], files: Iterable[tuple[Path, Path]] = ()) -> list[str]:
    """The mount options of bwrap for ``binds``, ``files`` and the read-only remounts.

    In order: ``binds``, then ``files`` (source, destination: read-only binds over what the binds
    show), then the read-only remounts of the empty tmpfs mounts and of the root (bwrap makes the
    bind points inside a tmpfs first, so these come after every bind).
    """
    args: list[str] = []
    read_only = []
    for b in binds:
        p = str(b.path)
        if b.mode == DEVFS:
            args += ["--dev", p]
        elif b.mode == PROCFS:
            args += ["--proc", p]
        elif b.mode in (RO, RW, DEV, RO_TRY):
            args += [{RO: "--ro-bind", RW: "--bind", DEV: "--dev-bind", RO_TRY: "--ro-bind-try"}[b.mode], p, p]
        elif b.mode == LINK:
            args += ["--symlink", b.target, p]
        elif b.mode == MASK:
            args += ["--ro-bind", os.devnull, p]
        else:  # empty, scratch
            args += ["--tmpfs", p]
            if b.mode == EMPTY:
                read_only.append(p)
    for source, dest in files:
        args += ["--ro-bind", str(_resolve(source)), str(dest)]
    for p in read_only:
        args += ["--remount-ro", p]
    return [*args, "--remount-ro", "/"]


def bwrap_args(policy: Policy, runtime_dir: Path | None = None) -> list[str]:
    """The options of bwrap (no binary, no command) for ``policy``.

    ``runtime_dir`` (the network bridges' sockets) is bound read-only at its own path. Every path is
    resolved, so symlinks cannot aim a bind elsewhere.
    """
    args = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--die-with-parent"]
    args += ["--cap-drop", "ALL", *_low_port_args(policy.endpoints)]
    args += render(plan(policy, runtime_dir), policy.files)
    return [*args, "--chdir", str(_resolve(policy.cwd))]
