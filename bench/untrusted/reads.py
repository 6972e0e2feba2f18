"""The bounded reads of one agent-made file: its bytes, its text, its tail, a copy, a hash.

Each opens the file through :mod:`bench.untrusted.opening` (no link followed, regular and not
sparse) and never holds more than its limit in memory; a file that cannot be read is a finding.
"""

from __future__ import annotations

import os
from pathlib import Path

from bench.untrusted.findings import DUPLICATE, TOO_BIG, UNREADABLE, Finding
from bench.untrusted.limits import DEFAULT, Limits
from bench.untrusted.opening import check_regular, open_fd, open_regular


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
    fd = open_fd(path, Path(base))
    if isinstance(fd, Finding):
        return fd
    try:
        st = check_regular(fd, str(path), limit, limits, whole=not truncate)
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
    fd = open_fd(path, Path(base))
    if isinstance(fd, Finding):
        return fd
    try:
        st = check_regular(fd, str(path), limit, limits, whole=False)
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
