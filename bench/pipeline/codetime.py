"""The code that travels with its checkpoint.

The workspace's scripts as they were when a checkpoint's content was seen.

A checkpoint's bytes are timed when the harness first sees them (:mod:`bench.pipeline.arrivals`),
but what a checkpoint scores as depends as much on the code that loads it: its script's
``build_model`` and every workspace file that building and loading the model reads. Staged as the
workspace is at the END, an untrained checkpoint saved at 2 s whose model builder later reads
weights from a file written at the end would score as the trained model at 2 s: a false anytime
curve and time-to-best. So at each new checkpoint content the arrivals thread also takes a
**snapshot** of the code, and the evaluation stages exactly that snapshot for the candidate.

What is snapshotted is exactly what an evaluation folder can hold of the agent's: the workspace's
top-level ``*.py`` files that are regular files (no link, FIFO or folder), less the task's locked
files (the evaluation stages the task's originals), each read through :mod:`bench.untrusted` (no
link followed, never blocking, sparse or over-long files left out and named). Nothing else of the
workspace is staged, so a file the loader reads that was not in the snapshot does not exist for it.
The copies are content-addressed in the run's evidence folder, outside the workspace and the sandbox
(``evidence/code/<sha256>``; a snapshot's list of files is ``evidence/code/<sha256>.json``), and a
file whose ``stat`` did not move since the last snapshot is not read again, so repeated snapshots
cost a listing. ``evidence/code.jsonl`` names the snapshot of each checkpoint content (its path,
sha256 and time), line by line, so that a harness killed mid-run loses none (``--resume``).

Bounds: :data:`MAX_FILES` scripts and :data:`MAX_SNAPSHOT_BYTES` per snapshot,
:data:`MAX_FILE_BYTES` per file, :data:`MAX_ENTRIES` top-level entries listed,
:data:`MAX_STORE_BYTES` of copies per run. A snapshot that passes one is *incomplete*, and so is a
checkpoint content with no snapshot at all (seen by ``--resume`` after the harness died, or by a
harness that took none): its candidate is staged with the code as the run left it and placed no
earlier than the newest staged file's ``ctime`` (which, unlike the mtime, no process can set back),
with a rule 6 flag (:func:`bench.rules.scoring.code_of_its_time`). Either way, a candidate never
uses code written after its place in time. What remains: a snapshot is taken at the harness's look,
at most about a second after the checkpoint's content appeared, and the candidate is placed after
that look, so code written in that second counts as the checkpoint's; bytes rewritten through a
shared memory mapping without moving a file's ``stat`` keep the older copy (older code, never later
code).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import untrusted

CODE_DIR = "code"  # evidence/code/: each file's bytes under its sha256, each snapshot's list as <sha256>.json
RECORDS = "code.jsonl"  # evidence/code.jsonl: a checkpoint content (path, sha256, seen_at) -> its snapshot
SUFFIX = ".py"  # what the evaluation stages of the workspace (evaluate.stage)

MAX_ENTRIES = 20_000  # top-level entries of the workspace listed per snapshot
MAX_FILES = 256  # scripts per snapshot
MAX_FILE_BYTES = 8 << 20  # one script (a larger one is left out, as the evaluation would leave it out)
MAX_SNAPSHOT_BYTES = 64 << 20  # all scripts of one snapshot
MAX_STORE_BYTES = 1 << 30  # every copy the run keeps (content-addressed: an unchanged file is kept once)


@dataclass(frozen=True)
class Listing:
    """The workspace's top-level scripts now.

    (name, lstat) of each regular ``*.py`` (locked files left out), sorted by name; ``over``: why
    the listing stopped short (None: it is complete).
    """

    files: list[tuple[str, os.stat_result]]
    over: str | None = None


def listing(workspace: Path, locked: tuple[str, ...] | list[str] = ()) -> Listing:
    """What an evaluation folder takes of ``workspace``.

    Bounded in entries and files, never following a link.
    """
    out: list[tuple[str, os.stat_result]] = []
    seen = 0
    try:
        with os.scandir(workspace) as entries:
            for entry in entries:
                seen += 1
                if seen > MAX_ENTRIES:
                    return Listing(sorted(out), f"more than {MAX_ENTRIES} entries at the workspace's top level")
                if not entry.name.endswith(SUFFIX) or entry.name in locked:
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:  # removed while listed
                    continue
                if stat.S_ISREG(st.st_mode):
                    out.append((entry.name, st))
    except OSError as e:
        return Listing([], f"the workspace cannot be listed: {e.strerror or e}")
    out.sort()
    if len(out) > MAX_FILES:
        return Listing(out[:MAX_FILES], f"more than {MAX_FILES} scripts at the workspace's top level")
    return Listing(out)


def _key(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True)
class Snapshot:
    """One snapshot.

    ``files`` (name -> sha256), the files ``left_out`` (name -> the boundary's finding), and
    ``incomplete`` (why it cannot stand for the code of its time; None: it can).
    """

    digest: str
    files: dict[str, str]
    left_out: dict[str, str] = field(default_factory=dict)
    incomplete: str | None = None

    def to_dict(self) -> dict:
        """The snapshot as its JSON file in ``evidence/code/`` holds it."""
        return {"files": self.files, "left_out": self.left_out, "incomplete": self.incomplete}


class Snapshots:
    """Takes snapshots into ``<evidence>/code/`` and notes which checkpoint content each belongs to.

    Used by one thread at a time (the arrivals thread, then its last look); :meth:`take` reads only
    the files whose ``stat`` moved since it last read them.
    """

    def __init__(self, workspace: Path, evidence_dir: Path, locked: tuple[str, ...] | list[str] = ()) -> None:
        self.workspace, self.dir, self.locked = Path(workspace), Path(evidence_dir), tuple(locked)
        self.store = self.dir / CODE_DIR
        self._known: dict[str, tuple[tuple[int, int, int, int], str]] = {}  # name -> (stat key, sha256)
        self._last: tuple[tuple, Snapshot] | None = None  # the last listing's stat keys and its snapshot
        self.stored = _stored_bytes(self.store)  # a resumed run goes on counting what its store holds

    def take(self) -> Snapshot:
        """The code as it is now, copied into the store (bounded; see the module's docstring)."""
        found = listing(self.workspace, self.locked)
        seen = (found.over, tuple((name, _key(st)) for name, st in found.files))
        if self._last is not None and self._last[0] == seen and (self.store / f"{self._last[1].digest}.json").is_file():
            return self._last[1]  # no script moved since: the same snapshot (a flood of checkpoints costs a listing)
        files: dict[str, str] = {}
        left_out: dict[str, str] = {}
        incomplete, total = found.over, 0
        for name, st in found.files:
            known = self._known.get(name)
            if known is not None and known[0] == _key(st) and (self.store / known[1]).is_file():
                digest, size = known[1], st.st_size
            else:
                data = untrusted.read_bytes(name, self.workspace, MAX_FILE_BYTES)
                if isinstance(data, untrusted.Finding):
                    if data.what != untrusted.MISSING:  # a file removed since the listing was never there
                        left_out[name] = f"{data.what}: {data.detail}" if data.detail else data.what
                    continue
                digest, size = hashlib.sha256(data).hexdigest(), len(data)
                if not self._keep(digest, data):
                    incomplete = incomplete or f"the run's code store passed {MAX_STORE_BYTES >> 20} MiB"
                    break
                self._known[name] = (_key(st), digest)
            total += size
            if total > MAX_SNAPSHOT_BYTES:
                incomplete = incomplete or f"the scripts pass {MAX_SNAPSHOT_BYTES >> 20} MiB together"
                break
            files[name] = digest
        text = json.dumps(Snapshot("", files, left_out, incomplete).to_dict(), sort_keys=True).encode()
        digest = hashlib.sha256(text).hexdigest()
        if not self._keep(digest + ".json", text):
            incomplete = incomplete or f"the run's code store passed {MAX_STORE_BYTES >> 20} MiB"
        snap = Snapshot(digest, files, left_out, incomplete)
        self._last = (seen, snap) if snap.incomplete is None else None
        return snap

    def note(self, checkpoint: Path, sha256: str, seen_at: float, snap: Snapshot) -> None:
        """One line of ``code.jsonl``.

        The checkpoint content ``sha256`` at ``checkpoint`` (seen at ``seen_at``) travels with
        ``snap``. Flushed at once, so that a harness killed a moment later keeps it.
        """
        try:
            path = Path(checkpoint).relative_to(self.workspace).as_posix()
        except ValueError:
            path = str(checkpoint)
        record = {"t": round(time.time(), 3), "path": path, "sha256": sha256, "seen_at": seen_at}
        record |= {"snapshot": snap.digest, "incomplete": snap.incomplete}
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / RECORDS, "a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")

    def _keep(self, name: str, data: bytes) -> bool:
        """Store ``data`` as ``store/name`` unless it is there.

        False when the run's store is full.
        """
        target = self.store / name
        if target.is_file():
            return True
        if self.stored + len(data) > MAX_STORE_BYTES:
            return False
        self.store.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)
        self.stored += len(data)
        return True


def _stored_bytes(store: Path) -> int:
    try:
        return sum(e.stat().st_size for e in os.scandir(store))
    except OSError:
        return 0


class Index:
    """What ``code.jsonl`` says, for collect and evaluate.

    The snapshot of each checkpoint content.
    """

    def __init__(self, workspace: Path, evidence_dir: Path, locked: tuple[str, ...] | list[str] = ()) -> None:
        self.workspace, self.dir, self.locked = Path(workspace), Path(evidence_dir), tuple(locked)
        self.store = self.dir / CODE_DIR
        self._records: dict[tuple[str, str], dict] = {}
        try:
            lines = (self.dir / RECORDS).read_text().splitlines()
        except OSError:
            lines = []
        for line in lines:  # harness-written; a torn last line (a killed harness) is skipped
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("path"), str) and isinstance(rec.get("sha256"), str):
                self._records[(rec["path"], rec["sha256"])] = rec  # the latest record of a content wins

    @classmethod
    def of(cls, ws) -> Index:
        """The index of a :class:`~bench.pipeline.workspace.Workspace`'s run."""
        return cls(ws.path, ws.run_dir / "evidence", ws.task.locked_files if ws.task is not None else ())

    def snapshot(self, checkpoint: Path, sha256: str | None) -> tuple[Snapshot | None, str]:
        """The snapshot that travels with this content, if one can stand for it.

        Returns (the snapshot, "") or (None, why there is none that can stand for it).
        """
        try:
            path = Path(checkpoint).relative_to(self.workspace).as_posix()
        except ValueError:
            path = str(checkpoint)
        rec = self._records.get((path, sha256 or ""))
        if sha256 is None or rec is None:
            return None, "no snapshot of the workspace's code was taken when its content was seen"
        if rec.get("incomplete"):
            return None, f"the snapshot of the workspace's code at its content's time was cut: {rec['incomplete']}"
        try:
            manifest = json.loads((self.store / f"{rec['snapshot']}.json").read_text())
            files = {str(k): str(v) for k, v in manifest["files"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None, "the snapshot of the workspace's code when its content was seen is unreadable"
        return Snapshot(str(rec["snapshot"]), files, manifest.get("left_out") or {}), ""

    def newest(self) -> tuple[str, float] | None:
        """The staged file that changed last now (its name and ``ctime``).

        Where a candidate staged with the code as the run left it is placed at the earliest. None:
        there is no such file.
        """
        found = listing(self.workspace, self.locked)
        if not found.files:
            return None
        name, st = max(found.files, key=lambda f: f[1].st_ctime)
        return name, st.st_ctime


def stage_snapshot(store: Path, snap: Snapshot, dest: Path) -> None:
    """Copy the snapshot's files into the evaluation folder ``dest``.

    Each is checked against its sha256: a store that lost or changed a copy raises ``OSError`` (the
    candidate cannot be staged).
    """
    for name, digest in snap.files.items():
        if "/" in name or name.startswith("."):
            raise OSError(f"the snapshot names {name!r}, not a top-level script")
        data = (Path(store) / digest).read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            raise OSError(f"the kept copy of {name} is not the bytes snapshotted (sha256 {digest[:12]})")
        (dest / name).write_bytes(data)


def stage_current(workspace: Path, locked: tuple[str, ...] | list[str], dest: Path) -> list[untrusted.Finding]:
    """Copy the workspace's scripts as they are now into ``dest``, through the boundary.

    Under a snapshot's bounds (the same files a snapshot would hold); returns what was left out, as
    findings.
    """
    found = listing(workspace, locked)
    findings = [untrusted.Finding(str(workspace), untrusted.TOO_MANY, found.over)] if found.over else []
    total = 0
    for name, _st in found.files:
        data = untrusted.read_bytes(name, Path(workspace), MAX_FILE_BYTES)
        if isinstance(data, untrusted.Finding):
            if data.what != untrusted.MISSING:
                findings.append(data)
            continue
        total += len(data)
        if total > MAX_SNAPSHOT_BYTES:
            findings.append(untrusted.Finding(name, untrusted.TOO_BIG, f"the scripts pass {MAX_SNAPSHOT_BYTES} bytes"))
            break
        (dest / name).write_bytes(data)
    return findings
