"""Evidence: what the harness itself observes of a run, kept where the agent cannot write.

The pipeline's steps write it (the workspace step, the launch monitor, the arrivals thread, the
watch) and the rules read it (:mod:`bench.rules`), so it lives below both, with the records it keeps
of a checkpoint (:class:`Identity`, :class:`Arrival`). The audit (:mod:`bench.pipeline.audit`)
judges a run from this folder, the normalised tool-call events and the scorer's results, never from
what the agent's own files say. Everything lives in ``<run_dir>/evidence/``, next to the workspace,
outside the sandbox's view::

    manifest-start.json   every file of the workspace before the agent starts (size, inode, ctime;
                          sha256 of the locked files)
    manifest-end.json     the same once the run's processes have ended
    inputs.json           sha256 of the scorer's inputs (the prepared data, the task's locked
                          originals) at start
    arrivals.jsonl        each checkpoint as the harness first saw it and each later change of its
                          content: its identity (size, inode, mtime, ctime, sha256), first_seen and
                          seen_at (the content's time), the change count, and the locked files'
                          state at that moment
    code/<sha256>         each workspace script's bytes as snapshotted at a checkpoint arrival (once
                          per content); code/<sha256>.json: a snapshot's list of files
                          (bench.pipeline.codetime)
    code.jsonl            each checkpoint content (path, sha256, seen_at) -> the snapshot that
                          travels with it
    launches.jsonl        each workspace script the launch monitor saw running (argv, sha256 of the
                          source)
    sources/<sha256>.py   a copy of that source taken when the process was seen (edits after it do
                          not count)
    network.jsonl         every request the sandbox's proxy received (host, port, allowed or
                          refused)
    processes.jsonl       processes of the run still alive when the harness ended it (at the grace,
                          at the end)

Why ``ctime``: an agent can restore a file's bytes and its modification time (``touch -r``), but not
its inode change time, which the kernel sets on every write or ``chmod``. A locked file whose ctime
moved was opened for writing, even if its bytes are the original ones again at the end. Files are
appended line by line (JSON Lines), so that a harness killed mid-run leaves everything observed
until then for ``bench run --resume``.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import untrusted

# collect's words for a checkpoint whose bytes the arrivals never recorded (rule 6 reads them in
# the rejections)
UNTIMED = "its bytes are not the ones the harness timed"

MAX_FILES = 200_000  # a manifest stops listing here (a runaway agent must not fill the harness's memory)
MANIFEST_LIMITS = untrusted.Limits(max_entries=MAX_FILES, max_depth=256)
LISTED = (untrusted.LINK, untrusted.NOT_REGULAR, untrusted.SPARSE)  # walk's findings that are entries of the listing
HASH_LIMITS = untrusted.Limits(max_bytes=256 * 1024 * 1024)  # the locked files are source code: far below this
SOURCE_BYTES = 4 * 1024 * 1024  # a script source kept for the audit (a larger "script" is not kept, its hash None)
STAT_KEYS = ("size", "mtime_ns", "ctime_ns", "ino")  # any of them moving means the file was written or replaced


@dataclass(frozen=True)
class Identity:
    """What a checkpoint's content was when the harness looked.

    Its ``stat`` and the sha256 of its bytes.
    """

    size: int
    ino: int
    mtime_ns: int
    ctime_ns: int
    sha256: str

    def same_stat(self, st: os.stat_result) -> bool:
        """True if ``st`` is this file unchanged.

        No write, truncation, chmod or replacement since (ctime).
        """
        return (st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns) == (
            self.size,
            self.ino,
            self.mtime_ns,
            self.ctime_ns,
        )

    def to_dict(self) -> dict:
        """The identity as the evidence records it (JSON)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: object) -> Identity | None:
        """The identity recorded in the evidence, or None for a record without one."""
        if not isinstance(d, dict) or not isinstance(d.get("sha256"), str):
            return None
        try:
            return cls(int(d["size"]), int(d["ino"]), int(d["mtime_ns"]), int(d["ctime_ns"]), d["sha256"])
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class Arrival:
    """One checkpoint file as the harness saw it.

    ``first_seen``: when its name first appeared; ``at``: when the harness first saw its current
    content (where the anytime curve and the windows place it); ``identity``: that content (None:
    recorded by a harness that kept no identities, placed at its first sight as then); ``changes``:
    how often the content was replaced after the first sight (an overwrite is rule 6 evidence);
    ``fallback``: how a time was taken other than by looking (``"mtime"``: the file was written
    after the harness died, :mod:`bench.resume`).
    """

    first_seen: float
    at: float
    identity: Identity | None
    changes: int = 0
    fallback: str | None = None


def _entry(path: Path, *, hashed: bool) -> dict:
    """A file's identity from ``lstat``.

    A hashed (locked) file is read through :mod:`bench.untrusted`, so a locked file the agent
    replaced by a FIFO, a link or a sparse file gets ``sha256: None`` and its finding, at once.
    """
    st = path.lstat()
    entry = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "ino": st.st_ino}
    if stat.S_ISLNK(st.st_mode):
        entry["link"] = os.readlink(path)
    elif hashed:
        digest = untrusted.sha256_of(path.name, path.parent, HASH_LIMITS)
        entry["sha256"] = None if isinstance(digest, untrusted.Finding) else digest
        if isinstance(digest, untrusted.Finding):  # vanished, unreadable or hostile while listed: the listing says so
            entry["refused"] = digest.what
    return entry


def manifest(root: Path, hashed: Iterable[str] = ()) -> dict[str, dict]:
    """Every file and link under ``root`` (relative POSIX path -> :func:`_entry`), folders left out.

    Only the ``hashed`` paths (the locked files) are read: the rest is judged by its inode and
    times, which no write or replacement leaves unchanged, so that checkpoints and data cost a
    ``stat`` each, not a read.

    The tree is the agent's: it is listed by :func:`bench.untrusted.walk` (no link followed, no
    recursion, so a folder nested 1,100 deep or 150,000 files cost a bounded list, not a
    ``RecursionError`` or the harness's memory); links, FIFOs and sparse files are entries like any
    file (their ``lstat``), and a listing cut by the caps ends with the key ``"..."``.
    """
    root, out = Path(root), {}
    to_hash = set(hashed)
    files, findings = untrusted.walk(root, MANIFEST_LIMITS)
    listed = [*files, *(Path(f.path) for f in findings if f.what in LISTED)]
    for path in sorted(listed):
        rel = path.relative_to(root).as_posix()
        try:
            out[rel] = _entry(path, hashed=rel in to_hash)
        except OSError:
            continue
    cut = [f for f in findings if f.what in (untrusted.TOO_MANY, untrusted.TOO_DEEP)]
    if cut:
        out["..."] = {"truncated": True, "why": untrusted.plain(str(cut[0]))}
    return out


def locked_state(workspace: Path, names: Iterable[str]) -> dict[str, dict]:
    """The locked files' entries (always hashed): what rule 1 compares over time."""
    out = {}
    for name in names:
        try:
            out[name] = _entry(Path(workspace) / name, hashed=True)
        except OSError:
            out[name] = {"missing": True}
    return out


class Evidence:
    """The ``evidence/`` folder of one run directory.

    Writers used while the run goes on, readers for the audit.
    """

    def __init__(self, run_dir: Path) -> None:
        self.dir = Path(run_dir) / "evidence"
        self._lock = threading.Lock()

    def path(self, name: str) -> Path:
        """Where the evidence file ``name`` lives."""
        return self.dir / name

    # writers --------------------------------------------------------------------------------------

    def write_json(self, name: str, value: dict) -> None:
        """Write ``name`` atomically (a reader never sees half a file)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.path(name + ".tmp")
        tmp.write_text(json.dumps(value, indent=1, sort_keys=True))
        os.replace(tmp, self.path(name))

    def append(self, name: str, record: dict) -> None:
        """One JSON line, flushed at once: a harness killed a moment later keeps it."""
        line = json.dumps({"t": round(time.time(), 3), **record}, sort_keys=True) + "\n"
        with self._lock:
            self.dir.mkdir(parents=True, exist_ok=True)
            with open(self.path(name), "a") as f:
                f.write(line)

    def keep_source(self, source: Path, base: Path | None = None) -> str | None:
        """Copy a script as it is now into ``sources/`` under its sha256.

        The hash, or None if it cannot be read.

        The script is the agent's: it is read once through :mod:`bench.untrusted` below ``base``
        (its workspace; default its folder), so a link is not followed, a FIFO does not block and a
        sparse or huge file is refused; the hash is of the bytes kept.
        """
        base = Path(base) if base is not None else Path(source).parent
        try:
            rel = Path(source).relative_to(base)
        except ValueError:
            return None
        data = untrusted.read_bytes(rel, base, SOURCE_BYTES)
        if isinstance(data, untrusted.Finding):
            return None
        digest = hashlib.sha256(data).hexdigest()
        try:
            kept = self.path("sources") / f"{digest}.py"
            if not kept.exists():
                kept.parent.mkdir(parents=True, exist_ok=True)
                kept.write_bytes(data)
        except OSError:
            return None
        return digest

    # readers --------------------------------------------------------------------------------------

    def read_json(self, name: str) -> dict:
        """A JSON evidence file, or ``{}`` when it is missing or unreadable."""
        try:
            return json.loads(self.path(name).read_text())
        except (OSError, ValueError):
            return {}

    def lines(self, name: str) -> list[dict]:
        """The complete JSON lines of ``name``.

        A torn last line, from a killed harness, is skipped.
        """
        try:
            text = self.path(name).read_text()
        except OSError:
            return []
        out = []
        for line in text.splitlines():
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                out.append(value)
        return out

    def source(self, digest: str) -> str:
        """The kept copy of a script's source by its sha256 ("" if none was kept)."""
        try:
            return self.path("sources").joinpath(f"{digest}.py").read_text(errors="replace")
        except OSError:
            return ""

    def arrivals(self, workspace: Path) -> dict[Path, Arrival]:
        """Each checkpoint as recorded in ``arrivals.jsonl`` (absolute path -> :class:`Arrival`).

        Its first sight, then each change of content in order; the last record is the content the
        file must still hold.
        """
        out: dict[Path, Arrival] = {}
        for rec in self.lines("arrivals.jsonl"):
            if not isinstance(rec.get("path"), str):
                continue
            path = Path(workspace) / rec["path"]
            try:
                at = float(rec.get("seen_at", rec.get("t")))
            except (TypeError, ValueError):
                continue
            ident, known = Identity.from_dict(rec.get("identity")), out.get(path)
            if known is None:
                out[path] = Arrival(at, at, ident, 0, rec.get("fallback"))
            elif ident is not None and (known.identity is None or ident.sha256 != known.identity.sha256):
                out[path] = Arrival(known.first_seen, max(at, known.at), ident, known.changes + 1, rec.get("fallback"))
        return out

    # the harness's observations -------------------------------------------------------------------

    def start(self, workspace: Path, locked: Iterable[str], inputs: dict[str, str]) -> dict[str, str]:
        """Before the agent starts: the workspace manifest and the scorer's inputs.

        Returns the locked files' sha256 (rule 1's reference).
        """
        locked = list(locked)
        start = manifest(workspace, locked)
        self.write_json("manifest-start.json", start)
        self.write_json("inputs.json", inputs)
        return {name: start[name]["sha256"] for name in locked if (start.get(name) or {}).get("sha256")}

    def locked_at_start(self, locked: Iterable[str]) -> dict[str, str]:
        """The locked files' sha256 as the start manifest has them.

        What :meth:`start` returned; for ``--resume``.
        """
        start = self.read_json("manifest-start.json")
        return {name: start[name]["sha256"] for name in locked if (start.get(name) or {}).get("sha256")}

    def end(self, workspace: Path, locked: Iterable[str]) -> None:
        """Record the workspace as the run left it, once nothing of the run runs any more.

        Also on ``--resume``.
        """
        self.write_json("manifest-end.json", manifest(workspace, locked))

    def note_arrival(self, workspace: Path, path: Path, arrival: Arrival, locked: Iterable[str]) -> None:
        """Record a checkpoint first seen, or its content seen changed (``arrival.changes`` > 0).

        One line, at once.
        """
        record = {
            "path": path.relative_to(workspace).as_posix(),
            "seen_at": arrival.at,
            "first_seen": arrival.first_seen,
            "change": arrival.changes,
            "locked": locked_state(workspace, locked),
        }
        if arrival.identity is not None:
            record["identity"] = arrival.identity.to_dict()
        if arrival.fallback:
            record["fallback"] = arrival.fallback
        self.append("arrivals.jsonl", record)

    def note_processes(self, phase: str, procs: list[dict]) -> None:
        """Record the processes of the run alive at ``phase`` ("grace-over", "end", "resume").

        Each with its pid, command line and start.
        """
        if procs:
            self.append("processes.jsonl", {"phase": phase, "processes": procs})
