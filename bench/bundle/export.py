"""``bench export CAMPAIGN BUNDLE``.

A campaign's MLflow runs and run directories as one bundle (:mod:`bench.bundle.archive`).

Why MLflow's public API and not ``mlflow-export-import``: that package's PyPI release (1.2.0)
writes with its own ``MlflowClient`` calls (here every write goes through
:mod:`bench.tracking.writer`, the one redacting writer), carries no traces, and installs
pytest and pytest-html as runtime dependencies. What a bundle needs of a run is a few public
calls (``search_runs``, ``get_metric_history``, ``download_artifacts``, ``search_traces``),
all in :mod:`bench.tracking.whole_runs`.

The run directories are copied less what makes them heavy and what any reader can rebuild: the
prepared data copy, the spool (its values are in MLflow), the agent's home and caches. The scored
checkpoints travel in ``eval/``, each as it was staged for the scorer (the checkpoint, the task's
locked files and the scripts of the checkpoint's time).
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import os
import shutil
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from bench import __version__, untrusted
from bench.bundle import archive as bundle
from bench.bundle import containment
from bench.pipeline import uploads
from bench.tracking import schema, store, whole_runs

# MLflow's progress bars and its note on a run without artifacts are noise in a command's output
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
logging.getLogger("mlflow.store.artifact.artifact_repo").setLevel(logging.WARNING)

# what of a run directory goes into a bundle: its top-level files, these folders whole, the
# workspace's scripts
RUN_FOLDERS = ("evidence", "eval")
WORKSPACE_SCRIPTS = "*.py"


@dataclass
class Exported:
    """What ``bench export`` wrote.

    The archive, its counts, and the runs whose directory was not found.
    """

    path: Path
    runs: int = 0
    run_folders: int = 0
    files: int = 0
    bytes: int = 0
    missing_folders: list[str] = field(default_factory=list)


def run_json(run, experiment_name: str) -> dict:
    """One MLflow run as plain JSON.

    Its identity, nesting, status, times, params, tags and every metric's history.
    """
    histories = whole_runs.full_histories(run.info.run_id, sorted(run.data.metrics))
    return {
        "run_id": run.info.run_id,
        "run_name": run.info.run_name,
        "experiment_name": experiment_name,
        "parent_run_id": run.data.tags.get(schema.PARENT),
        "status": run.info.status,
        "start_time": run.info.start_time,
        "end_time": run.info.end_time,
        "params": dict(run.data.params),
        "tags": dict(run.data.tags),
        "metrics": {
            key: [
                {"value": None if math.isnan(m.value) else m.value, "step": m.step, "timestamp": m.timestamp}
                for m in values
            ]
            for key, values in histories.items()
        },
    }


def copy_run_folder(src: Path, dest: Path) -> None:
    """The parts of a run directory a reader needs to re-check it.

    The module's docstring says which.
    """
    dest.mkdir(parents=True)
    for p in sorted(src.iterdir()):
        if p.is_file() and not p.is_symlink():
            shutil.copy2(p, dest / p.name)
    for name in RUN_FOLDERS:
        if (src / name).is_dir():
            shutil.copytree(src / name, dest / name, symlinks=True, ignore=_links)
    # the workspace's scripts are the agent's files: read through the one hostile-input boundary (a
    # link, a FIFO, a sparse or oversized file named *.py is left out, never followed, never
    # blocks), with the upload step's limits
    ws = src / "workspace"
    budget = untrusted.CopyBudget(uploads.TOTAL_BYTES)
    for p in sorted(ws.glob(WORKSPACE_SCRIPTS)) if ws.is_dir() else []:
        untrusted.copy_into(p.name, ws, dest / "workspace" / p.name, uploads.SCRIPT_LIMITS, budget)


def _links(folder: str, names: list[str]) -> list[str]:
    """Links are left out of a bundle.

    A bundle holds plain files: a link could point anywhere on the reader's disk.
    """
    return [n for n in names if os.path.islink(os.path.join(folder, n))]


def find_run_folder(run, campaign: str, runs_dir: Path | None) -> Path | None:
    """The run directory of an agent run.

    Where its ``bench.workspace`` tag says when that lies under the campaign's folder of run
    directories (or ``runs_dir``), else a folder of that name under one of them (a store moved from
    another machine). Never a folder elsewhere: a tag may come from someone else's bundle
    (``bench import``), and an export must not pack a private folder that a stranger's tag names.
    """
    from bench.pipeline.workspace import campaign_dir

    recorded = run.data.tags.get(schema.WORKSPACE)
    if not recorded:
        return None
    bases = [base for base in (runs_dir, campaign_dir(campaign)) if base]
    candidates = [Path(recorded)] if any(containment.inside(recorded, base) for base in bases) else []
    candidates += [base / Path(recorded).name for base in bases if Path(recorded).name not in ("", ".", "..")]
    return next(
        (c for c in candidates if (c / "result.json").is_file() and any(containment.inside(c, b) for b in bases)), None
    )


def export(campaign: str, archive: Path, *, runs_dir: Path | None = None, say=None) -> Exported:
    """Write the bundle of ``campaign`` (the store in force) to ``archive``.

    BundleError when there is no such campaign or the archive cannot be written. ``say``: a function
    given one line of progress per run.
    """
    say = say or (lambda line: None)
    archive = Path(archive)
    if archive.is_dir():
        raise bundle.BundleError(f"{archive} is a folder: name the archive to write, e.g. {campaign}{bundle.SUFFIX}")
    if not archive.parent.is_dir():
        raise bundle.BundleError(f"{archive.parent}: no such folder for the archive")
    exp, runs = whole_runs.campaign_runs(campaign)
    if exp is None:
        raise bundle.BundleError(f"no campaign {campaign!r} in the tracking store {store.tracking_uri()}")
    if not runs:
        raise bundle.BundleError(f"the campaign {campaign!r} has no runs in {store.tracking_uri()}: nothing to export")
    out = Exported(archive)
    with tempfile.TemporaryDirectory(prefix="bench-export-", dir=archive.parent) as tmp:
        top = Path(tmp) / f"{_slug(campaign)}-bundle"
        for sub in ("mlflow/runs", "mlflow/artifacts", "mlflow/traces", "runs"):
            (top / sub).mkdir(parents=True)
        (top / "mlflow" / "experiment.json").write_text(
            json.dumps({"name": exp.name, "tags": dict(exp.tags)}, indent=1) + "\n"
        )
        tasks: dict[str, str | list[str]] = {}
        for i, run in enumerate(runs, 1):
            data = run_json(run, exp.name)
            arts = top / "mlflow" / "artifacts" / run.info.run_id
            whole_runs.download_artifacts(run.info.run_id, arts)
            data["artifacts"] = sorted(p.relative_to(arts).as_posix() for p in arts.rglob("*") if p.is_file())
            if not data["artifacts"]:
                arts.rmdir()
            data["traces"] = []
            for trace in whole_runs.run_traces(exp.experiment_id, run.info.run_id):
                data["traces"].append(trace.info.trace_id)
                path = top / "mlflow" / "traces" / f"{trace.info.trace_id}.json"
                path.write_text(json.dumps(trace.to_dict(), indent=1, default=str) + "\n")
            data["run_folder"] = None
            if run.data.tags.get(schema.KIND) == schema.KIND_AGENT:
                data["run_folder"] = _run_folder(run, campaign, runs_dir, top, tasks, out)
            (top / "mlflow" / "runs" / f"{run.info.run_id}.json").write_text(json.dumps(data, indent=1) + "\n")
            out.runs += 1
            say(f"[{i}/{len(runs)}] {data['run_name']}")
        for rel, folder in _eval_parents(top):  # eval runs point at their agent run's folder (bundle.check compares)
            _set_folder(top / rel, folder)
        created = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        manifest = bundle.write_manifest(top, campaign=campaign, tasks=tasks, created=created, version=__version__)
        out.files = len(manifest["files"]) + 1
        partial = archive.with_name(archive.name + ".partial")
        with tarfile.open(partial, "w:gz") as tar:
            tar.add(top, arcname=top.name)
        partial.replace(archive)
    out.bytes = archive.stat().st_size
    return out


def _run_folder(run, campaign: str, runs_dir: Path | None, top: Path, tasks: dict, out: Exported) -> str | None:
    """Copy an agent run's directory into the bundle and note its task's folder hash.

    Returns its name in the bundle.
    """
    src = find_run_folder(run, campaign, runs_dir)
    if src is None:
        out.missing_folders.append(f"{run.info.run_name} ({run.data.tags.get(schema.WORKSPACE) or 'no workspace tag'})")
        return None
    name = src.name
    if (top / "runs" / name).exists():
        return name  # two agent runs of one directory (a record started over): one copy
    copy_run_folder(src, top / "runs" / name)
    out.run_folders += 1
    task, digest = run.data.tags.get(schema.TASK), run.data.tags.get(schema.TASK_SHA256)
    try:
        source = (json.loads((src / "result.json").read_text()).get("run") or {}).get("task_source") or {}
        digest = source.get("sha256") or digest
    except (OSError, ValueError, AttributeError, RecursionError):
        pass
    if task and digest:
        known = tasks.get(task)
        if known is None:
            tasks[task] = digest
        elif digest not in ([known] if isinstance(known, str) else known):  # runs of one task on different folders
            tasks[task] = sorted({*([known] if isinstance(known, str) else known), digest})
    return name


def _eval_parents(top: Path) -> list[tuple[str, str]]:
    """(eval run JSON, its agent run's folder) for every eval run whose parent has a folder here.

    Here: in the bundle.
    """
    runs = {p: json.loads(p.read_text()) for p in (top / "mlflow" / "runs").glob("*.json")}
    folders = {r["run_id"]: r.get("run_folder") for r in runs.values()}
    return [
        (p.relative_to(top).as_posix(), folders[r["parent_run_id"]])
        for p, r in runs.items()
        if r["tags"].get(schema.KIND) == schema.KIND_EVAL and folders.get(r.get("parent_run_id"))
    ]


def _set_folder(path: Path, folder: str) -> None:
    data = json.loads(path.read_text())
    data["run_folder"] = folder
    path.write_text(json.dumps(data, indent=1) + "\n")


def _slug(text: str) -> str:
    from bench.pipeline.workspace import _slug as slug

    return slug(text)


def main(campaign: str, archive: str, runs_dir: str | None, quiet: bool) -> int:
    """``bench export``: 0 written, 2 bad input (the message says what to do)."""
    say = None if quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    try:
        out = export(campaign, Path(archive), runs_dir=Path(runs_dir) if runs_dir else None, say=say)
    except bundle.BundleError as e:
        print(f"bench export: {e}", file=sys.stderr)
        return 2
    print(
        f"{out.path}: {out.runs} MLflow runs, {out.run_folders} run folders, {out.files} files, "
        f"{out.bytes / 1e6:.1f} MB"
    )
    for m in out.missing_folders:
        print(
            f"bench export: warning: the run folder of {m} was not found (--runs-dir DIR names where)", file=sys.stderr
        )
    return 0
