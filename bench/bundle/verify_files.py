"""What ``bench verify`` reads of a finished run, found in this copy of its directory.

A run directory may have moved since it ran (a bundle, an imported campaign): ``result.json`` holds
the paths of the machine that ran it. These functions find the task folder whose content hash is the
recorded one, the files every finished run keeps, each scored checkpoint and the recorded snapshots
of the scripts, and name what is gone or altered. The re-scoring and the re-audit are
:mod:`bench.bundle.verify`'s.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from bench.checksums import tree_sha256
from bench.pipeline import codetime, evaluate
from bench.result import RunResult
from bench.tasks import Task, all_tasks

# files a finished run directory always holds, beside the candidates' own (checkpoints, code
# snapshots)
REQUIRED = ("run.json", "evidence/inputs.json", "evidence/manifest-start.json", "evidence/manifest-end.json")


def match_task(result: RunResult) -> tuple[Task | None, str]:
    """(the task folder whose content hash is the recorded one, "") or (None, why there is none)."""
    want = str((result.run.task_source or {}).get("sha256") or "")
    found = [t for t in all_tasks() if t.id == result.run.task]
    for task in found:
        if want and tree_sha256(task.folder) == want:
            return task, ""
    if not want:
        return None, f"result.json records no task folder hash for {result.run.task}: the task cannot be matched"
    if not found:
        return None, f"no task folder {result.run.task} here (recorded sha256 {want[:12]}): point BENCH_TASKS_DIR at it"
    now = ", ".join(f"{t.folder} has {tree_sha256(t.folder)[:12]}" for t in found)
    return None, f"task folder {result.run.task} differs from the recorded hash {want[:12]}: {now}"


def missing_files(run_dir: Path, result: RunResult) -> list[str]:
    """The files every finished run keeps that are gone.

    Arrivals and code records: once a checkpoint was scored.
    """
    need = [*REQUIRED, *(("evidence/arrivals.jsonl", "evidence/code.jsonl") if _scored(result) else ())]
    return [f"missing: {name} (the run directory kept it)" for name in need if not (run_dir / name).is_file()]


def _scored(result: RunResult) -> bool:
    return any(e.official.raw.get("checkpoint_sha256") for e in result.evaluations)


def local_checkpoint(run_dir: Path, result: RunResult, recorded: str, staged: str = "") -> Path:
    """Where a recorded checkpoint lies in this copy of the run directory.

    result.json holds the paths of the machine that ran it: the same place relative to the
    workspace, else by name under ``checkpoints/``, else the copy the run's evaluation staged
    (``eval/<folder>/checkpoint.pt``: the bytes it scored, checked by their sha256 as well). The
    workspace's place when none is there (named as missing).
    """
    ws = run_dir / "workspace"
    try:
        rel = Path(recorded).relative_to(result.workspace)
    except ValueError:
        rel = Path("checkpoints") / Path(recorded).name
    copy = run_dir / "eval" / Path(staged).name / evaluate.CHECKPOINT if staged else None
    for path in (ws / rel, ws / "checkpoints" / Path(recorded).name, copy):
        if path is not None and path.is_file():
            return path
    return ws / rel


def snapshot(run_dir: Path, digest: str) -> codetime.Snapshot:
    """The recorded snapshot of the scripts (``evidence/code/<digest>.json``).

    Checked against its own name (the sha256 of its text); OSError naming the file when it is gone
    or altered.
    """
    path = run_dir / "evidence" / codetime.CODE_DIR / f"{digest}.json"
    text = path.read_bytes()
    if hashlib.sha256(text).hexdigest() != digest:
        raise OSError(f"evidence/code/{digest[:12]}.json is not the snapshot recorded (its sha256 differs)")
    d = json.loads(text)
    return codetime.Snapshot(digest, dict(d["files"]), dict(d.get("left_out") or {}), d.get("incomplete"))
