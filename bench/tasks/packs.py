"""Which folders are tasks: the repository's seven, and task packs from outside the repository.

A lab adds its private tasks without editing this repository. Tasks are found, in this order:

1. built-in: every sub-folder with a ``task.toml`` of :func:`bench.paths.tasks_dir` (``tasks/``);
2. ``BENCH_TASKS_PATH``: folders separated by ``os.pathsep`` (``:``); each entry is a task folder
   itself or a folder of task folders; it may hold a ``pack.toml`` (``name = "..."``,
   ``version = "..."``) naming the pack;
3. a campaign's ``tasks_path`` key (:func:`add_search_path`, same entry meaning), so that
   ``bench campaign job`` processes, which read the campaign file again, find them too;
4. installed packages with an entry point in the group ``bench.tasks``: ``name = "pkg.module"`` (the
   module's folder is scanned like a path entry) or ``name = "pkg.module:function"`` (called with no
   arguments, it returns one path or several). The pack is the distribution: its name and version
   are recorded.

Ids are unique over all of them: a second folder declaring an id already taken (a pack shadowing a
built-in task, or two packs) is an error naming both sources, never a silent choice. The same
folder reached twice (the repository's ``tasks/`` on the path too) is one task. Every run records
its task's source and the folder's content hash (:func:`provenance`), so a result names exactly
what was run.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from bench import settings
from bench.checksums import tree_sha256
from bench.paths import tasks_dir
from bench.tasks.registry import Task, TaskError, TaskSource, load_task

ENV_VAR = settings.TASKS_PATH.name
ENTRY_POINT_GROUP = "bench.tasks"
PACK_FILE = "pack.toml"
# a task id names run directories, campaign run ids and MLflow tags, and lookups are lower-cased
ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]*\Z")

_search_path: list[tuple[Path, str]] = []  # (entry, where it was given): campaign tasks_path entries of this process


@dataclass(frozen=True)
class Found:
    """A task folder and where it was found."""

    folder: Path
    source: TaskSource


def add_search_path(entries: Iterable[str | os.PathLike], given_by: str) -> None:
    """Search ``entries`` too, in this process (a campaign's ``tasks_path``).

    ``given_by`` names them in errors.

    Checked at once: a missing folder or an id taken twice raises TaskError and adds nothing, so
    that one bad entry does not break every later task lookup of the process.
    """
    before = list(_search_path)
    known = {e for e, _ in _search_path}
    for entry in entries:
        path = Path(entry).expanduser().resolve()
        if path not in known:
            known.add(path)
            _search_path.append((path, given_by))
    try:
        all_tasks()
    except TaskError:
        _search_path[:] = before
        raise


def clear_search_path() -> None:
    """Forget the entries :func:`add_search_path` added (for tests and long-lived processes)."""
    _search_path.clear()


def _env_entries() -> list[tuple[Path, str]]:
    return [(entry.resolve(), ENV_VAR) for entry in settings.TASKS_PATH.get()]


def _task_folders(entry: Path) -> list[Path]:
    """``entry`` itself when it is a task folder, else its direct sub-folders that are."""
    if (entry / "task.toml").is_file():
        return [entry]
    return sorted(p for p in entry.iterdir() if (p / "task.toml").is_file())


def _path_source(entry: Path) -> TaskSource:
    name, version = entry.name, ""
    meta = entry / PACK_FILE
    if meta.is_file():
        try:
            raw = tomllib.loads(meta.read_text())
        except (OSError, ValueError) as e:
            raise TaskError(f'{meta} cannot be read ({e}): it holds name = "..." and version = "..."') from e
        name, version = str(raw.get("name") or name), str(raw.get("version") or "")
    return TaskSource("path", name, version, str(entry))


def _from_path(entry: Path, given_by: str) -> list[Found]:
    if not entry.is_dir():
        raise TaskError(
            f"{given_by} names {entry}, which is not a folder: fix the path or remove it "
            "(an entry is a task folder or a folder of task folders)"
        )
    folders = _task_folders(entry)
    if not folders:
        raise TaskError(
            f"{given_by} names {entry}, which holds no task: an entry is a task folder (with task.toml) or a "
            "folder of task folders"
        )
    source = _path_source(entry)
    return [Found(f.resolve(), source) for f in folders]


def _entry_point_paths(ep: importlib.metadata.EntryPoint, where: str) -> list[Path]:
    try:
        obj = ep.load()
        if ep.attr:
            got = obj()
            return [Path(got)] if isinstance(got, str | os.PathLike) else [Path(p) for p in got]
    except Exception as e:  # a broken third-party package: one line saying which, not its traceback
        raise TaskError(f"the task pack {where} cannot be loaded ({type(e).__name__}: {e}); fix or uninstall it") from e
    file = getattr(obj, "__file__", None)
    if file:
        return [Path(file).parent]
    return [Path(p) for p in getattr(obj, "__path__", [])]  # a namespace package: its folders


def _from_entry_points() -> list[Found]:
    out = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist
        name = (dist.metadata["Name"] if dist is not None else None) or ep.name
        version = dist.version if dist is not None else ""
        origin = f"{name}=={version} (entry point {ep.name} = {ep.value!r}, group {ENTRY_POINT_GROUP})"
        source = TaskSource("entry-point", name, version, origin)
        for path in _entry_point_paths(ep, origin):
            out += [replace(f, source=source) for f in _from_path(path.resolve(), f"the task pack {origin}")]
    return out


def discover() -> list[Found]:
    """Every task folder with its source.

    Built-in, ``BENCH_TASKS_PATH``, campaign ``tasks_path``, entry points.
    """
    root = tasks_dir()
    found = [Found(f.resolve(), TaskSource()) for f in (_task_folders(root) if root.is_dir() else [])]
    for entry, given_by in [*_env_entries(), *_search_path]:
        found += _from_path(entry, given_by)
    found += _from_entry_points()
    seen: dict[Path, Found] = {}
    for f in found:  # one folder reached twice is one task, from its first source
        seen.setdefault(f.folder, f)
    return list(seen.values())


def _where(task: Task) -> str:
    return f"{task.source.describe()} at {task.folder}"


def _undo_hint(task: Task) -> str:
    if task.source.kind == "entry-point":
        return f"uninstall the package {task.source.pack}"
    if task.source.kind == "path":
        return f"remove {task.source.origin} from {ENV_VAR} or the campaign's tasks_path"
    return "leave the built-in task alone"


def check_unique(tasks: list[Task]) -> None:
    """Task ids are valid and unique.

    TaskError naming both sources of a repeated id and what to do.
    """
    by_id: dict[str, Task] = {}
    for t in tasks:
        if not ID_PATTERN.match(t.id):
            raise TaskError(
                f"{t.folder}/task.toml: id {t.id!r} is not a task id: use lower-case letters, digits, '-' and '_' "
                f"(starting with a letter or digit) ({t.source.describe()})"
            )
        first = by_id.setdefault(t.id, t)
        if first is not t:
            raise TaskError(
                f"task id {t.id!r} is declared twice: by {_where(first)} and by {_where(t)}; give one of them "
                f"another id in its task.toml, or {_undo_hint(t)}"
            )


def all_tasks() -> list[Task]:
    """Every task, built-in first, each group ordered by id (t1 ... t7, then the packs' tasks)."""
    tasks = [replace(load_task(f.folder), source=f.source) for f in discover()]
    check_unique(tasks)
    return sorted(tasks, key=lambda t: (not t.source.builtin, t.id))


def get_task(key: str) -> Task:
    """Find a task by id (``t6``), number (``6``) or folder name.

    A folder name (``t6_time_series_forecasting``) counts when only one task folder has it: a
    pack's copy of a task may keep the original's folder name.
    """
    key = key.strip().lower()
    if key.isdigit():
        key = f"t{key}"
    tasks = all_tasks()
    for t in tasks:
        if t.id == key:
            return t
    named = [t for t in tasks if t.name.lower() == key]
    if len(named) == 1:
        return named[0]
    if named:
        ids = ", ".join(f"{t.id} ({_where(t)})" for t in named)
        raise TaskError(f"task folder name {key!r} is ambiguous: {ids}; give the task's id instead")
    known = ", ".join(t.id for t in tasks) or "none found in " + str(tasks_dir())
    raise TaskError(f"unknown task {key!r}; known tasks: {known} (packs: {ENV_VAR}, entry points {ENTRY_POINT_GROUP})")


def provenance(task: Task) -> dict[str, str]:
    """What a run records about its task.

    Its source and the folder's content hash (:func:`tree_sha256`).
    """
    s = task.source
    return {
        "kind": s.kind,
        "pack": s.pack,
        "version": s.version,
        "origin": s.origin,
        "folder": str(task.folder),
        "sha256": tree_sha256(task.folder),
    }


def task_for_run(task_id: str, recorded: dict | None) -> Task:
    """The task a run ran, for finishing or recording it later (``--resume``, ``bench record``).

    The folder its run.json/result.json recorded when it is still there, else the task of that id
    found now.
    """
    folder = Path((recorded or {}).get("folder") or "")
    if recorded and (folder / "task.toml").is_file():
        task = load_task(folder)
        if task.id == task_id:
            fields = ("kind", "pack", "version", "origin")
            source = TaskSource(*(str(recorded.get(k) or "") for k in fields))
            task = replace(task, source=source if source.kind else TaskSource())
            now = tree_sha256(folder)
            if recorded.get("sha256") and recorded["sha256"] != now:
                print(
                    f"[bench] task {task_id}: its folder {folder} changed since the run started (sha256 "
                    f"{recorded['sha256'][:12]} -> {now[:12]}); its files are used as they are now",
                    flush=True,
                )
            return task
    return get_task(task_id)
