"""Reaching one agent-made file: no link followed, never blocking, a regular file checked on its fd.

A path is opened one component at a time from ``base`` with ``O_NOFOLLOW`` (``openat`` through
``dir_fd``), each component ``O_NONBLOCK`` (a FIFO opens at once instead of waiting for a writer);
the fd is then ``fstat``-ed, so what is checked (regular, not sparse, small enough) is what is read:
a rename after the check cannot swap in another file.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from bench.untrusted.findings import (
    LINK,
    MISSING,
    NOT_REGULAR,
    OUTSIDE,
    SPARSE,
    TOO_BIG,
    UNREADABLE,
    Finding,
    describe_mode,
)
from bench.untrusted.limits import DEFAULT, Limits


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


def open_fd(path: Path | str, base: Path, *, directory: bool = False) -> int | Finding:
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


def check_regular(fd: int, shown: str, limit: int, limits: Limits, *, whole: bool) -> os.stat_result | Finding:
    """The stat of an open fd if it is a regular, non-sparse file, else its finding.

    With ``whole`` (the file is to be read whole) a file larger than ``limit`` is ``too-big`` too;
    ``shown`` is the path the finding names.
    """
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


def open_regular(path: Path | str, base: Path, limits: Limits = DEFAULT) -> BinaryIO | Finding:
    """A binary file object for a regular, non-sparse file under ``base`` of at most the limit.

    The limit is ``limits.max_bytes``.

    The file is opened without following any link and without blocking; the size is checked on the
    open fd, so a rename after the check cannot swap in another file. The caller closes it (use
    ``with``).
    """
    fd = open_fd(path, Path(base))
    if isinstance(fd, Finding):
        return fd
    try:
        st = check_regular(fd, str(path), limits.max_bytes, limits, whole=True)
    except OSError as exc:
        os.close(fd)
        return Finding(str(path), UNREADABLE, exc.strerror or str(exc))
    if isinstance(st, Finding):
        os.close(fd)
        return st
    return os.fdopen(fd, "rb")


def is_regular(path: Path) -> bool:
    """Whether ``path`` itself (not what a link names) is a regular file.

    For listings, never for reading.
    """
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False
