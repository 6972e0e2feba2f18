"""When each checkpoint's content appeared, as the harness saw it (beside the watch step).

A file's modification time is the agent's to set (``touch -d``, ``cp -p``), and a file's name says
nothing about what it holds at the end: a placeholder saved at 3 s and overwritten at minute 6 is
the minute-6 model. So this thread lists ``checkpoints/`` about once a second while the agent runs
and records each file's **identity** (size, inode, mtime and ctime in ns, and the sha256 of its
bytes) when it first sees it and again whenever it changes. A checkpoint is placed at the time the
harness first saw its *current content* (:attr:`Arrival.at`), at most about a second late and never
earlier; a last look is taken once the agent's tree has ended, so content written during the grace
or between the last polls is placed at that look.

Polling stays cheap with many or large files: a file is re-read only when its ``stat`` moved. A
``write``, truncation, ``chmod`` or rename changes the ctime (which no process can set) or the
inode, so a rewrite with the same size and a restored mtime (``touch -r``) is caught; a file
replaced by rename is a new inode. A file whose ``stat`` moves while it is being hashed is still
being written: it is looked at again at the next poll. Bytes written again through a shared memory
mapping move no time until the kernel writes them back, so the polls may miss them: the collect step
therefore hashes every checkpoint once at the end and rejects bytes that were never recorded, and
the evaluation checks the staged copy against the same hash. Only regular files count: a symbolic
link is never a checkpoint (collect rejects it), and ``*.tmp`` files are the task helper's saves in
progress. What the thread records goes to the evidence as it comes (``on_new``), so a harness killed
mid-run loses nothing (:mod:`bench.resume` reads it back).

The code travels with its checkpoint: given a :class:`~bench.pipeline.codetime.Snapshots`, each new
content is recorded together with a snapshot of the workspace's scripts taken at the same look, and
placed after it, so that the evaluation stages the code as it was then, never code written later
(:mod:`bench.pipeline.codetime`).
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from bench import untrusted
from bench.evidence import Arrival, Identity

if TYPE_CHECKING:
    from bench.pipeline.codetime import Snapshots

IN_PROGRESS = ".tmp"  # the task helper writes <name>.tmp and renames it: not a checkpoint yet


def identify(path: Path, st: os.stat_result | None = None) -> Identity | None:
    """The identity of the regular file at ``path`` now.

    None if it is not one, vanished, or changed while read (being written: look again later).
    """
    try:
        before = st or os.lstat(path)
        if not stat.S_ISREG(before.st_mode):
            return None
        digest = sha256(path)
        after = os.lstat(path)
    except OSError:
        return None
    ident = Identity(before.st_size, before.st_ino, before.st_mtime_ns, before.st_ctime_ns, digest)
    return ident if ident.same_stat(after) else None


# a checkpoint is hashed whole however large (a model's weights), but never a link, FIFO or sparse
# file
HASHING = untrusted.Limits(max_bytes=1 << 46)


def sha256(path: Path) -> str:
    """Hex sha256 of the checkpoint file at ``path``, read through the boundary, not ``open()``.

    The agent is alive while the harness looks, and a file swapped for a FIFO between the lstat and
    the read would block this thread, and the watch that joins it, for good. OSError when it is not
    a regular file any more.
    """
    digest = untrusted.sha256_of(path, Path(path).parent, HASHING)
    if isinstance(digest, untrusted.Finding):
        raise OSError(str(digest))
    return digest


# what one look lists of checkpoints/: the agent decides how many files and how deep (an honest run
# saves some hundreds); past these bounds the rest is not seen, so never timed, never collected
# (collect says why)
LISTING = untrusted.Limits(max_entries=20_000, max_depth=16)


def checkpoint_files(directory: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """Each regular file under ``directory`` with its lstat.

    Links not followed, saves in progress left out.

    Listed through :func:`bench.untrusted.walk`: no recursion (a folder nested past Python's
    recursion limit once crashed ``os.walk``) and at most :data:`LISTING` entries, whatever the
    agent made.
    """
    files, _ = untrusted.walk(directory, LISTING)
    for path in files:
        if path.name.endswith(IN_PROGRESS):
            continue
        try:
            st = os.lstat(path)
        except OSError:  # removed while listed
            continue
        if stat.S_ISREG(st.st_mode):
            yield path, st


# how a look places content it has not seen before: the time of the look (a live run), or e.g. the
# mtime (resume)
Clock = Callable[[os.stat_result, Arrival | None], float]


def look(
    directory: Path,
    files: dict[Path, Arrival],
    on_new: Callable[[Path, Arrival], None] | None = None,
    clock: Clock | None = None,
    fallback: str | None = None,
    code: Snapshots | None = None,
) -> None:
    """One look at ``directory``.

    New files and files whose content changed are (re)recorded in ``files``.

    The time of new content is ``time.time()`` taken after its bytes were hashed, so never before
    they existed; ``clock`` replaces it where no one was looking (``--resume``: the mtime, never
    before the content last seen). ``on_new(path, arrival)`` is called for each record (new file or
    changed content), not for a file whose ``stat`` moved but whose bytes are the same (a ``touch``,
    a ``chmod``, the same bytes renamed over it). ``code``: each record also takes a snapshot of the
    workspace's scripts first, and its time is taken after that snapshot, so that the content and
    its code were both there by then.
    """
    try:
        listed = list(checkpoint_files(directory))
    except OSError:  # the agent may remove folders while they are listed: look again next time
        return
    for path, st in listed:
        known = files.get(path)
        if known is not None and known.identity is not None and known.identity.same_stat(st):
            continue
        ident = identify(path, st)
        if ident is None:
            continue  # vanished, or still being written
        if known is not None and known.identity is not None and known.identity.sha256 == ident.sha256:
            files[path] = replace(known, identity=ident)  # the same bytes: its time stands
            continue
        if known is not None and known.identity is None:  # kept by an older harness: no content to compare
            files[path] = replace(known, identity=ident)
            continue
        snap = None
        if code is not None:
            try:
                snap = code.take()
            except OSError:  # the evidence folder refused the copies: no snapshot, so the candidate is flagged
                snap = None
        at = clock(st, known) if clock is not None else time.time()
        if known is None:
            arrival = Arrival(first_seen=at, at=at, identity=ident, fallback=fallback)
        else:
            arrival = Arrival(known.first_seen, max(at, known.at), ident, known.changes + 1, fallback)
        files[path] = arrival
        if code is not None and snap is not None:
            try:
                code.note(path, ident.sha256, arrival.at, snap)
            except OSError:  # not noted: its candidate is staged with the code as the run left it, and flagged
                pass
        if on_new is not None:
            try:
                on_new(path, arrival)
            except Exception:  # the evidence is kept best-effort; the arrival itself is noted above
                pass


class Arrivals:
    """Polls a folder in a daemon thread; ``files`` maps each checkpoint to its :class:`Arrival`."""

    def __init__(
        self,
        directory: Path,
        interval: float = 1.0,
        on_new: Callable[[Path, Arrival], None] | None = None,
        code: Snapshots | None = None,
    ) -> None:
        """Watch ``directory`` every ``interval`` seconds.

        ``on_new(path, arrival)`` is called for each new file and each change of content (the
        evidence keeps it on disk as it comes); ``code`` snapshots the workspace's scripts with each
        (:func:`look`).
        """
        self.directory, self.interval, self.on_new, self.code = Path(directory), interval, on_new, code
        self.files: dict[Path, Arrival] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-arrivals", daemon=True)

    @property
    def seen(self) -> dict[Path, float]:
        """When the harness first saw each file's current content (``time.time()``)."""
        with self._lock:
            return {path: a.at for path, a in self.files.items()}

    def start(self) -> Arrivals:
        """Take the first look and start polling in a daemon thread; returns self."""
        self.scan()  # what is there before the agent starts (nothing, in a fresh workspace)
        self._thread.start()
        return self

    def stop(self) -> dict[Path, Arrival]:
        """End the polling and take the last look; returns ``files``."""
        self._stop.set()
        self._thread.join(timeout=10)
        self.scan()
        return dict(self.files)

    def scan(self) -> None:
        """One look at the folder: new files and changed contents noted (:func:`look`)."""
        with self._lock:
            look(self.directory, self.files, self.on_new, code=self.code)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.scan()
