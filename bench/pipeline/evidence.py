"""Evidence (beside every step): what the harness itself observes of a run, kept where the agent cannot write.

The audit (:mod:`bench.pipeline.audit`) judges a run from this folder, the normalised tool-call events and the
scorer's results, never from what the agent's own files say. Everything lives in ``<run_dir>/evidence/``, next
to the workspace, outside the sandbox's view::

    manifest-start.json   every file of the workspace before the agent starts (size, inode, ctime; sha256 of the
                          locked files)
    manifest-end.json     the same once the run's processes have ended
    inputs.json           sha256 of the scorer's inputs (the prepared data, the task's locked originals) at start
    arrivals.jsonl        each checkpoint as the harness first saw it and each later change of its content: its
                          identity (size, inode, mtime, ctime, sha256), first_seen and seen_at (the content's
                          time), the change count, and the locked files' state at that moment
    launches.jsonl        each workspace script the launch monitor saw running (argv, sha256 of the source)
    sources/<sha256>.py   a copy of that source taken when the process was seen (edits after it do not count)
    network.jsonl         every request the sandbox's proxy received (host, port, allowed or refused)
    processes.jsonl       processes of the run still alive when the harness ended it (at the grace, at the end)

Why ``ctime``: an agent can restore a file's bytes and its modification time (``touch -r``), but not its inode
change time, which the kernel sets on every write or ``chmod``. A locked file whose ctime moved was opened for
writing, even if its bytes are the original ones again at the end. Files are appended line by line (JSON
Lines), so that a harness killed mid-run leaves everything observed until then for ``bench run --resume``.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from bench.checksums import sha256
from bench.pipeline.arrivals import Arrival, Identity

MAX_FILES = 200_000  # a manifest stops listing here (a runaway agent must not fill the harness's memory)
STAT_KEYS = ("size", "mtime_ns", "ctime_ns", "ino")  # any of them moving means the file was written or replaced


def _entry(path: Path, *, hashed: bool) -> dict:
    st = path.lstat()
    entry = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "ino": st.st_ino}
    if path.is_symlink():
        entry["link"] = os.readlink(path)
    elif hashed:
        try:
            entry["sha256"] = sha256(path)
        except OSError:  # vanished or unreadable while listed: the listing says so
            entry["sha256"] = None
    return entry


def manifest(root: Path, hashed: Iterable[str] = ()) -> dict[str, dict]:
    """Every file and link under ``root`` (relative POSIX path -> :func:`_entry`), folders left out; only the
    ``hashed`` paths (the locked files) are read: the rest is judged by its inode and times, which no write or
    replacement leaves unchanged, so that checkpoints and data cost a ``stat`` each, not a read."""
    root, out = Path(root), {}
    to_hash = set(hashed)
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        names = files + [d for d in dirs if (here / d).is_symlink()]
        for name in sorted(names):
            path = here / name
            rel = path.relative_to(root).as_posix()
            try:
                out[rel] = _entry(path, hashed=rel in to_hash)
            except OSError:
                continue
            if len(out) >= MAX_FILES:
                out["..."] = {"truncated": True}
                return out
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
    """The ``evidence/`` folder of one run directory: writers used while the run goes on, readers for the audit."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = Path(run_dir) / "evidence"
        self._lock = threading.Lock()

    def path(self, name: str) -> Path:
        return self.dir / name

    # writers ------------------------------------------------------------------------------------------------

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

    def keep_source(self, source: Path) -> str | None:
        """Copy a script as it is now into ``sources/`` under its sha256; the hash, or None if it cannot be read."""
        try:
            digest = sha256(source)
            kept = self.path("sources") / f"{digest}.py"
            if not kept.exists():
                kept.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, kept)
            return digest
        except OSError:
            return None

    # readers ------------------------------------------------------------------------------------------------

    def read_json(self, name: str) -> dict:
        try:
            return json.loads(self.path(name).read_text())
        except (OSError, ValueError):
            return {}

    def lines(self, name: str) -> list[dict]:
        """The complete JSON lines of ``name`` (a torn last line, from a killed harness, is skipped)."""
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
        try:
            return self.path("sources").joinpath(f"{digest}.py").read_text(errors="replace")
        except OSError:
            return ""

    def arrivals(self, workspace: Path) -> dict[Path, Arrival]:
        """Each checkpoint as recorded in ``arrivals.jsonl`` (absolute path -> :class:`Arrival`): its first sight,
        then each change of content in order; the last record is the content the file must still hold."""
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

    # the harness's observations -----------------------------------------------------------------------------

    def start(self, workspace: Path, locked: Iterable[str], inputs: dict[str, str]) -> dict[str, str]:
        """Before the agent starts: the workspace manifest and the scorer's inputs; returns the locked files'
        sha256 (rule 1's reference)."""
        locked = list(locked)
        start = manifest(workspace, locked)
        self.write_json("manifest-start.json", start)
        self.write_json("inputs.json", inputs)
        return {name: start[name]["sha256"] for name in locked if (start.get(name) or {}).get("sha256")}

    def locked_at_start(self, locked: Iterable[str]) -> dict[str, str]:
        """The locked files' sha256 as the start manifest has them (what :meth:`start` returned; for ``--resume``)."""
        start = self.read_json("manifest-start.json")
        return {name: start[name]["sha256"] for name in locked if (start.get(name) or {}).get("sha256")}

    def end(self, workspace: Path, locked: Iterable[str]) -> None:
        """Once nothing of the run runs any more (also on ``--resume``): the workspace as the run left it."""
        self.write_json("manifest-end.json", manifest(workspace, locked))

    def note_arrival(self, workspace: Path, path: Path, arrival: Arrival, locked: Iterable[str]) -> None:
        """A checkpoint first seen, or its content seen changed (``arrival.changes`` > 0): one line, at once."""
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
        """Processes of the run alive at ``phase`` ("grace-over", "end", "resume"): pid, command line, start."""
        if procs:
            self.append("processes.jsonl", {"phase": phase, "processes": procs})
