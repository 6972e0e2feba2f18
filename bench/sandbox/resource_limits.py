"""The resource limits of one run.

The agent's memory and process count, its workspace's size, its output, and the time the evaluation
of all its candidates may take.

Why: without them an agent (or a model it trained) can take the machine from its harness: a 600 MB
line of output held in the harness's memory, a memory hog or fork bomb that the kernel's OOM killer
or the pid table settles by killing whatever it picks, a workspace that fills the disk the run
directories share, a predictor that sleeps in its forward and holds the GPU for hours past the run's
budget. Each limit here has a default that fits the paper's machine (Appendix B: one A100 80 GB of a
DGX A100 node with 64 GB of system RAM and 16 cores allocated to the run), a ``bench run`` flag
(:mod:`bench.cli`), a check before anything is created (:mod:`bench.preflight`), and a line in
``result.json`` when it was hit.

How memory and processes are held, best first:

- **a cgroup** the harness makes for the run (v2 when its own group has the ``memory`` and ``pids``
  controllers delegated to it; else the v1 ``memory`` and ``pids`` hierarchies when they are
  writable, as for root in many containers): ``memory.max`` (v1 ``memory.limit_in_bytes``) covers
  the whole tree, page cache included, and the kernel kills inside the group only; ``pids.max``
  counts every process and thread of the tree. The sandbox's first shell joins it before bwrap
  starts (:func:`shell_prelude`), so nothing escapes by forking early; the counters
  (``memory.events``, ``pids.events``) say afterwards whether a limit was hit.
- **rlimits** where no cgroup can be made: ``RLIMIT_DATA`` (the private writable memory of each
  process: heap and anonymous mappings) rather than ``RLIMIT_AS``, because CUDA and PyTorch reserve
  huge address ranges they never touch and fail under an address-space limit, while those
  reservations are not writable private data; ``RLIMIT_NPROC`` for processes. Both are weaker: per
  process (a tree of N processes may hold N times the memory) and, for ``RLIMIT_NPROC``, per real
  user and never enforced for root (the kernel exempts uid 0 even inside a user namespace mapped to
  it): a root harness without a cgroup has no process limit, and ``result.json`` says so. They are
  set by the sandbox's launcher just before it starts the agent (:mod:`bench.sandbox.launcher`).
"""

from __future__ import annotations

import errno
import os
import resource
import shlex
import uuid
import weakref
from dataclasses import replace
from pathlib import Path

from bench.sandbox.cgroups import CgroupSupport, cgroup_support, keyed, read_int, remove_groups, sweep
from bench.sandbox.limits import (  # the value of a run's limits, its defaults and sizes: bench/sandbox/limits.py
    DEFAULT_EVAL_S,
    DEFAULT_LOG,
    DEFAULT_MEMORY,
    DEFAULT_PROCESSES,
    DEFAULT_WORKSPACE,
    FLAGS,
    GIB,
    KIB,
    LEAST,
    LINE_BYTES,
    MEMORY_SHARE,
    MIB,
    MIN_EVAL_S,
    LimitError,
    Limits,
    default_memory,
    machine_memory,
    parse_size,
)

__all__ = [  # the value lives in bench/sandbox/limits.py, the cgroups' discovery in cgroups.py: found here too
    "CgroupSupport",
    "DEFAULT_EVAL_S",
    "DEFAULT_LOG",
    "DEFAULT_MEMORY",
    "DEFAULT_PROCESSES",
    "DEFAULT_WORKSPACE",
    "FLAGS",
    "GIB",
    "KIB",
    "LEAST",
    "LINE_BYTES",
    "MEMORY_SHARE",
    "MIB",
    "MIN_EVAL_S",
    "LimitError",
    "Limits",
    "RunGroup",
    "cgroup_support",
    "default_memory",
    "machine_memory",
    "parse_size",
    "predictor_limits",
    "shell_prelude",
    "tree_bytes",
]

WORKSPACE_MARGIN = 0.10  # passing the limit is noted; passing it by this share more ends the run
WORKSPACE_CHECK_S = 5.0  # how often the watch measures the workspace (longer when a measure itself is slow)


# --- the run's cgroups: made, joined, read, removed (bench/sandbox/cgroups.py finds where) ------


class RunGroup:
    """The cgroup(s) of one run: made with the limits set, joined, read, removed at the end.

    Joined by the sandbox's first shell, read for what was hit. Every failure to make one leaves
    ``paths`` empty: the run falls back to rlimits.
    """

    def __init__(
        self,
        limits: Limits,
        name: str | None = None,
        support: CgroupSupport | None | str = "detect",
        *,
        data_rlimit: bool = True,
    ) -> None:
        self.limits = limits
        self.data_rlimit = data_rlimit  # False: no RLIMIT_DATA fallback (a CUDA process, untested under it)
        self.support = cgroup_support() if support == "detect" else support  # None: no cgroup, rlimits
        self.paths: dict[str, Path] = {}
        self.error: str | None = None
        if self.support is None or (limits.memory_bytes is None and limits.processes is None):
            return
        name = name or f"bench-{uuid.uuid4().hex[:12]}"
        for parent in self.support.parents.values():
            sweep(parent)
        try:
            for controller, parent in self.support.parents.items():
                path = parent / name
                path.mkdir()
                self.paths[controller] = path
            self._set()
        except OSError as e:
            self.error = f"no cgroup ({e}); rlimits instead"
            self.remove()
        # a harness that fails between the launch and the watch's remove() still removes its groups
        # on exit
        self._finalizer = weakref.finalize(self, remove_groups, dict(self.paths))

    def _set(self) -> None:
        mem, procs = self.limits.memory_bytes, self.limits.processes
        if self.support.version == 2:
            path = self.paths[""]
            (path / "memory.max").write_text(str(mem) if mem else "max")
            (path / "memory.swap.max").exists() and (path / "memory.swap.max").write_text("0")
            (path / "pids.max").write_text(str(procs) if procs else "max")
        else:
            if mem:
                (self.paths["memory"] / "memory.limit_in_bytes").write_text(str(mem))
                swap = self.paths["memory"] / "memory.memsw.limit_in_bytes"
                if swap.exists():
                    try:
                        swap.write_text(str(mem))  # no swap beyond the limit either (when swap accounting is on)
                    except OSError:
                        pass
            (self.paths["pids"] / "pids.max").write_text(str(procs) if procs else "max")

    @property
    def active(self) -> bool:
        """Whether the run has a cgroup (else rlimits hold it)."""
        return bool(self.paths)

    @property
    def enforcement(self) -> str:
        """How memory and processes are held: ``cgroup v2``, ``cgroup v1`` or ``rlimit``."""
        return f"cgroup v{self.support.version}" if self.active else "rlimit"

    def procs_files(self) -> list[Path]:
        """The groups' ``cgroup.procs`` files, which a process joins by writing its pid."""
        return [p / "cgroup.procs" for p in self.paths.values()]

    def prelude(self, before: str = "") -> list[str]:
        """The sandbox's first command.

        SIGTERM ignored, the run's cgroups joined (:func:`shell_prelude`).
        """
        return shell_prelude(self.procs_files(), before)

    def shown(self) -> tuple[tuple[Path, Path], ...]:
        """(group folder, where a sandbox sees it).

        V2 at /sys/fs/cgroup, v1 at /sys/fs/cgroup/<controller>, as a container runtime shows a
        container's own group; nothing without a group.
        """
        if not self.active:
            return ()
        root = Path("/sys/fs/cgroup")
        return tuple((path, root / controller if controller else root) for controller, path in self.paths.items())

    def launcher_args(self) -> list[str]:
        """The launcher's rlimits, only without a cgroup.

        With one they would pre-empt its accounting.
        """
        if self.active:
            return []
        return rlimit_args(self.limits if self.data_rlimit else replace(self.limits, memory_bytes=None))

    def preexec(self) -> None:
        """For a process started without the sandbox (``--unsandboxed``).

        Join the cgroups, or set the rlimits.
        """
        if self.active:
            for f in self.procs_files():
                f.write_text("0")
        else:
            set_rlimits(self.limits.memory_bytes, self.limits.processes)

    def describe(self) -> dict:
        """``result.json``'s account of how memory and processes were held."""
        how = self.enforcement
        out = {"enforcement": how}
        if not self.active and self.limits.processes and not nproc_binds():
            out["note"] = "RLIMIT_NPROC does not bind root: no process limit without a cgroup"
        if self.error:
            out["cgroup_error"] = self.error
        return out

    def hits(self) -> list[dict]:
        """What the kernel refused or killed in the group.

        Memory (OOM kills, allocations over the limit) and pids (forks refused at ``pids.max``).
        """
        out = []
        if not self.active:
            return out
        if self.support.version == 2:
            mem = keyed(self.paths[""] / "memory.events")
            pids = keyed(self.paths[""] / "pids.events")
            oom, over = mem.get("oom_kill", 0), mem.get("max", 0)
            refused = pids.get("max", 0)
        else:
            oom = keyed(self.paths["memory"] / "memory.oom_control").get("oom_kill", 0)
            over = read_int(self.paths["memory"] / "memory.failcnt")
            refused = keyed(self.paths["pids"] / "pids.events").get("max", 0)
        if oom or over:
            out.append({"limit": "memory", "value": self.limits.memory_bytes, "oom_kills": oom, "refused": over})
        if refused:
            out.append({"limit": "processes", "value": self.limits.processes, "forks_refused": refused})
        return out

    def drop_page_cache(self) -> str | None:
        """Evict the page cache charged to this group.

        The pages of shared files (``/usr``, the venv, the staged folder) that its processes were
        the first to load (issue 38). A file page is charged to the group of the process that
        brought it into the cache, so a predictor that passes bits by loading cold pages of a shared
        file for a later reader to time has loaded exactly pages charged here; dropping them before
        the next predictor starts leaves that reader nothing to see (pages others had cached are not
        touched: they carried nothing). cgroup v2: ``memory.reclaim`` (Linux 5.19) until no file
        page is left; v1: ``memory.force_empty``. Returns None when done, else why not (no group, an
        older kernel), for the record.
        """
        if not self.active:
            return "no cgroup: the pages the predictors loaded stay cached (rlimits hold them instead)"
        try:
            if self.support.version == 2:
                path = self.paths[""]
                for _ in range(8):
                    left = keyed(path / "memory.stat").get("file", 0)
                    if left <= 0:
                        return None
                    try:
                        (path / "memory.reclaim").write_text(str(left))
                    except OSError as e:
                        if e.errno != errno.EAGAIN:  # EAGAIN: less than asked was reclaimed; ask again
                            raise
                left = keyed(path / "memory.stat").get("file", 0)
                return None if left <= 0 else f"{left} bytes of page cache left in the predictors' group"
            (self.paths["memory"] / "memory.force_empty").write_text("0")
        except OSError as e:
            return f"the predictors' page cache could not be dropped: {e}"
        return None

    def remove(self) -> None:
        """Kill what is left in the group and remove it (idempotent).

        The watch ended the tree already.
        """
        remove_groups(self.paths)
        self.paths = {}


def shell_prelude(procs_files: list[Path], before: str = "") -> list[str]:
    """``sh -c`` that ignores SIGTERM, joins the run's cgroups, then execs the rest of its args.

    bwrap must outlive the watchdog's SIGTERM (:mod:`bench.sandbox`); before the exec it runs
    ``before`` (the seccomp filter's descriptor: :func:`bench.sandbox.seccomp.shell_open`); it
    refuses to start (exit 125) when it cannot join.
    """
    join = "".join(f"echo $$ > {shlex.quote(str(f))} || exit 125; " for f in procs_files)
    return ["/bin/sh", "-c", f'trap "" TERM; {join}{before}exec "$@"', "bench-sandbox"]


def predictor_limits(device: str, limits: Limits | None = None) -> RunGroup:
    """The predictors' memory and processes (their sandbox, :mod:`bench.scoring.scorer`).

    The run's ``limits`` (the defaults when None) in a cgroup of their own; without one, RLIMIT_DATA
    on a CPU only (on a GPU, the session's wall-clock deadline and the run's evaluation budget bound
    it: an rlimit under CUDA is not tested here) and RLIMIT_NPROC. On a CPU the group gets twice the
    run's memory (at most :func:`default_memory`): the prober, held beside the scored predictor with
    Python and torch imported (it builds its model only after the scored one has ended:
    :mod:`bench.scoring.scorer`), and the page cache both read count there too, so that a model that
    fit the agent's limit fits there as well and an out-of-memory kill is never an honest model's
    doing.
    """
    run = limits or Limits()
    memory = run.memory_bytes
    if memory is not None and device != "cuda":
        memory = max(memory, min(2 * memory, default_memory()))
    return RunGroup(Limits(memory_bytes=memory, processes=run.processes), data_rlimit=device != "cuda")


# --- rlimits ------------------------------------------------------------------------------------
def rlimit_args(limits: Limits | None) -> list[str]:
    """The launcher's ``--rlimit NAME=VALUE`` options for ``limits``.

    Memory as RLIMIT_DATA, processes as NPROC.
    """
    if limits is None:
        return []
    out = []
    if limits.memory_bytes:
        out += ["--rlimit", f"DATA={limits.memory_bytes}"]
    if limits.processes:
        out += ["--rlimit", f"NPROC={limits.processes}"]
    return out


def set_rlimits(memory_bytes: int | None, processes: int | None, cpu_s: int | None = None) -> None:
    """Lower this process's rlimits (a preexec function's body).

    Never raises them above the hard limits.
    """
    for res, value in ((resource.RLIMIT_DATA, memory_bytes), (resource.RLIMIT_NPROC, processes)):
        if value:
            _, hard = resource.getrlimit(res)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(res, (value, value))
    if cpu_s:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))


def nproc_binds() -> bool:
    """Whether RLIMIT_NPROC limits this process's children.

    Never for root (the kernel exempts uid 0).
    """
    return os.getuid() != 0


def tree_bytes(root: Path, stop_at: int | None = None) -> int:
    """The disk a run uses: the bytes under ``root``.

    Measured by the watch against ``--workspace-limit``
    (:class:`bench.pipeline.watch.WorkspaceGuard`): each regular file's size once (hard links
    counted once), not following links; stops counting once past ``stop_at`` (a workspace of a
    million files must not stall the watch).

    Why a walk of the tree and not the file system's counters: the workspace shares its file system
    with every other run, so only the files under it say what this run holds; a link to the data
    cache is not the run's disk.
    """
    total, seen, stack = 0, set(), [str(root)]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        if (st.st_dev, st.st_ino) not in seen:
                            seen.add((st.st_dev, st.st_ino))
                            total += max(st.st_size, st.st_blocks * 512)
                except OSError:
                    continue
        if stop_at is not None and total > stop_at:
            break
    return total
