"""The one boundary through which the harness reads what an agent made.

The harness runs with the host user's rights; the workspace, its ``checkpoints/``, the spool and
tail files and every other agent-writable place are written by a process that may be hostile.
Reading them with plain ``open()`` / ``Path.read_bytes()`` / ``os.walk`` lets the agent choose what
the harness reads (a link to ``/proc/self/environ`` or ``/etc/shadow``), block it forever (a FIFO),
crash it (a directory where a file should be, a line of 100,000 ``[``) or exhaust its memory and the
store (a 1 GiB sparse file, 150,000 files). Every such read goes through this module, which
promises:

1. **No link is followed.** A path is opened one component at a time from ``base`` with
   ``O_NOFOLLOW`` (``openat`` through ``dir_fd``); a symbolic link anywhere on the way, or a ``..``
   component, is a ``link`` / ``outside`` finding. Links inside the tree are refused too: nothing
   the harness reads needs one.
2. **Regular files only, never blocking.** Files are opened ``O_NONBLOCK`` (a FIFO opens at once
   instead of waiting for a writer) and ``fstat``-ed: anything but a regular file (FIFO, socket,
   device, directory) is a ``not-regular`` finding, and nothing is read from it.
3. **Bytes bounded by what is really there.** A file is read up to ``limit`` bytes, where the bound
   applies to both its apparent size (``st_size``) and its allocated size (``st_blocks * 512``): a
   sparse file is a ``sparse`` finding (holes are not data an agent wrote) and only a bounded prefix
   / tail is ever read.
4. **Counts, depth and lines bounded.** A walk stops at ``max_entries`` (``too-many``), or at
   ``max_seen`` entries looked at or ``max_seconds`` (``too-slow``) when it keeps only what a search
   ``match``-es; JSON is scanned for its nesting depth before ``json.loads`` (``too-deep``) and
   refused past a length (``too-long``); a line longer than ``max_line`` is a ``too-long`` finding,
   not a crash or a megabyte string.
5. **Every failure is a named, counted finding.** Nothing raises for a per-item problem: the caller
   gets a :class:`Finding` (path, what, detail) instead of the value and counts it in a
   :class:`Tally`, which goes to ``result.json`` and the audit.

What this module does NOT promise: the content is still the agent's (a regular file may hold
anything); the caller decides what it means. It also cannot stop a file from changing between
two reads.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, NamedTuple

__all__ = [
    "Finding",
    "Limits",
    "Tally",
    "copy_into",
    "iter_lines",
    "json_depth_ok",
    "loads_json",
    "open_regular",
    "read_bytes",
    "read_text",
    "read_text_tail",
    "sha256_of",
    "is_regular",
    "CopyBudget",
    "walk",
]

#: The names of findings, so callers and tests spell them once.
LINK = "link"
OUTSIDE = "outside"
NOT_REGULAR = "not-regular"
TOO_BIG = "too-big"
SPARSE = "sparse"
TOO_MANY = "too-many"
TOO_DEEP = "too-deep"
TOO_SLOW = "too-slow"
CUT = (TOO_MANY, TOO_DEEP, TOO_SLOW)  # the findings that say a walk stopped before the end: what it left out is unseen
TOO_LONG = "too-long"
UNREADABLE = "unreadable"
MISSING = "missing"
DUPLICATE = "duplicate"
BAD_JSON = "bad-json"


class Finding(NamedTuple):
    """A refusal to read one agent-made item: where, which promise it hit, and a short detail."""

    path: str
    what: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.what}: {self.path}" + (f" ({self.detail})" if self.detail else "")


@dataclass(frozen=True)
class Limits:
    """Bounds on what one read may take.

    Defaults suit a script source or a checkpoint list, not a model.
    """

    max_bytes: int = 4 * 1024 * 1024
    max_entries: int = 20_000
    max_depth: int = 64
    max_line: int = 64 * 1024
    #: a search (``walk(..., match=)``) keeps only matching files, so ``max_entries`` bounds what it
    #: keeps; these bound what it looks at: entries (None: ``max_entries``) and seconds (None: no
    #: clock)
    max_seen: int | None = None
    max_seconds: float | None = None
    #: a file counts as sparse when its apparent size passes twice its allocated size plus this
    #: slack (tiny files may be inline, with st_blocks 0; a compressing filesystem may halve what a
    #: file allocates)
    sparse_slack: int = 64 * 1024


DEFAULT = Limits()


@dataclass
class Tally:
    """Findings counted by kind, with the first few kept as examples.

    What ``result.json`` records.
    """

    keep: int = 20
    counts: Counter[str] = field(default_factory=Counter)
    examples: list[Finding] = field(default_factory=list)

    def add(self, finding: Finding) -> Finding:
        """Count a finding (kept as an example while fewer than ``keep`` are); returns it."""
        self.counts[finding.what] += 1
        if len(self.examples) < self.keep:
            self.examples.append(finding)
        return finding

    def extend(self, findings: Iterable[Finding]) -> None:
        """Count each of ``findings``."""
        for finding in findings:
            self.add(finding)

    def merge(self, other: Tally) -> None:
        """Add another tally's counts and, room permitting, its examples."""
        self.counts.update(other.counts)
        for f in other.examples:
            if len(self.examples) < self.keep:
                self.examples.append(f)

    def __bool__(self) -> bool:
        return bool(self.counts)

    @property
    def total(self) -> int:
        """The number of findings of every kind."""
        return sum(self.counts.values())

    def to_dict(self) -> dict:
        """The tally as ``result.json`` records it: total, counts by kind, examples."""
        return {
            "total": self.total,
            "counts": dict(sorted(self.counts.items())),
            "examples": [{"path": plain(f.path), "what": f.what, "detail": plain(f.detail)} for f in self.examples],
        }


def plain(text: str, limit: int = 300) -> str:
    """Agent-chosen text (a file name, a link's target) as one short printable line.

    Control characters, newlines included, escaped, cut to ``limit`` characters; for ``result.json``
    and the audit's evidence.
    """
    out = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text)[:limit])
    return out[:limit]


def _relparts(path: Path | str, base: Path) -> list[str] | Finding:
    """The components of ``path`` below ``base``, without resolving anything.

    A link is not followed here.
    """
    p = Path(path)
    if p.is_absolute():
        try:
            rel = p.relative_to(base)
        except ValueError:
            return Finding(str(path), OUTSIDE, f"not under {base}")
    else:
        rel = p
    parts = [c for c in rel.parts if c not in ("", ".")]
    if any(c == ".." for c in parts):
        return Finding(str(path), OUTSIDE, "'..' component")
    return parts


def _open_dir(base: Path) -> int:
    return os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _open_fd(path: Path | str, base: Path, *, directory: bool = False) -> int | Finding:
    """An fd for ``path`` reached from ``base`` with no link followed on the way.

    The caller closes it.
    """
    parts = _relparts(path, base)
    if isinstance(parts, Finding):
        return parts
    shown = str(path)
    try:
        dfd = _open_dir(base)
    except OSError as exc:
        return Finding(shown, UNREADABLE, f"base: {exc.strerror}")
    try:
        for i, name in enumerate(parts):
            last = i == len(parts) - 1
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
            if not last or directory:
                flags |= os.O_DIRECTORY
            try:
                fd = os.open(name, flags, dir_fd=dfd)
            except OSError as exc:
                if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and _is_link(name, dfd)):
                    return Finding(shown, LINK, "a symbolic link on the path")
                if exc.errno == errno.ENOENT:
                    return Finding(shown, MISSING, "")
                if exc.errno == errno.ENOTDIR:
                    return Finding(shown, NOT_REGULAR, "a component is not a directory")
                return Finding(shown, UNREADABLE, exc.strerror or str(exc))
            os.close(dfd)
            dfd = fd
        result, dfd = dfd, -1
        return result
    finally:
        if dfd >= 0:
            os.close(dfd)


def _is_link(name: str, dfd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _check_regular(fd: int, shown: str, limit: int, limits: Limits, *, whole: bool) -> os.stat_result | Finding:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return Finding(shown, NOT_REGULAR, describe_mode(st.st_mode))
    if _sparse(st, limits):
        return Finding(shown, SPARSE, f"{st.st_size} bytes apparent, {st.st_blocks * 512} allocated")
    if whole and st.st_size > limit:
        return Finding(shown, TOO_BIG, f"{st.st_size} bytes > {limit}")
    return st


def _sparse(st: os.stat_result, limits: Limits) -> bool:
    """Whether a file's apparent size passes what it really holds on disk.

    Such as the holes an agent made with truncate.
    """
    return st.st_size > 2 * st.st_blocks * 512 + limits.sparse_slack


def describe_mode(mode: int) -> str:
    """A file type in words ("a FIFO", "a directory"), for findings and the audit's evidence."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a link"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: Path | str, base: Path, limits: Limits = DEFAULT) -> BinaryIO | Finding:
    """A binary file object for a regular, non-sparse file under ``base`` of at most the limit.

    The limit is ``limits.max_bytes``.

    The file is opened without following any link and without blocking; the size is checked on the
    open fd, so a rename after the check cannot swap in another file. The caller closes it (use
    ``with``).
    """
    fd = _open_fd(path, Path(base))
    if isinstance(fd, Finding):
        return fd
    try:
        st = _check_regular(fd, str(path), limits.max_bytes, limits, whole=True)
    except OSError as exc:
        os.close(fd)
        return Finding(str(path), UNREADABLE, exc.strerror or str(exc))
    if isinstance(st, Finding):
        os.close(fd)
        return st
    return os.fdopen(fd, "rb")


def _read_fd(fd: int, n: int) -> bytes:
    chunks: list[bytes] = []
    while n > 0:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_bytes(
    path: Path | str, base: Path, limit: int | None = None, *, truncate: bool = False, limits: Limits = DEFAULT
) -> bytes | Finding:
    """The bytes of a regular file under ``base``.

    All of them if at most ``limit``, else a ``too-big`` finding (or, with ``truncate``, the first
    ``limit`` bytes). Never more than ``limit`` bytes enter memory.
    """
    limit = limits.max_bytes if limit is None else limit
    fd = _open_fd(path, Path(base))
    if isinstance(fd, Finding):
        return fd
    try:
        st = _check_regular(fd, str(path), limit, limits, whole=not truncate)
        if isinstance(st, Finding):
            return st
        return _read_fd(fd, limit)
    except OSError as exc:
        return Finding(str(path), UNREADABLE, exc.strerror or str(exc))
    finally:
        os.close(fd)


def read_text(
    path: Path | str, base: Path, limit: int | None = None, *, truncate: bool = False, limits: Limits = DEFAULT
) -> str | Finding:
    """:func:`read_bytes` decoded as UTF-8 (undecodable bytes replaced)."""
    data = read_bytes(path, base, limit, truncate=truncate, limits=limits)
    return data if isinstance(data, Finding) else data.decode("utf-8", "replace")


def read_text_tail(path: Path | str, base: Path, limit: int, limits: Limits = DEFAULT) -> str | Finding:
    """The last ``limit`` bytes of a regular, non-sparse file as text.

    What a tail file is recorded as.
    """
    fd = _open_fd(path, Path(base))
    if isinstance(fd, Finding):
        return fd
    try:
        st = _check_regular(fd, str(path), limit, limits, whole=False)
        if isinstance(st, Finding):
            return st
        start = max(0, st.st_size - limit)
        os.lseek(fd, start, os.SEEK_SET)
        data = _read_fd(fd, limit)
    except OSError as exc:
        return Finding(str(path), UNREADABLE, exc.strerror or str(exc))
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace")


def iter_lines(
    path: Path | str, base: Path, max_line: int | None = None, max_lines: int | None = None, limits: Limits = DEFAULT
) -> Iterator[str | Finding]:
    """The lines of a regular file (without their newline), each at most ``max_line`` bytes.

    An over-long line yields one ``too-long`` finding and is skipped to its end without being held;
    past ``max_lines`` one ``too-many`` finding ends the iteration. A file that cannot be opened
    yields its finding. Sparse files are refused (the holes read as NULs, megabytes of one "line").
    """
    max_line = limits.max_line if max_line is None else max_line
    max_lines = limits.max_entries if max_lines is None else max_lines
    fd = _open_fd(path, Path(base))
    if isinstance(fd, Finding):
        yield fd
        return
    try:
        st = _check_regular(fd, str(path), 0, limits, whole=False)
        if isinstance(st, Finding):
            yield st
            return
        with os.fdopen(fd, "rb", closefd=False) as raw:
            reader = io.BufferedReader(raw, 1 << 16)
            n = 0
            while True:
                line = reader.readline(max_line + 1)
                if not line:
                    return
                n += 1
                if n > max_lines:
                    yield Finding(str(path), TOO_MANY, f"more than {max_lines} lines")
                    return
                if len(line) > max_line and not line.endswith(b"\n"):
                    while line and not line.endswith(b"\n"):
                        line = reader.readline(1 << 16)
                    yield Finding(str(path), TOO_LONG, f"line {n} longer than {max_line} bytes")
                    continue
                yield line.rstrip(b"\n").decode("utf-8", "replace")
    except OSError as exc:
        yield Finding(str(path), UNREADABLE, exc.strerror or str(exc))
    finally:
        os.close(fd)


def json_depth_ok(text: str, max_depth: int) -> bool:
    """Whether ``text``'s brackets nest at most ``max_depth`` deep (strings skipped).

    Checked in one pass without recursion, so that ``json.loads`` never meets a depth that would
    exhaust Python's stack.
    """
    if text.count("[") + text.count("{") <= max_depth:  # the common case, at C speed: cannot nest deeper
        return True
    depth = 0
    in_str = False
    escaped = False
    for ch in text:
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > max_depth:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def loads_json(
    text: str | bytes, max_depth: int = DEFAULT.max_depth, max_len: int = DEFAULT.max_line, *, where: str = ""
) -> object | Finding:
    """``json.loads`` of agent-made text, bounded.

    Too long, too deep or invalid is a finding, never a raise.
    """
    import json

    if len(text) > max_len:
        return Finding(where, TOO_LONG, f"{len(text)} characters > {max_len}")
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not json_depth_ok(text, max_depth):
        return Finding(where, TOO_DEEP, f"nested deeper than {max_depth}")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        return Finding(where, BAD_JSON, str(exc)[:200])


def walk(
    base: Path, limits: Limits = DEFAULT, *, sub: str | Path = "", match: Callable[[str], bool] | None = None
) -> tuple[list[Path], list[Finding]]:
    """The regular files under ``base / sub`` (absolute paths, sorted per directory), no link taken.

    Links, FIFOs, sockets, devices and sparse files are findings, not entries; directories are
    descended through fds opened with ``O_NOFOLLOW`` (so a directory swapped for a link mid-walk is
    not followed); the walk stops with one ``too-many`` finding after ``max_entries`` entries (those
    listed so far are kept) and one ``too-deep`` per directory past ``max_depth``. Memory is bounded
    by ``max_entries``, whatever the agent made.

    A search: with ``match`` (a file's path relative to ``base``, POSIX), only matching files are
    kept, and only they and the findings count toward ``max_entries``; what it looks at is bounded
    by ``Limits.max_seen`` entries (``too-many``) and ``Limits.max_seconds`` (``too-slow``). Decoys
    that sort first (a flood of empty files) then cost time, never the place of what the search is
    for. Every cut is a finding (:data:`CUT`).
    """
    base = Path(base)
    root = base / sub if sub else base
    files: list[Path] = []
    findings: list[Finding] = []
    seen, kept, full = 0, 0, False
    max_seen = limits.max_entries if match is None or limits.max_seen is None else limits.max_seen
    deadline = None if limits.max_seconds is None else time.monotonic() + limits.max_seconds
    cut: Finding | None = None
    start = _open_fd(root, base, directory=True) if sub else _safe_dir(base)
    if isinstance(start, Finding):
        if start.what != MISSING:
            findings.append(start)
        return files, findings
    stack: list[tuple[int, Path, int]] = [(start, root, 0)]
    try:
        while stack:
            dfd, where, depth = stack.pop()
            try:
                with os.scandir(dfd) as it:
                    names: list[tuple[str, tuple[int, int, int]]] = []
                    for entry in it:
                        seen += 1
                        if seen > max_seen or kept > limits.max_entries:  # what was listed so far is kept
                            full = True
                            cut = Finding(str(where), TOO_MANY, _cut_words(limits, match, seen > max_seen))
                            break
                        if deadline is not None and seen % 1024 == 0 and time.monotonic() > deadline:
                            full = True
                            cut = Finding(str(where), TOO_SLOW, f"stopped after {limits.max_seconds:g} s ({seen} seen)")
                            break
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        names.append((entry.name, (st.st_mode, st.st_size, st.st_blocks)))  # not the whole stat
            except OSError as exc:
                findings.append(Finding(str(where), UNREADABLE, exc.strerror or str(exc)))
                os.close(dfd)
                continue
            subdirs: list[tuple[int, Path, int]] = []
            names.sort()
            for name, (mode, size, blocks) in names:
                p = where / name
                if stat.S_ISREG(mode) and size > 2 * blocks * 512 + limits.sparse_slack:
                    findings.append(Finding(str(p), SPARSE, f"{size} bytes apparent, {blocks * 512} allocated"))
                    kept += 1
                elif stat.S_ISREG(mode):
                    if match is None or match(p.relative_to(base).as_posix()):
                        files.append(p)
                        kept += 1
                elif stat.S_ISDIR(mode):
                    if depth + 1 > limits.max_depth:
                        findings.append(Finding(str(p), TOO_DEEP, f"deeper than {limits.max_depth}"))
                        continue
                    try:
                        cfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
                    except OSError as exc:
                        kind = LINK if exc.errno in (errno.ELOOP, errno.ENOTDIR) else UNREADABLE
                        findings.append(Finding(str(p), kind, exc.strerror or ""))
                        continue
                    subdirs.append((cfd, p, depth + 1))
                elif stat.S_ISLNK(mode):
                    findings.append(Finding(str(p), LINK, _link_target(name, dfd)))
                    kept += 1
                else:
                    findings.append(Finding(str(p), NOT_REGULAR, describe_mode(mode)))
                    kept += 1
            os.close(dfd)
            stack.extend(reversed(subdirs))
            if full:
                findings.append(cut)
                break
    finally:
        for dfd, _, _ in stack:
            os.close(dfd)
    return files, findings


def _cut_words(limits: Limits, match: Callable[[str], bool] | None, by_seen: bool) -> str:
    if match is None:
        return f"more than {limits.max_entries} entries"
    if by_seen:
        return f"more than {limits.max_seen} entries looked at"
    return f"more than {limits.max_entries} entries kept"


def _safe_dir(base: Path) -> int | Finding:
    try:
        return os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return Finding(str(base), MISSING, "")
    except OSError as exc:
        kind = LINK if exc.errno in (errno.ELOOP, errno.ENOTDIR) else UNREADABLE
        return Finding(str(base), kind, exc.strerror or "")


def _link_target(name: str, dfd: int) -> str:
    try:
        return "-> " + os.readlink(name, dir_fd=dfd)[:200]
    except OSError:
        return ""


class CopyBudget:
    """The bytes and inodes a series of :func:`copy_into` calls may take together.

    A forged list that names one inode many times (hard links) is copied once, and the total stays
    under ``max_bytes``.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0
        self.inodes: dict[tuple[int, int], Path] = {}


def copy_into(
    src: Path | str,
    base: Path,
    dest: Path,
    limits: Limits = DEFAULT,
    budget: CopyBudget | None = None,
) -> Path | Finding:
    """Copy a regular agent file under ``base`` to ``dest`` (harness-owned) through the boundary.

    The copy is made from the fd opened by :func:`open_regular` (so what is copied is what was
    checked), in chunks, never holding the file in memory. With a ``budget``, an inode already
    copied is a ``duplicate`` finding (hard links of one file named twice) and a file that would
    pass the budget's total is ``too-big``.
    """
    fh = open_regular(src, base, limits)
    if isinstance(fh, Finding):
        return fh
    with fh:
        st = os.fstat(fh.fileno())
        key = (st.st_dev, st.st_ino)
        if budget is not None:
            if key in budget.inodes:
                return Finding(str(src), DUPLICATE, f"same file as {budget.inodes[key]}")
            if budget.used + st.st_size > budget.max_bytes:
                return Finding(str(src), TOO_BIG, f"the copies' total would pass {budget.max_bytes} bytes")
        dest.parent.mkdir(parents=True, exist_ok=True)
        left = limits.max_bytes
        with open(dest, "wb") as out:
            while left > 0:
                chunk = fh.read(min(left, 1 << 20))
                if not chunk:
                    break
                out.write(chunk)
                left -= len(chunk)
        if budget is not None:
            budget.used += st.st_size
            budget.inodes[key] = dest
    return dest


def sha256_of(path: Path | str, base: Path, limits: Limits = DEFAULT) -> str | Finding:
    """Hex sha256 of a regular, non-sparse file under ``base`` of at most ``limits.max_bytes``.

    Read in chunks from the checked fd (a FIFO named like a locked file yields a finding at once
    instead of blocking the harness).
    """
    import hashlib

    fh = open_regular(path, base, limits)
    if isinstance(fh, Finding):
        return fh
    digest = hashlib.sha256()
    try:
        with fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
    except OSError as exc:
        return Finding(str(path), UNREADABLE, exc.strerror or str(exc))
    return digest.hexdigest()


def is_regular(path: Path) -> bool:
    """Whether ``path`` itself (not what a link names) is a regular file.

    For listings, never for reading.
    """
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False
