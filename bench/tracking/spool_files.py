"""The spool folder's files as hostile input: how the relay lists, opens and parses them (issue 29).

The spool (``<workspace>/.bench/spool``) is written by the agent's processes, which may put anything
there under a spool file's name: a FIFO (a plain ``open()`` waits for a writer forever: the harness
hung, SIGTERM did nothing), a directory or a socket (``open()`` raised and the run was never
recorded), a link to a host file (read and uploaded with the harness's rights), a line of 100,000
``[`` (``json.loads`` raised RecursionError). So:

- the folder is listed with no link followed on the way to it, at most :data:`MAX_SPOOL_FILES`
  names;
- every file is opened through :mod:`bench.untrusted` (no link followed, regular files only, never
  blocking, not sparse); anything else is a :class:`Refused` entry, named (by file name, with the
  finding) and never read;
- each line's nesting is bounded before it is parsed (:func:`parse_line`); a line that is not an
  event is counted by why (``lines_dropped``) and skipped, and the lines after it are read.

Every refusal ends up in ``result.json`` (``scripts.relay.refused_files``, ``lines_dropped``) and in
the audit (:mod:`bench.rules.tracer`), so the agent's act is named, and nothing it leaves in the
folder can stop the relay.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

from bench import untrusted
from bench.tracking import accounting

MAX_SPOOL_FILES = 5_000  # spool files read (one per traced process: one a second for 80 minutes; past it, a flood)
MAX_TAIL = 256 << 10  # bytes of a script's output tail uploaded (the tee keeps its last 200 lines)
MAX_DEPTH = 32  # nesting of one spool line (the tracer writes 3 levels, plus a config's own nesting)
MAX_REFUSED = 1000  # refused files named in relay.json (the count covers the rest)
NOT_AN_EVENT = "not-an-event"  # a line of valid JSON that is not an object

# a spool file is read in pieces from an offset (the relay's own bounds); the boundary's whole-size
# bound is not it
SPOOL_LIMITS = untrusted.Limits(max_bytes=1 << 62)
TAIL_LIMITS = untrusted.Limits(max_bytes=MAX_TAIL)

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def kind(mode: int) -> str:
    """What a non-regular file is, in words (the detail of its finding)."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


class Refused:
    """Spool and tail files the relay did not read, by name.

    The first :data:`MAX_REFUSED` are named; the rest are counted.

    Kept in ``relay.json``, so a resume names what the live harness refused.
    """

    def __init__(self, saved: dict | None = None, more: int = 0) -> None:
        self.names: dict[str, list[str]] = {k: list(v)[:2] for k, v in (saved or {}).items()}
        self.more = more

    def add(self, finding: untrusted.Finding) -> None:
        """Count a refused file, keeping its name while fewer than :data:`MAX_REFUSED` are kept."""
        if finding.what == untrusted.MISSING:  # gone between the listing and the open: nothing was refused
            return
        name = Path(finding.path).name
        if name in self.names:
            return
        if len(self.names) >= MAX_REFUSED:
            self.more += 1
            return
        self.names[name] = [finding.what, finding.detail[:200]]

    def to_dict(self, folder: Path) -> dict:
        """``result.json``'s ``refused_files``: how many, by finding, and the first 20 by path."""
        counts: dict[str, int] = {}
        for what, _ in self.names.values():
            counts[what] = counts.get(what, 0) + 1
        return {
            "total": len(self.names) + self.more,
            "counts": dict(sorted(counts.items())),
            "more": self.more,
            "examples": [
                {"path": str(folder / name), "what": what, "detail": detail}
                for name, (what, detail) in sorted(self.names.items())[:20]
            ],
        }


def note(scripts: dict) -> str:
    """One clause for the run's reason when the relay refused files the agent left ('' if none).

    Counts only, no agent-chosen text (the names are in result.json and the audit).
    """
    refused = (scripts.get("relay") or {}).get("refused_files") or {}
    if not refused.get("total"):
        return ""
    kinds = ", ".join(f"{n} {what}" for what, n in sorted((refused.get("counts") or {}).items()))
    return f"the agent left {refused['total']} file(s) in the tracer's spool that the harness refused to read ({kinds})"


def listing(workspace: Path, spool_dir: Path, known: set[str], refused: Refused) -> list[Path]:
    """The regular ``*.jsonl`` files of the spool folder, sorted.

    Others named like one go to ``refused``. Past :data:`MAX_SPOOL_FILES` names only the files
    already known are kept (one ``too-many`` finding for the folder).
    """
    fd = _open_dir(workspace, spool_dir)
    if isinstance(fd, untrusted.Finding):
        refused.add(fd)
        return []
    out: list[Path] = []
    listed = 0
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                if not entry.name.endswith(".jsonl"):
                    continue
                listed += 1
                if listed > MAX_SPOOL_FILES and entry.name not in known:
                    continue
                try:
                    mode = entry.stat(follow_symlinks=False).st_mode
                except OSError:
                    continue
                path = spool_dir / entry.name
                if stat.S_ISREG(mode):
                    out.append(path)
                elif stat.S_ISLNK(mode):
                    refused.add(untrusted.Finding(str(path), untrusted.LINK, "a symbolic link"))
                else:
                    refused.add(untrusted.Finding(str(path), untrusted.NOT_REGULAR, kind(mode)))
    except OSError as e:  # the folder made unreadable (chmod 0): what was listed is read, the rest named
        refused.add(untrusted.Finding(str(spool_dir), untrusted.UNREADABLE, e.strerror or str(e)))
    finally:
        os.close(fd)
    if listed > MAX_SPOOL_FILES:
        refused.add(untrusted.Finding(str(spool_dir), untrusted.TOO_MANY, f"more than {MAX_SPOOL_FILES} spool files"))
    return sorted(out)


def read_chunk(path: Path, workspace: Path, offset: int, size: int) -> bytes | untrusted.Finding:
    """Up to ``size`` bytes of a spool file from ``offset``, through the boundary.

    The read never blocks and follows no link.
    """
    opened = untrusted.open_regular(path, workspace, SPOOL_LIMITS)
    if isinstance(opened, untrusted.Finding):
        return opened
    with opened as f:
        f.seek(offset)
        return f.read(size)


def read_tail(path: Path, workspace: Path) -> str | untrusted.Finding:
    """A script's output tail (``<spool>.tail``): its last :data:`MAX_TAIL` bytes.

    Read through the boundary.
    """
    return untrusted.read_text_tail(path, workspace, MAX_TAIL, TAIL_LIMITS)


def left(path: Path, workspace: Path, offset: int, chunk: int) -> tuple[int, int] | untrusted.Finding:
    """:func:`bench.tracking.accounting.left` for a file that is still a regular one of the spool.

    A file swapped for a FIFO or a link after it was read is not opened: its finding instead.
    """
    try:
        mode = os.stat(path, follow_symlinks=False).st_mode
    except OSError:
        return 0, 0
    if stat.S_ISLNK(mode):
        return untrusted.Finding(str(path), untrusted.LINK, "a symbolic link")
    if not stat.S_ISREG(mode):
        return untrusted.Finding(str(path), untrusted.NOT_REGULAR, kind(mode))
    return accounting.left(path, offset, chunk)  # which opens it through the boundary too


def parse_line(line: bytes, dropped: dict[str, int], max_len: int) -> dict | None:
    """One spool line as an event (a JSON object), or None with the reason counted in ``dropped``.

    The nesting depth is bounded before the parser sees the line (a line of 100,000 ``[`` must not
    reach its recursion); counting brackets first keeps the common line (a few) on the fast path.
    """
    why = ""
    event: object = None
    if line.count(b"[") + line.count(b"{") > MAX_DEPTH:
        event = untrusted.loads_json(line, MAX_DEPTH, max_len)
        if isinstance(event, untrusted.Finding):
            why = event.what
    else:
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            why = untrusted.BAD_JSON
    if not why and not isinstance(event, dict):
        why = NOT_AN_EVENT
    if why:
        if line.strip():  # an empty line is no event, and no loss
            dropped[why] = dropped.get(why, 0) + 1
        return None
    return event  # type: ignore[return-value]


def _open_dir(base: Path, folder: Path) -> int | untrusted.Finding:
    """An fd of ``folder`` (under ``base``) reached without following a link on the way.

    The caller closes it.
    """
    try:
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        return untrusted.Finding(str(base), untrusted.MISSING if e.errno == errno.ENOENT else untrusted.UNREADABLE)
    try:
        for name in folder.relative_to(base).parts:
            try:
                new = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as e:
                what = {errno.ENOENT: untrusted.MISSING, errno.ELOOP: untrusted.LINK}
                what[errno.ENOTDIR] = untrusted.NOT_REGULAR  # a file (or a link: ELOOP) where a folder should be
                return untrusted.Finding(str(folder), what.get(e.errno, untrusted.UNREADABLE), e.strerror or "")
            os.close(fd)
            fd = new
        fd, out = -1, fd
        return out
    finally:
        if fd >= 0:
            os.close(fd)
