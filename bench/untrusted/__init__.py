"""The one boundary through which the harness reads what an agent made.

The harness runs with the host user's rights; the workspace, its ``checkpoints/``, the spool and
tail files and every other agent-writable place are written by a process that may be hostile.
Reading them with plain ``open()`` / ``Path.read_bytes()`` / ``os.walk`` lets the agent choose what
the harness reads (a link to ``/proc/self/environ`` or ``/etc/shadow``), block it forever (a FIFO),
crash it (a directory where a file should be, a line of 100,000 ``[``) or exhaust its memory and the
store (a 1 GiB sparse file, 150,000 files). Every such read goes through this package, which
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

What this package does NOT promise: the content is still the agent's (a regular file may hold
anything); the caller decides what it means. It also cannot stop a file from changing between
two reads.

The boundary is a package, one module per part of the promise:

- :mod:`bench.untrusted.findings`: :class:`Finding`, the names of findings, :class:`Tally`;
- :mod:`bench.untrusted.limits`: :class:`Limits`, the bounds of one read;
- :mod:`bench.untrusted.opening`: one file reached with no link followed and checked on its fd;
- :mod:`bench.untrusted.reads`: a file's bytes, text, tail, copy and hash, bounded;
- :mod:`bench.untrusted.lines`: a file's lines, and JSON scanned for depth before it is parsed;
- :mod:`bench.untrusted.walks`: a tree's regular files, bounded in entries, depth and time.

Callers import the names below from ``bench.untrusted`` (``untrusted.read_bytes``,
``untrusted.Finding``), not from its modules.
"""

from __future__ import annotations

from bench.untrusted.findings import (
    BAD_JSON,
    CUT,
    DUPLICATE,
    LINK,
    MISSING,
    NOT_REGULAR,
    OUTSIDE,
    SPARSE,
    TOO_BIG,
    TOO_DEEP,
    TOO_LONG,
    TOO_MANY,
    TOO_SLOW,
    UNREADABLE,
    Finding,
    Tally,
    describe_mode,
    plain,
)
from bench.untrusted.limits import DEFAULT, Limits
from bench.untrusted.lines import iter_lines, json_depth_ok, loads_json
from bench.untrusted.opening import is_regular, open_regular
from bench.untrusted.reads import CopyBudget, copy_into, read_bytes, read_text, read_text_tail, sha256_of
from bench.untrusted.walks import walk

__all__ = [
    "BAD_JSON",
    "CUT",
    "DUPLICATE",
    "LINK",
    "MISSING",
    "NOT_REGULAR",
    "OUTSIDE",
    "SPARSE",
    "TOO_BIG",
    "TOO_DEEP",
    "TOO_LONG",
    "TOO_MANY",
    "TOO_SLOW",
    "UNREADABLE",
    "Finding",
    "Tally",
    "describe_mode",
    "plain",
    "DEFAULT",
    "Limits",
    "iter_lines",
    "json_depth_ok",
    "loads_json",
    "is_regular",
    "open_regular",
    "CopyBudget",
    "copy_into",
    "read_bytes",
    "read_text",
    "read_text_tail",
    "sha256_of",
    "walk",
]
