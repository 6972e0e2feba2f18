"""Getting a task's raw data files and preparing them.

Raw files are fetched once into ``<cache>/raw/<task>`` and checked against ``task.toml``'s checksums, so every
agent trains and is scored on the same bytes; offline clusters point ``BENCH_DATA_MIRROR`` at a local copy laid
out like ``shared/data``. The prepared data is built by the task's own locked ``prepare.py`` (the harness knows no
dataset) into a temporary folder renamed into place only when complete, so a crash never leaves half-written data.
"""

from __future__ import annotations

import collections
import hashlib
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from tqdm import tqdm

from bench.paths import cache_dir
from bench.tasks import DataSource, Task

CHUNK = 1 << 20  # 1 MB: large enough to be fast, small enough to keep memory flat on multi-GB archives
TIMEOUT_S = 60.0  # per socket operation, not for the whole download
USER_AGENT = "1gc-7rc-bench/0.1 (benchmark data fetcher; python-urllib)"
MARKER = ".complete"


class DataError(RuntimeError):
    """A data file could not be fetched or verified, or a task's data could not be prepared."""


def mirror_root() -> Path | None:
    """The local mirror folder from ``BENCH_DATA_MIRROR``, or None to download from the canonical URLs."""
    value = os.environ.get("BENCH_DATA_MIRROR", "").strip()
    return Path(value).expanduser().resolve() if value else None


def raw_dir(task: Task) -> Path:
    """Where a task's raw source files are kept, exactly as downloaded."""
    return cache_dir() / "raw" / task.name


def prepared_dir(task: Task) -> Path:
    """Where a task's prepared data (the output of its ``prepare.py``) lives."""
    return cache_dir() / "prepared" / task.name


class _Digest:
    """Size, sha256 and md5 computed in one pass, so verification never re-reads a multi-GB file."""

    def __init__(self) -> None:
        self.sha256 = hashlib.sha256()
        self.md5 = hashlib.md5(usedforsecurity=False)  # an identity check against published sums, not security
        self.size = 0

    def update(self, chunk: bytes) -> None:
        self.sha256.update(chunk)
        self.md5.update(chunk)
        self.size += len(chunk)

    def mismatches(self, source: DataSource) -> list[str]:
        """One 'what: expected X, got Y' entry per declared property that the bytes do not match."""
        want = {"size": source.size, "sha256": source.sha256.lower(), "md5": source.md5.lower()}
        got = {"size": self.size, "sha256": self.sha256.hexdigest(), "md5": self.md5.hexdigest()}
        return [f"{k}: expected {v}, got {got[k]}" for k, v in want.items() if v not in (None, "") and v != got[k]]


def _hash_file(path: Path) -> _Digest:
    digest = _Digest()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest


def _stream(src: BinaryIO, out: BinaryIO, digest: _Digest, source: DataSource, label: str, show: bool) -> None:
    """Copy ``src`` to ``out`` while hashing; stop early once more bytes than the declared size arrive."""
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
    """Open a mirror file, or an HTTP(S) response with a timeout and a User-Agent (some hosts refuse urllib's)."""
    if local:
        return open(origin, "rb")
    return urllib.request.urlopen(urllib.request.Request(origin, headers={"User-Agent": USER_AGENT}), timeout=TIMEOUT_S)


def fetch(source: DataSource, dest_dir: Path, *, mirror: Path | None = None, progress: bool = True) -> Path:
    """Make ``dest_dir/source.file`` hold the genuine bytes, copied from ``mirror`` or downloaded from ``source.url``.

    A file already there is trusted only if it verifies. A new copy is moved into place only once verified, so a
    failure (a DataError saying what to do) leaves no partial file for a later run to trust.
    """
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / source.file
    stale = ""
    if target.is_file():
        size = target.stat().st_size  # a wrong size is known without hashing a multi-GB file
        bad = [f"size: expected {source.size}, got {size}"] if source.size not in (None, size) else []
        bad = bad or _hash_file(target).mismatches(source)
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
        digest = _Digest()
        try:
            with os.fdopen(fd, "wb") as out, _open(origin, mirror is not None) as src:
                _stream(src, out, digest, source, origin, progress)
        except urllib.error.HTTPError as e:
            raise DataError(f"{source.file}: HTTP {e.code} {e.reason} from {origin}{stale}; {todo}") from e
        except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
            reason = getattr(e, "reason", e)
            raise DataError(f"{source.file}: could not read {origin}: {reason}{stale}; {todo}") from e
        bad = digest.mismatches(source)
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


def _expected_marker(task: Task) -> dict[str, object]:
    """The marker fields that must match for prepared data to be reused (everything except the time)."""
    return {
        "task": task.id,
        "prepare_sha256": _hash_file(task.file("prepare.py")).sha256.hexdigest(),
        "sources": {s.file: {"sha256": s.sha256, "md5": s.md5, "size": s.size} for s in task.data},
    }


def is_prepared(task: Task) -> bool:
    """True when the prepared data was built by this ``prepare.py`` from sources with these checksums."""
    try:
        marker = json.loads((prepared_dir(task) / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(marker, dict) and all(marker.get(k) == v for k, v in _expected_marker(task).items())


def data_status(task: Task) -> str:
    """A one-word state for ``bench tasks``: prepared, raw, partial (optional sources absent) or missing.

    Raw files are checked by presence and size only: hashing GBs for a listing is slow, and ``fetch`` verifies.
    """
    if is_prepared(task):
        return "prepared"

    def present(s: DataSource) -> bool:
        path = raw_dir(task) / s.file
        return path.is_file() and (s.size is None or path.stat().st_size == s.size)

    if not all(present(s) for s in task.data if s.required):
        return "missing"
    return "raw" if all(present(s) for s in task.data) else "partial"


def _run_prepare(task: Task, raw: Path, out: Path) -> None:
    """Run the task's ``prepare.py``, passing its output through and keeping the stderr tail for the error."""
    cmd = [sys.executable, str(task.file("prepare.py")), "--prepare", "--raw-dir", str(raw), "--data-dir", str(out)]
    tail: collections.deque[str] = collections.deque(maxlen=30)
    proc = subprocess.Popen(cmd, cwd=task.folder, stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            tail.append(line.decode(errors="replace"))
            print(tail[-1], end="", file=sys.stderr, flush=True)
        code = proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if code != 0:
        raise DataError(f"{task.id}: prepare.py exited with status {code}; the end of its stderr:\n{''.join(tail)}")


def prepare(task: Task, *, force: bool = False, progress: bool = True) -> Path:
    """Fetch the task's sources and build its prepared data, unless up to date (``force`` rebuilds anyway)."""
    final = prepared_dir(task)
    if not force and is_prepared(task):
        return final
    raw, mirror = raw_dir(task), mirror_root()
    absent: list[str] = []
    for source in task.data:
        try:
            fetch(source, raw, mirror=mirror, progress=progress)
        except DataError as e:
            if source.required:
                raise
            absent.append(source.file)
            print(f"warning: optional source skipped: {e}", file=sys.stderr)
    raw.mkdir(parents=True, exist_ok=True)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{task.name}.", suffix=".tmp", dir=final.parent))
    old: Path | None = None
    try:
        _run_prepare(task, raw, tmp)
        now = datetime.now(UTC).isoformat(timespec="seconds")
        marker = {**_expected_marker(task), "absent_optional": absent, "prepared_at": now}
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
