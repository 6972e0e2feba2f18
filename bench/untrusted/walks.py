"""The bounded walk of an agent-made tree: its regular files, no link taken, no recursion.

Links, FIFOs, sockets, devices and sparse files are findings, not entries; a walk stops, with a
finding (:data:`bench.untrusted.findings.CUT`), at its bounds on entries, depth and time.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

from bench.untrusted.findings import (
    LINK,
    MISSING,
    NOT_REGULAR,
    SPARSE,
    TOO_DEEP,
    TOO_MANY,
    TOO_SLOW,
    UNREADABLE,
    Finding,
    describe_mode,
)
from bench.untrusted.limits import DEFAULT, Limits
from bench.untrusted.opening import open_fd


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
    for. Every cut is a finding (:data:`bench.untrusted.findings.CUT`).
    """
    base = Path(base)
    root = base / sub if sub else base
    files: list[Path] = []
    findings: list[Finding] = []
    seen, kept, full = 0, 0, False
    max_seen = limits.max_entries if match is None or limits.max_seen is None else limits.max_seen
    deadline = None if limits.max_seconds is None else time.monotonic() + limits.max_seconds
    cut: Finding | None = None
    start = open_fd(root, base, directory=True) if sub else _safe_dir(base)
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
