"""What an agent's processes may see and touch, and the bwrap arguments that build exactly that view.

The view starts from the whole machine bound read-only (so the repo, the task originals, the venv and the
system's tools are there and cannot change), then empties the harness's own places with private tmpfs
mounts (the data cache, other runs, the tracking store, the user's home, /tmp), then binds back the few
paths a process needs: read-only what Python imports even when it lives under a hidden place (a pyenv
under ``~``, the pinned agent CLIs under the cache), read-write the run's workspace and private home.
Every path keeps its own name inside, so spool paths, checkpoint paths and the cwd-based process
monitoring mean the same on both sides. Mounts are made parents first: the most specific path wins.

Why the capability drop and the read-only ``/proc/sys``: run by root, bwrap keeps every capability
unless told otherwise, and uid 0 without capabilities may still write most of ``/proc/sys`` (a kernel
setting such as ``kernel.core_pattern`` is a way out of any sandbox); bwrap's own cover of ``/proc/sys``
is skipped when the directory itself is not writable, which is the usual case.
"""

from __future__ import annotations

import glob
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

TEMP_DIRS = (Path("/tmp"), Path("/var/tmp"))
# proc entries that write to the kernel of the whole machine, not the sandbox's namespaces
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
# NVIDIA device nodes CUDA opens; /proc/driver/nvidia and /sys come with --proc and the read-only root
GPU_NODES = ("/dev/nvidia*", "/dev/nvidia-uvm*", "/dev/nvidia-caps")

_HIDDEN, _SCRATCH, _READABLE, _WRITABLE = range(4)  # same path: the later kind wins


@dataclass(frozen=True)
class Policy:
    """One sandbox's view of the file system and the network.

    ``scratch`` paths are hidden like ``hidden`` ones but stay writable (a private, empty, lost-at-the-end
    tmpfs: the agent's /tmp); every other hidden path is an empty read-only directory, so that a write into
    the data cache fails loudly instead of vanishing. A path both hidden and scratch is scratch.
    """

    cwd: Path
    writable: tuple[Path, ...]  # bound read-write at the same path (a workspace, a private HOME)
    readable: tuple[Path, ...] = ()  # bound read-only at the same path even when under a hidden path
    hidden: tuple[Path, ...] = ()  # replaced by an empty private tmpfs (harness paths)
    endpoints: tuple[str, ...] = ()  # URLs reachable from inside; () = no network at all
    network_log: Path | None = None  # where the proxy records each request (the audit's rule 3 evidence); the
    # proxy then runs even without endpoints, refusing everything, so that attempts are seen, not only blocked
    gpu: bool = True  # --dev-bind /dev/nvidia*, /dev/nvidia-uvm*, /dev/nvidia-caps when present (untested here)
    scratch: tuple[Path, ...] = TEMP_DIRS


def default_hidden() -> tuple[Path, ...]:
    """The harness's places: the cache (prepared data, other runs), workspaces, the tracking store, the data
    mirror, the user's home (keys, logins), and the machine's temp and runtime folders. /dev/shm is the
    sandbox's own through ``--dev``."""
    from bench.paths import cache_dir, mlruns_dir, workspaces_dir

    paths = [cache_dir(), workspaces_dir(), mlruns_dir(), Path.home(), *TEMP_DIRS, Path("/run")]
    if os.environ.get("BENCH_DATA_MIRROR"):
        paths.append(Path(os.environ["BENCH_DATA_MIRROR"]))
    return _unique(paths)


def default_readable() -> tuple[Path, ...]:
    """What Python and the agent CLIs need even when it lives under a hidden path: the interpreter's
    prefixes, the import path, the repository (the tracer hook, an editable install) and the pinned CLIs."""
    from bench.agents.install import clis_dir
    from bench.paths import ROOT

    paths = [Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix), Path(sys.base_exec_prefix)]
    paths += [Path(p) for p in sys.path if p and os.path.exists(p)]
    paths += [Path(sys.executable).parent, ROOT, clis_dir()]
    return _unique(paths)


def _resolve(path: Path | str) -> Path:
    return Path(os.path.realpath(path))


def _unique(paths: Iterable[Path | str]) -> tuple[Path, ...]:
    return tuple(dict.fromkeys(_resolve(p) for p in paths))


def _under(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def mounts(policy: Policy) -> list[tuple[Path, int]]:
    """(path, kind) for each mount the view needs, parents first; missing paths and redundant binds dropped."""
    kinds: dict[Path, int] = {}
    scratch = set(_unique(policy.scratch))
    for kind, paths in (
        (_HIDDEN, policy.hidden),
        (_SCRATCH, policy.scratch),
        (_READABLE, policy.readable),
        (_WRITABLE, policy.writable),
    ):
        for path in _unique(paths):
            if path.exists() and (path != Path("/") or kind == _WRITABLE):  # never hide the root (HOME=/)
                kinds[path] = max(kinds.get(path, kind), _SCRATCH if kind == _HIDDEN and path in scratch else kind)
    kept: list[tuple[Path, int]] = []
    for path, kind in sorted(kinds.items(), key=lambda item: (len(item[0].parts), item[1], str(item[0]))):
        # what the path shows without a mount of its own: its nearest mounted ancestor's kind (the root is
        # bound read-only); a mount that would show the same is left out
        parent = next((k for p, k in reversed(kept) if _under(path, p)), _READABLE)
        if kind != parent:
            kept.append((path, kind))
    return kept


def _low_port_args(endpoints: tuple[str, ...]) -> list[str]:
    """The one capability kept when a loopback endpoint has a port below 1024: the launcher must listen on the
    same port inside (the sandbox's own network namespace only). A non-root user keeps it only as uid 0 of
    a user namespace of its own."""
    from bench.sandbox.network import parse_endpoint

    if not any(e.loopback and e.port < 1024 for e in map(parse_endpoint, endpoints)):
        return []
    as_root = [] if os.geteuid() == 0 else ["--unshare-user", "--uid", "0", "--gid", "0"]
    return [*as_root, "--cap-add", "CAP_NET_BIND_SERVICE"]


def bwrap_args(policy: Policy, runtime_dir: Path | None = None) -> list[str]:
    """bwrap's options (no binary, no command) for ``policy``; ``runtime_dir`` (the network bridges' sockets)
    is bound read-only at its own path. Every path is resolved, so symlinks cannot aim a bind elsewhere."""
    args = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for entry in PROC_READ_ONLY:
        args += ["--ro-bind-try", entry, entry]
    args += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--die-with-parent"]
    args += ["--cap-drop", "ALL", *_low_port_args(policy.endpoints)]
    if policy.gpu:
        for node in dict.fromkeys(n for pattern in GPU_NODES for n in sorted(glob.glob(pattern))):
            args += ["--dev-bind", node, node]
    read_only_tmpfs = []
    extra = [(_resolve(runtime_dir), _READABLE)] if runtime_dir is not None else []
    for path, kind in sorted(mounts(policy) + extra, key=lambda item: (len(item[0].parts), item[1], str(item[0]))):
        p = str(path)
        if kind in (_HIDDEN, _SCRATCH):
            args += ["--tmpfs", p]
            if kind == _HIDDEN:
                read_only_tmpfs.append(p)
        else:
            args += ["--ro-bind" if kind == _READABLE else "--bind", p, p]
    for p in read_only_tmpfs:  # after every bind: bwrap makes the bind points inside the tmpfs first
        args += ["--remount-ro", p]
    return [*args, "--chdir", str(_resolve(policy.cwd))]
