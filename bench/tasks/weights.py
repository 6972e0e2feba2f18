"""Pretrained weights that a task provides to agents (paper §3.2: T3's two DINOv3 backbones).

The DINOv3 files are a gated download (Meta's licence form, or the gated Hugging Face repos), so the
harness cannot fetch them: the user downloads them once and ``bench weights install FILE...`` checks
and keeps them in ``<cache>/weights``. Each run then gets read-only copies in its workspace's
``weights/`` folder. The checks are the ones torch.hub makes (the sha256 of the file starts with the
hash in its official name) plus the task's own: its ``prepare.py --check-weights`` loads the file
into the exact architecture with ``strict=True``, so a converted or truncated file is refused at
install time rather than in the middle of an agent's run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.checksums import sha256
from bench.errors import InputError
from bench.paths import cache_dir
from bench.tasks.packs import all_tasks
from bench.tasks.registry import Task, Weights


class WeightsError(InputError, RuntimeError):
    """A weights file that is absent or is not the official file."""


def weights_dir() -> Path:
    """Where installed weights are kept (``<cache>/weights``)."""
    return cache_dir() / "weights"


def installed(w: Weights) -> Path | None:
    """Where the weights file is installed, or None when it is not."""
    path = weights_dir() / w.file
    return path if path.is_file() else None


def how_to_get(w: Weights) -> str:
    """One line saying what the file is, where to get it and how to install it."""
    return f"{w.file}: {w.description}. Get it from {w.source}, then run: bench weights install /path/to/{w.file}"


def for_task(task: Task) -> list[Path]:
    """The installed weight files of a task; a WeightsError says how to get the missing ones."""
    missing = [w for w in task.weights if installed(w) is None]
    if missing:
        raise WeightsError(
            f"{task.id} provides pretrained weights to agents, but {len(missing)} file(s) are not installed: "
            + "; ".join(how_to_get(w) for w in missing)
            + " (or run with --no-weights to let agents train without them; the run is then marked partial)"
        )
    return [weights_dir() / w.file for w in task.weights]


def _match(path: Path) -> tuple[Task, Weights]:
    for task in all_tasks():
        for w in task.weights:
            if w.file == path.name:
                return task, w
    known = [w.file for t in all_tasks() for w in t.weights]
    raise WeightsError(f"{path.name} is not a weights file any task uses; expected one of: {', '.join(known)}")


def check(path: Path, task: Task, w: Weights, *, hash_check: bool = True) -> dict:
    """Verify a file: the hash in its official name, then a strict load by the task's prepare.py.

    ``hash_check=False`` skips the first check only: torch.hub's naming convention says the name
    carries a sha256 prefix, but DINOv3's own loader does not verify it, so a genuine file could in
    principle differ.
    """
    digest = sha256(path)
    if hash_check and not digest.startswith(w.sha256_prefix):
        raise WeightsError(
            f"{path}: sha256 {digest[:16]}... does not start with {w.sha256_prefix}, the hash in the official "
            f"file name: the file is corrupt, truncated or not the official release ({w.source}). If you are sure "
            "it is the official file, install it with --no-hash-check (the strict architecture check still runs)"
        )
    proc = subprocess.run(
        [sys.executable, str(task.file("prepare.py")), "--check-weights", str(path.resolve())],
        cwd=task.folder,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [ln for ln in proc.stdout.strip().splitlines() if ln.startswith("{")]
    report = json.loads(lines[-1]) if lines else {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    if proc.returncode != 0 or "error" in report:
        raise WeightsError(f"{path}: does not load into the {task.id} architecture: {report.get('error')}")
    return {**report, "sha256": digest}


def install(path: Path, *, hash_check: bool = True) -> Path:
    """Check a user-supplied file and copy it into the weights cache (atomically).

    Returns the installed path.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise WeightsError(f"{path} does not exist")
    task, w = _match(path)
    check(path, task, w, hash_check=hash_check)
    dest = weights_dir()
    dest.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{w.file}.", suffix=".part", dir=dest)
    os.close(fd)
    try:
        shutil.copyfile(path, tmp)
        os.replace(tmp, dest / w.file)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest / w.file


def main(files: list[str], *, hash_check: bool = True) -> int:
    """``bench weights [install FILE...]``: install files, or list what each task needs and has."""
    status = 0
    for name in files:
        try:
            print(f"installed {install(Path(name), hash_check=hash_check)}")
        except WeightsError as e:
            print(f"error: {e}", file=sys.stderr)
            status = 1
    if files:
        return status
    rows = [(t, w) for t in all_tasks() for w in t.weights]
    if not rows:
        print("no task uses pretrained weights")
    for t, w in rows:
        where = installed(w)
        print(f"{t.id}  {w.file}  {'installed: ' + str(where) if where else 'MISSING'}")
        if not where:
            print(f"      {how_to_get(w)}")
    return 0
