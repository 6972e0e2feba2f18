"""Getting a task's raw data files and preparing them.

Raw files are fetched once into ``<cache>/raw/<task>`` and checked against ``task.toml``'s
checksums, so every agent trains and is scored on the same bytes; offline clusters point
``BENCH_DATA_MIRROR`` at a local copy holding each file at the path its ``[[data]]`` entry's
``mirror`` names. The prepared data is built by the task's own locked ``prepare.py`` (the harness
knows no dataset) into a temporary folder renamed into place only when complete, so a crash never
leaves half-written data.
"""

from __future__ import annotations

import collections
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from tqdm import tqdm

from bench import settings
from bench.checksums import CHUNK, Digest, digest_file, sha256
from bench.errors import BenchError
from bench.paths import cache_dir
from bench.tasks.registry import DataSource, Task

TIMEOUT_S = 60.0  # per socket operation, not for the whole download
USER_AGENT = "1gc-7rc-bench/0.1 (benchmark data fetcher; python-urllib)"
MARKER = ".complete"


class DataError(BenchError, RuntimeError):
    """A data file could not be fetched or verified, or a task's data could not be prepared."""


def mirror_root() -> Path | None:
    """The local mirror folder from ``BENCH_DATA_MIRROR``, or None to download from the sources."""
    mirror = settings.DATA_MIRROR.get()
    return mirror.resolve() if mirror is not None else None


def _cache_key(task: Task) -> str:
    """A task's folder in the cache: the built-in folder's name.

    A pack's task goes by its id (ids are unique over all sources, folder names are not: a pack's
    copy of T6 may keep T6's folder name, and must not share T6's data).
    """
    return task.name if task.source.builtin else f"packs/{task.id}"


def raw_dir(task: Task) -> Path:
    """Where a task's raw source files are kept, exactly as downloaded."""
    return cache_dir() / "raw" / _cache_key(task)


def prepared_dir(task: Task) -> Path:
    """Where a task's prepared data (the output of its ``prepare.py``) lives."""
    return cache_dir() / "prepared" / _cache_key(task)


def _mismatches(digest: Digest, source: DataSource) -> list[str]:
    return digest.mismatches(size=source.size, sha256=source.sha256, md5=source.md5)


def _stream(src: BinaryIO, out: BinaryIO, digest: Digest, source: DataSource, label: str, show: bool) -> None:
    """Copy ``src`` to ``out`` while hashing.

    Stop early once more bytes than the declared size arrive.
    """
    bar = show and sys.stderr.isatty()  # a bar in a log file is thousands of lines: print one line there instead
    if show and not bar:
        size = f" ({source.size / 1e6:.1f} MB)" if source.size else ""
        print(f"fetching {source.file}{size} from {label}", file=sys.stderr, flush=True)
    with tqdm(total=source.size, unit="B", unit_scale=True, desc=source.file, leave=False, disable=not bar) as pbar:
        while chunk := src.read(CHUNK):
            digest.update(chunk)
            out.write(chunk)
            pbar.update(len(chunk))
            if source.size is not None and digest.size > source.size:
                break  # already wrong; mismatches() reports it without fetching the rest


def _open(origin: str, local: bool) -> BinaryIO:
    """Open a mirror file, or an HTTP(S) response with a timeout and a User-Agent.

    Some hosts refuse urllib's.
    """
    if local:
        return open(origin, "rb")
    return urllib.request.urlopen(urllib.request.Request(origin, headers={"User-Agent": USER_AGENT}), timeout=TIMEOUT_S)


def fetch(source: DataSource, dest_dir: Path, *, mirror: Path | None = None, progress: bool = True) -> Path:
    """Make ``dest_dir/source.file`` hold the genuine bytes, from ``mirror`` or ``source.url``.

    A file already there is trusted only if it verifies. A new copy is moved into place only once
    verified, so a failure (a DataError saying what to do) leaves no partial file for a later run
    to trust.
    """
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / source.file
    stale = ""
    if target.is_file():
        size = target.stat().st_size  # a wrong size is known without hashing a multi-GB file
        bad = [f"size: expected {source.size}, got {size}"] if source.size not in (None, size) else []
        bad = bad or _mismatches(digest_file(target), source)
        if not bad:
            return target
        stale = f" (the existing {target} failed verification: {'; '.join(bad)})"
    todo = (
        f"download it by hand from {source.url or 'its source'} and put it at {target}, "
        f"or set BENCH_DATA_MIRROR to a folder holding {source.mirror}"
    )
    origin = str(mirror / source.mirror) if mirror is not None else source.url
    if mirror is not None and not (mirror / source.mirror).is_file():
        raise DataError(f"{source.file}: the mirror has no {origin}{stale}; {todo}, or unset it to download")
    if not origin:
        raise DataError(f"{source.file}: task.toml gives no url and BENCH_DATA_MIRROR is unset{stale}; {todo}")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{source.file}.", suffix=".part", dir=dest_dir)
    tmp = Path(tmp_name)
    try:
        digest = Digest()
        try:
            with os.fdopen(fd, "wb") as out, _open(origin, mirror is not None) as src:
                _stream(src, out, digest, source, origin, progress)
        except urllib.error.HTTPError as e:
            raise DataError(f"{source.file}: HTTP {e.code} {e.reason} from {origin}{stale}; {todo}") from e
        except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
            reason = getattr(e, "reason", e)
            raise DataError(f"{source.file}: could not read {origin}: {reason}{stale}; {todo}") from e
        bad = _mismatches(digest, source)
        if bad:
            raise DataError(
                f"{source.file}: the copy from {origin} does not verify ({'; '.join(bad)}). The file at {origin} "
                f"changed or is corrupt; {todo}, or, if upstream changed on purpose, update task.toml's checksums"
            )
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def fetch_tree(source: DataSource, dest_dir: Path, *, mirror: Path | None = None) -> Path:
    """Copy the files ``source.manifest`` lists from the mirror into ``dest_dir/source.file``.

    The manifest is checked against ``manifest_sha256`` and every file against the manifest; the
    folder appears (renamed from a temporary one) only once complete, so a later run never trusts
    half a copy.
    """
    target = dest_dir / source.file
    if mirror is None:
        raise DataError(f"{source.file}: a folder of files that only a data mirror provides; set BENCH_DATA_MIRROR")
    listing = DataSource(f".{source.file}.manifest", "", source.manifest, sha256=source.manifest_sha256)
    manifest = fetch(listing, dest_dir, mirror=mirror, progress=False)
    if (target / MARKER).is_file() and (target / MARKER).read_text().strip() == source.manifest_sha256:
        return target
    entries = [line.split(maxsplit=1) for line in manifest.read_text().splitlines() if line.strip()]
    bad = [e for e in entries if len(e) != 2 or e[1].startswith("/") or ".." in Path(e[1]).parts]
    if bad:
        raise DataError(f"{source.file}: the manifest {mirror / source.manifest} has malformed lines: {bad[:3]}")
    tmp = Path(tempfile.mkdtemp(prefix=f".{source.file}.", suffix=".part", dir=dest_dir))
    try:
        for digest, rel in entries:
            rel = rel.lstrip("*")  # sha256sum's binary-mode marker
            part = DataSource(Path(rel).name, "", f"{source.mirror}/{rel}", sha256=digest)
            fetch(part, tmp / Path(rel).parent, mirror=mirror, progress=False)
        (tmp / MARKER).write_text(source.manifest_sha256 + "\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _present(task: Task, source: DataSource) -> bool:
    """Whether a raw source is on disk (by size, or a folder's completion marker).

    ``fetch`` does the hashing.
    """
    path = raw_dir(task) / source.file
    if source.manifest:
        return (path / MARKER).is_file()
    return path.is_file() and (source.size is None or path.stat().st_size == source.size)


def fetch_sources(task: Task, *, mirror: Path | None = None, progress: bool = True) -> tuple[list[str], list[str]]:
    """Fetch every raw source of a task.

    Returns (files replaced by a partial substitute, optional files absent).

    A file that cannot be fetched is replaced by its declared substitutes (``substitute_for``), e.g.
    the mirror's subset of TinyImageNet; a run on such data says so in result.json and MLflow.
    """
    raw, substituted, absent = raw_dir(task), [], []

    def get(source: DataSource) -> None:
        if source.manifest:
            fetch_tree(source, raw, mirror=mirror)
        else:
            fetch(source, raw, mirror=mirror, progress=progress)

    for source in task.data:
        if source.substitute_for:
            continue
        try:
            get(source)
            continue
        except DataError as e:
            subs = [s for s in task.data if s.substitute_for == source.file]
            if not subs:
                if source.required:
                    raise
                absent.append(source.file)
                print(f"warning: optional source skipped: {e}", file=sys.stderr)
                continue
            used = []
            try:
                for sub in subs:
                    try:
                        get(sub)
                        used.append(sub.file)
                    except DataError:
                        if sub.required:
                            raise
                        absent.append(sub.file)
            except DataError as e2:
                raise DataError(f"{e}\nIts partial substitute could not be fetched either: {e2}") from e2
            note = f"warning: {source.file} unavailable; using its PARTIAL substitute ({', '.join(used)})"
            print(note, file=sys.stderr)
            substituted.append(source.file)
    return substituted, absent


def _expected_marker(task: Task) -> dict[str, object]:
    """The marker fields that must match for prepared data to be reused.

    Everything except the time.
    """
    return {
        "task": task.id,
        "prepare_sha256": sha256(task.file("prepare.py")),
        "sources": {s.file: {"sha256": s.sha256, "md5": s.md5, "size": s.size} for s in task.data},
    }


def _content(folder: Path) -> dict[str, str]:
    """sha256 of every file of a prepared folder (the marker excepted), by path relative to it."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MARKER)
    return {str(p.relative_to(folder)): sha256(p) for p in files}


def verify_prepared(task: Task) -> None:
    """Raise DataError unless the prepared data are byte for byte what ``prepare`` built.

    The cache is shared by every run on the machine: a file changed, added or removed after the
    build (by an agent that reached outside its workspace, or by hand) would change the data of
    every later run and the labels the official evaluation scores against, so it is checked before
    each run and each evaluation.
    """
    folder = prepared_dir(task)
    try:
        built = json.loads((folder / MARKER).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"{task.id}: the prepared data in {folder} carry no content list; rebuild them: "
                        f"bench data prepare {task.id} --force") from e  # fmt: skip
    now = _content(folder)
    changed = sorted(k for k in set(built) | set(now) if built.get(k) != now.get(k))
    if changed:
        raise DataError(
            f"{task.id}: the prepared data in {folder} changed since they were built ({len(changed)} file(s): "
            f"{', '.join(changed[:5])}): something wrote into the harness's cache. Rebuild them with "
            f"`bench data prepare {task.id} --force` (and find out what wrote there)."
        )


def is_prepared(task: Task) -> bool:
    """True when the prepared data was built by this prepare.py from sources of these checksums."""
    try:
        marker = json.loads((prepared_dir(task) / MARKER).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(marker, dict) or any(marker.get(k) != v for k, v in _expected_marker(task).items()):
        return False
    if not isinstance(marker.get("files"), dict):  # built before content lists existed: build again, once
        return False
    by_name = {s.file: s for s in task.data}  # a full file obtained since the partial build: rebuild from it
    return not any(name in by_name and _present(task, by_name[name]) for name in marker.get("substituted", []))


def partial_notes(task: Task) -> list[str]:
    """How the prepared data falls short of the full official data.

    Empty when complete, or not prepared.

    The task's ``prepare.py`` describes it in ``meta.json["partial_data"]``; the fetch adds what
    it knows.
    """
    folder = prepared_dir(task)
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return []
    try:
        notes = list(json.loads((folder / "meta.json").read_text()).get("partial_data", []))
    except (OSError, ValueError, AttributeError):
        notes = []
    if marker.get("substituted") and not notes:
        notes.append(f"built from partial substitutes of {', '.join(marker['substituted'])}")
    return [str(n) for n in notes]


def data_status(task: Task) -> str:
    """A short state for ``bench tasks``.

    Prepared, raw or missing, with "(partial)" when the data are incomplete.

    Raw files are checked by presence and size only: hashing GBs for a listing is slow, and
    ``fetch`` verifies.
    """
    if is_prepared(task):
        return "prepared (partial)" if partial_notes(task) else "prepared"
    partial = False
    for source in (s for s in task.data if not s.substitute_for):
        if _present(task, source):
            continue
        subs = [x for x in task.data if x.substitute_for == source.file]
        if subs and all(_present(task, x) for x in subs if x.required):
            partial = True
        elif source.required:
            return "missing"
    return "raw (partial)" if partial else "raw"


def _run_prepare(task: Task, raw: Path, out: Path, shown: Path | None = None) -> None:
    """Run the task's ``prepare.py``, its output passed through, its stderr tail kept for the error.

    ``shown``: the folder to name instead of ``out`` in what it prints ("prepared ... in DIR"):
    ``out`` is a temporary folder that is renamed to ``shown`` when the build succeeds, so its name
    would point at nothing.
    """
    cmd = [sys.executable, str(task.file("prepare.py")), "--prepare", "--raw-dir", str(raw), "--data-dir", str(out)]
    tail: collections.deque[str] = collections.deque(maxlen=30)
    named = (lambda text: text.replace(str(out), str(shown))) if shown else (lambda text: text)  # noqa: E731
    proc = subprocess.Popen(cmd, cwd=task.folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def relay_stdout() -> None:
        for line in proc.stdout:
            print(named(line.decode(errors="replace")), end="", flush=True)

    relay = threading.Thread(target=relay_stdout, daemon=True)
    relay.start()
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            tail.append(named(line.decode(errors="replace")))
            print(tail[-1], end="", file=sys.stderr, flush=True)
        code = proc.wait()
        relay.join()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if code != 0:
        raise DataError(f"{task.id}: prepare.py exited with status {code}; the end of its stderr:\n{''.join(tail)}")


def prepare(task: Task, *, force: bool = False, progress: bool = True) -> Path:
    """Fetch the task's sources and build its prepared data, unless up to date.

    ``force`` rebuilds anyway.

    Prepared data that are up to date are verified against the content list of their build
    (DataError if anything changed since): the same bytes for every run.
    """
    final = prepared_dir(task)
    if not force and is_prepared(task):
        verify_prepared(task)
        return final
    raw = raw_dir(task)
    substituted, absent = fetch_sources(task, mirror=mirror_root(), progress=progress)
    raw.mkdir(parents=True, exist_ok=True)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{task.name}.", suffix=".tmp", dir=final.parent))
    old: Path | None = None
    try:
        _run_prepare(task, raw, tmp, shown=final)
        now = datetime.now(UTC).isoformat(timespec="seconds")
        marker = {**_expected_marker(task), "substituted": substituted, "absent_optional": absent, "prepared_at": now}
        marker["files"] = _content(tmp)
        (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        if final.exists():  # rename() cannot replace a non-empty folder: move the old one aside first
            old = final.with_name(f".{task.name}.old-{os.getpid()}")
            os.replace(final, old)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not final.exists():
            os.replace(old, final)  # put the previous data back rather than leave none
            old = None
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return final
