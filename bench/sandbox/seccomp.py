"""The sandboxes' seccomp filters.

The system calls through which two sandboxes could talk or one could read another.

Why: a sandbox's own namespaces do not cover kernel objects that live on an inode. Every sandbox
binds the same ``/usr``, ``/etc`` and venv files, and a POSIX record lock, an OFD lock or a
``flock`` on one of them is seen by any process that opens the same file, in any namespace
(``F_GETLK`` even says where the lock lies and how long it is: 64 bits per lock). Issue 29 measured
it: a scored predictor published each revealed T6 row as locks on its own script for its prober, and
one run's predictor published T6's test inputs on a venv file for an agent sandbox of another run
(3,120 of 3,216 rows in 18 s). So the filters deny, with ``EPERM``:

* **predictors** (:data:`PREDICTOR`): every lock (``flock``; ``fcntl`` with
  ``F_GETLK``/``F_SETLK``/``F_SETLKW``, their ``F_OFD_*`` and 32-bit ``*64`` forms), leases and
  directory notifications (``F_SETLEASE``/``F_GETLEASE``/ ``F_NOTIFY``), file-access watches
  (``inotify_*``, ``fanotify_*``: another process's opens of a shared file), page-cache residency
  (``mincore``, ``cachestat``: which shared file pages another process read) and moves
  (``fadvise64``, ``readahead``: drop or load a shared file's pages without reading them), the
  kernel's keyrings (``add_key``, ``request_key``, ``keyctl``: the user keyring belongs to the uid,
  and every sandbox runs as the same uid: a key one sandbox added, another read), hardware counters
  (``perf_event_open``), and reading or writing other processes (``ptrace``,
  ``process_vm_readv``/``writev``, ``kcmp``). A predictor needs none of them: it reads a checkpoint
  and answers on a pipe.
* **agents** (:data:`AGENT`): the same but the locks, the watches and the hardware counters, which
  the agents' tools use (SQLite, the optuna agent's storage, locks its database with
  ``F_SETLK``/``F_GETLK``; git and npm lock files; Node's ``fs.watch``). Locks stay harmless for
  the benchmark because no predictor can take or test one: an agent can only reach other agents,
  which know nothing the test split holds. Leases and ``F_NOTIFY`` are denied (a lease is broken,
  and its holder signalled, when another process opens the file). What remains is written down in
  docs/sandbox-and-rules.md (timing of shared caches; a predictor's opens seen by an agent's
  inotify watch).

Both also get, since issue 38 (the page cache is one per inode and outlives every process: a
predictor that loads cold pages of a shared file sends bits to whoever can tell which pages are
cached): ``EOPNOTSUPP`` for ``preadv2``/``pwritev2`` with ``RWF_NOWAIT`` (it fails with ``EAGAIN``
exactly when a page is not cached), ``EINVAL`` for ``madvise`` ``MADV_COLD``/``MADV_PAGEOUT`` (age
or evict a mapping's pages; what a kernel before 5.4 says), ``EPERM`` for ``process_madvise``, and
``ENOSYS`` for ``io_uring_*`` and Linux AIO's ``io_setup`` (their own read, fadvise and madvise
operations, outside these checks; runtimes such as libuv fall back to threads on ``ENOSYS``); agents
``EPERM`` for ``fadvise`` ``POSIX_FADV_DONTNEED`` (dropping a shared file's pages resets a
receiver's slots). A receiver that only times its reads needs no call at all: the scorer closes that
form by dropping the pages the predictors were the first to load
(:meth:`bench.sandbox.resource_limits.RunGroup. drop_page_cache`). The numbers here are checked
against libseccomp and the kernel's headers by tests/bench/sandbox/test_seccomp_numbers.py.

The filter is classic BPF, built here with :mod:`struct` (no libseccomp), and given to bwrap as
``--seccomp FD`` (:meth:`bench.sandbox.Sandbox.wrap` opens the file on that descriptor in the
sandbox's first shell). It checks the architecture first: x86_64 and aarch64 have their tables here;
any other architecture's call (an i386 program on x86_64, int 0x80) and the x32 ABI's calls are
denied whole: fail closed. On a machine of an architecture without a table, :func:`program` raises
and no sandbox starts (:data:`ARCHES`).
"""

from __future__ import annotations

import atexit
import errno
import os
import platform
import shutil
import struct
import tempfile
from pathlib import Path

from bench.sandbox.bwrap import UNSANDBOXED, SandboxUnavailable

# classic BPF
_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K, _ALU_AND_K = 0x20, 0x15, 0x35, 0x45, 0x06, 0x54
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little-endian: low
# half first)
_NR, _ARCH, _ARGS_LOW = 0, 4, 16
X32_BIT = 0x40000000

# fcntl commands that take, test, or watch through an inode another process shares
F_GETLK, F_SETLK, F_SETLKW = 5, 6, 7
F_GETLK64, F_SETLK64, F_SETLKW64 = 12, 13, 14  # the 32-bit ABIs' (harmless to deny on 64-bit: EINVAL there)
F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW = 36, 37, 38
F_SETLEASE, F_GETLEASE, F_NOTIFY = 1024, 1025, 1026
LOCK_COMMANDS = (F_GETLK, F_SETLK, F_SETLKW, F_GETLK64, F_SETLK64, F_SETLKW64, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW)
NOTIFY_COMMANDS = (F_SETLEASE, F_GETLEASE, F_NOTIFY)
# page-cache residency (issue 38): preadv2/pwritev2 with RWF_NOWAIT fail with EAGAIN exactly when a
# page is not cached; madvise's MADV_COLD and MADV_PAGEOUT deactivate or evict a file mapping's
# pages; fadvise's DONTNEED drops them
RWF_NOWAIT = 0x00000008
MADV_COLD, MADV_PAGEOUT = 20, 21
POSIX_FADV_DONTNEED = 4

# system call numbers: (AUDIT_ARCH, {name: number}); a name a table lacks does not exist on
# that architecture
ARCHES = {
    "x86_64": (
        0xC000003E,
        {
            "fcntl": 72, "flock": 73, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
            "mincore": 27, "cachestat": 451, "inotify_init": 253, "inotify_init1": 294, "inotify_add_watch": 254,
            "fanotify_init": 300, "fanotify_mark": 301, "add_key": 248, "request_key": 249, "keyctl": 250,
            "perf_event_open": 298, "fadvise64": 221, "readahead": 187,
            "preadv2": 327, "pwritev2": 328, "madvise": 28, "process_madvise": 440,
            "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "io_setup": 206,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "fcntl": 25, "flock": 32, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272,
            "mincore": 232, "cachestat": 451, "inotify_init1": 26, "inotify_add_watch": 27,
            "fanotify_init": 262, "fanotify_mark": 263, "add_key": 217, "request_key": 218, "keyctl": 219,
            "perf_event_open": 241, "fadvise64": 223, "readahead": 213,
            "preadv2": 286, "pwritev2": 287, "madvise": 233, "process_madvise": 440,
            "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "io_setup": 0,
        },
    ),
}  # fmt: skip

_PROCESSES = ("ptrace", "process_vm_readv", "process_vm_writev", "kcmp")
_CACHE = ("mincore", "cachestat", "process_madvise")  # residency read, or another's pages paged out
_CACHE_MOVES = ("fadvise64", "readahead")  # load or drop a shared file's pages without reading them (predictors)
_WATCHES = ("inotify_init", "inotify_init1", "inotify_add_watch", "fanotify_init", "fanotify_mark")
_KEYS = ("add_key", "request_key", "keyctl")  # the user keyring is per user, not per sandbox: uid 0 in every one
# asynchronous I/O outside the classic calls (io_uring's own read, fadvise and madvise operations;
# Linux AIO's RWF_NOWAIT): ENOSYS, as on a kernel without them, so that runtimes (libuv, liburing
# users) fall back to threads
_ASYNC_IO = ("io_uring_setup", "io_uring_enter", "io_uring_register", "io_setup")


class ArgCheck:
    """One call denied only for some values of one argument (its low 32 bits).

    ``values`` equal, or any bit of ``mask`` set; ``err``: the errno returned (what the kernel says
    for an unsupported value: callers fall back).
    """

    def __init__(self, call: str, arg: int, err: int, values: tuple[int, ...] = (), mask: int = 0) -> None:
        self.call, self.arg, self.err, self.values, self.mask = call, arg, err, values, mask


_NOWAIT = (  # preadv2(fd, iov, iovcnt, pos_l, pos_h, flags): EOPNOTSUPP is what a file without NOWAIT support says
    ArgCheck("preadv2", 5, errno.EOPNOTSUPP, mask=RWF_NOWAIT),
    ArgCheck("pwritev2", 5, errno.EOPNOTSUPP, mask=RWF_NOWAIT),
)
_EVICT = ArgCheck("madvise", 2, errno.EINVAL, values=(MADV_COLD, MADV_PAGEOUT))  # EINVAL: a kernel before 5.4


class Profile:
    """What one kind of sandbox may not do.

    Whole system calls (``EPERM``, or ``ENOSYS`` for those in ``absent``), and calls with some
    argument values (:class:`ArgCheck`: ``fcntl`` commands, ``RWF_NOWAIT``, ``madvise``).
    """

    def __init__(
        self,
        name: str,
        calls: tuple[str, ...],
        fcntl_commands: tuple[int, ...],
        *,
        absent: tuple[str, ...] = (),
        args: tuple[ArgCheck, ...] = (),
    ) -> None:
        self.name, self.calls, self.fcntl_commands, self.absent = name, calls, fcntl_commands, absent
        fcntl = (ArgCheck("fcntl", 1, errno.EPERM, values=fcntl_commands),) if fcntl_commands else ()
        self.args = (*args, *fcntl)
        if len({a.call for a in self.args}) != len(self.args):
            raise ValueError("one ArgCheck per call")


PREDICTOR = Profile(
    "predictor",
    ("flock", *_PROCESSES, *_CACHE, *_CACHE_MOVES, *_WATCHES, *_KEYS, "perf_event_open"),
    LOCK_COMMANDS + NOTIFY_COMMANDS,
    absent=_ASYNC_IO,
    args=(*_NOWAIT, _EVICT),
)
AGENT = Profile(
    "agent",
    (*_PROCESSES, *_CACHE, *_KEYS),
    NOTIFY_COMMANDS,
    absent=_ASYNC_IO,
    # an agent may advise on its own reads (cp, sort), not drop a shared file's pages: that resets a
    # receiver's slots
    args=(*_NOWAIT, _EVICT, ArgCheck("fadvise64", 3, errno.EPERM, values=(POSIX_FADV_DONTNEED,))),
)
PROFILES = {p.name: p for p in (PREDICTOR, AGENT)}


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def _arg_block(check: ArgCheck) -> list[bytes]:
    """Load the argument, deny on each value (or the mask), else allow.

    The call has no other rule.
    """
    deny = _RET_ERRNO | check.err
    out = [_op(_LD_W_ABS, _ARGS_LOW + 8 * check.arg)]
    if check.mask:
        out += [_op(_JSET_K, check.mask, 0, 1), _op(_RET_K, deny)]
    for v in check.values:
        out += [_op(_JEQ_K, v, 0, 1), _op(_RET_K, deny)]
    return [*out, _op(_RET_K, _RET_ALLOW)]


def program(profile: Profile, machine: str | None = None) -> bytes:
    """The filter for ``profile`` on ``machine`` (``platform.machine()`` when None).

    Returned as struct sock_filter[] bytes.

    Layout: load arch; not ours -> EPERM. Load nr; (x86_64) x32 bit set -> EPERM. Each denied call
    -> its errno; each call with an :class:`ArgCheck` -> load that argument (its low 32 bits),
    compare, deny or allow. Else allow.
    """
    machine = machine or platform.machine()
    if machine not in ARCHES:
        raise SandboxUnavailable(
            f"no seccomp table for {machine!r}: the sandboxes' channel filters cover {sorted(ARCHES)}. {UNSANDBOXED}"
        )
    arch, numbers = ARCHES[machine]
    deny = _RET_ERRNO | errno.EPERM
    out = [_op(_LD_W_ABS, _ARCH), _op(_JEQ_K, arch, 1, 0), _op(_RET_K, deny), _op(_LD_W_ABS, _NR)]
    if machine == "x86_64":
        out += [_op(_JSET_K, X32_BIT, 0, 1), _op(_RET_K, deny)]
    whole = [(c, errno.EPERM) for c in profile.calls] + [(c, errno.ENOSYS) for c in profile.absent]
    for name, err in whole:  # equal: the next instruction (deny); else skip it
        if name in numbers:
            out += [_op(_JEQ_K, numbers[name], 0, 1), _op(_RET_K, _RET_ERRNO | err)]
    for check in profile.args:
        if check.call not in numbers:
            continue
        block = _arg_block(check)
        out += [_op(_JEQ_K, numbers[check.call], 0, len(block)), *block]  # not this call: jump over its block
    out.append(_op(_RET_K, _RET_ALLOW))
    if len(out) > 4096:  # BPF_MAXINSNS
        raise RuntimeError("seccomp filter too long")
    return b"".join(out)


_files: dict[str, Path] = {}


def filter_file(name: str) -> Path:
    """A file holding profile ``name``'s compiled filter, written once per process.

    Read-only, in a private temp folder of the harness, which no sandbox sees: bwrap reads it from a
    descriptor the sandbox's first shell opens.
    """
    path = _files.get(name)
    if path is None or not path.is_file():
        folder = Path(tempfile.mkdtemp(prefix="bench-seccomp-"))
        atexit.register(_remove, folder, os.getpid())  # one folder per process, gone with it
        path = folder / f"{name}.bpf"
        path.write_bytes(program(PROFILES[name]))
        os.chmod(path, 0o444)
        _files[name] = path
    return path


def _remove(folder: Path, owner: int) -> None:
    """The filter's folder, removed when the process that wrote it exits.

    Not by a forked child inheriting the handler: its parent may still launch sandboxes from it.
    """
    if os.getpid() == owner:
        shutil.rmtree(folder, ignore_errors=True)


FD = 9  # the descriptor bwrap reads the filter from (opened by the sandbox's first shell, closed by bwrap)


def shell_open(name: str | None) -> str:
    """The first shell's command that opens profile ``name``'s filter on :data:`FD`.

    '' without a profile.
    """
    if name is None:
        return ""
    return f"exec {FD}< '{filter_file(name)}' || exit 125; "


def bwrap_args(name: str | None) -> list[str]:
    """The option of bwrap for profile ``name`` ([] without one)."""
    return [] if name is None else ["--seccomp", str(FD)]
