"""The task loader: a folder with a ``task.toml`` is a task.

A task folder is self-contained (``task.toml``, ``program.md``, the locked ``prepare.py`` and the
baseline ``train.py``, plus any other locked file its ``extra_locked`` names); nothing here knows
about a particular task. The built-in tasks share one locked file, ``tasks/task_helpers.py`` (the
checkpoint and logging helpers every ``prepare.py`` imports): each folder holds it as a link, so a
workspace and the evaluation copy its content like any locked file, and the folder's content hash
covers it. Which folders are tasks (the repository's ``tasks/``, ``BENCH_TASKS_PATH``, installed
packs) is :mod:`bench.tasks.packs`' business.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import InputError
from bench.tasks.direction import Direction

TASK_FILES = ("task.toml", "program.md", "prepare.py", "train.py")


@dataclass(frozen=True)
class DataSource:
    """One raw data file: where it comes from and how to recognise the genuine bytes."""

    file: str  # name in the raw data directory
    url: str  # canonical download address
    mirror: str  # path under BENCH_DATA_MIRROR
    sha256: str = ""
    md5: str = ""
    size: int | None = None
    required: bool = True
    # A partial copy (e.g. the mirror's subset), fetched only when the full file named here cannot
    # be fetched.
    substitute_for: str = ""
    # A folder of files instead of one file: a sha256sum-format list under the mirror, paths
    # relative to ``mirror``, whose own checksum is ``manifest_sha256``. Every listed file is copied
    # and verified.
    manifest: str = ""
    manifest_sha256: str = ""


@dataclass(frozen=True)
class Weights:
    """A pretrained-weights file the harness places in the workspace's ``weights/``.

    They are T3's DINOv3 backbones.

    The files are gated downloads, so the user installs them (``bench weights install``);
    ``sha256_prefix`` is the hash in the official file name, which torch.hub checks the same way.
    """

    file: str
    sha256_prefix: str
    description: str = ""
    source: str = ""  # where a user gets the file


@dataclass(frozen=True)
class TaskSource:
    """Where a task folder was found (:mod:`bench.tasks.packs`).

    The repository's own tasks, a folder on the task path (``BENCH_TASKS_PATH``, a campaign's
    ``tasks_path``) or an installed package's entry point.
    """

    kind: str = "built-in"  # "built-in", "path" or "entry-point"
    pack: str = ""  # the pack's name: the distribution's, pack.toml's, or the path entry's folder name
    version: str = ""  # the distribution's version or pack.toml's; "" when the pack has none
    origin: str = ""  # the path entry, or "dist==version (entry point NAME)"

    @property
    def builtin(self) -> bool:
        """True for the repository's own tasks."""
        return self.kind == "built-in"

    def describe(self) -> str:
        """One line for people: ``built-in``, ``pack NAME VERSION (path ENTRY)`` or ``(ORIGIN)``."""
        if self.builtin:
            return "built-in"
        where = f"path {self.origin}" if self.kind == "path" else self.origin
        return " ".join(p for p in ("pack", self.pack, self.version, f"({where})" if where else "") if p)


BUILT_IN = TaskSource()

PAPER_REFERENCE = "paper_reference"  # the name task.toml's ``reference_score`` gets (paper Table 4's Reference row)


@dataclass(frozen=True)
class Reference:
    """A known score on the task's eval split beyond the baseline.

    A top human entry, the state of the art, the paper's Reference row. The leaderboard reports how
    much of the baseline-to-reference gap an agent closes (MLRC-Bench's measure,
    :mod:`analysis.gap`), so each one names where its number comes from.
    """

    name: str  # "paper_reference", "top_human", "sota", ...
    score: float
    source: str = ""  # a citation or a URL: where the number was published or how it was measured


@dataclass(frozen=True)
class Task:
    """A benchmark task as declared by its ``task.toml``."""

    id: str
    name: str
    title: str
    dataset: str
    budget_minutes: float
    metric: str
    direction: Direction  # which way the metric improves (a str enum: "min" or "max")
    eval_split: str
    baseline_score: float
    folder: Path
    reference_score: float | None = None
    data: tuple[DataSource, ...] = field(default_factory=tuple)
    extra_locked: tuple[str, ...] = ()  # locked files besides prepare.py (T3's dinov3.py, task_helpers.py)
    weights: tuple[Weights, ...] = ()
    # files of the prepared data kept out of every workspace: the labels of a test-scored task
    # (paper rule 9); only the trusted scorer reads them
    held_out: tuple[str, ...] = ()
    source: TaskSource = BUILT_IN  # where the folder was found (bench.tasks.packs)
    # reference points beyond the baseline: ``reference_score`` (as "paper_reference") first,
    # then [[references]]
    references: tuple[Reference, ...] = ()
    gap_reference: str = ""  # the reference the gap closed is measured to ("": the first one)

    @property
    def reference(self) -> Reference | None:
        """The reference of the gap-closed measure.

        The one ``gap_reference`` names, else the first declared.
        """
        if self.gap_reference:
            return next(r for r in self.references if r.name == self.gap_reference)
        return self.references[0] if self.references else None

    @property
    def locked_files(self) -> tuple[str, ...]:
        """The files an agent must not change; the official evaluation uses the task's originals."""
        return ("prepare.py", *self.extra_locked)

    @property
    def budget_s(self) -> float:
        """The agent's budget in seconds."""
        return self.budget_minutes * 60.0

    @property
    def higher_is_better(self) -> bool:
        """True when a higher score is better (the task's direction is ``max``)."""
        return self.direction.higher_is_better

    def file(self, name: str) -> Path:
        """A file of the task's folder."""
        return self.folder / name


class TaskError(InputError, LookupError):
    """A task that does not exist or whose folder is malformed."""


def load_task(folder: Path) -> Task:
    """Read one task folder, checking that it has every file an agent workspace needs."""
    missing = [f for f in TASK_FILES if not (folder / f).is_file()]
    if missing:
        raise TaskError(f"task folder {folder} lacks {', '.join(missing)}")
    with open(folder / "task.toml", "rb") as f:
        raw = tomllib.load(f)
    extra = tuple(raw.get("extra_locked", ()))
    missing = [f for f in extra if not (folder / f).is_file()]
    if missing:
        raise TaskError(f"{folder}/task.toml names extra_locked files that do not exist: {', '.join(missing)}")
    try:
        direction = raw["direction"]
        if direction not in ("min", "max"):
            raise TaskError(f"{folder}/task.toml: direction must be 'min' or 'max', not {direction!r}")
        direction = Direction(direction)
        sources = tuple(DataSource(**d) for d in raw.get("data", []))
        names = {s.file for s in sources}
        orphans = [s.file for s in sources if s.substitute_for and s.substitute_for not in names]
        if orphans:
            raise TaskError(f"{folder}/task.toml: substitute_for names no [[data]] file (in {', '.join(orphans)})")
        return Task(
            id=raw["id"],
            name=folder.name,
            title=raw["title"],
            dataset=raw["dataset"],
            budget_minutes=float(raw["budget_minutes"]),
            metric=raw["metric"],
            direction=direction,
            eval_split=raw["eval_split"],
            baseline_score=float(raw["baseline_score"]),
            reference_score=raw.get("reference_score"),
            folder=folder.resolve(),
            data=sources,
            extra_locked=extra,
            weights=tuple(Weights(**w) for w in raw.get("weights", [])),
            held_out=tuple(raw.get("held_out", ())),
            references=(refs := _references(raw, folder)),
            gap_reference=_gap_reference(raw, refs, folder),
        )
    except (KeyError, TypeError) as e:
        raise TaskError(f"{folder}/task.toml is missing or has a malformed field: {e}") from e


def _references(raw: dict, folder: Path) -> tuple[Reference, ...]:
    """``reference_score`` (+ ``reference_source``) as "paper_reference", then [[references]]."""
    where = f"{folder}/task.toml"
    refs = []
    if raw.get("reference_score") is not None:
        refs.append(Reference(PAPER_REFERENCE, _finite(raw["reference_score"], where, "reference_score"),
                              str(raw.get("reference_source", ""))))  # fmt: skip
    for i, r in enumerate(raw.get("references", [])):
        label = f"[[references]] #{i + 1}"
        if not isinstance(r, dict) or set(r) - {"name", "score", "source"}:
            raise TaskError(f"{where}: {label} takes the keys name, score and source only")
        name, source = r.get("name"), r.get("source")
        if not isinstance(name, str) or not name or not name.replace("_", "").replace("-", "").isalnum():
            raise TaskError(f'{where}: {label} needs name = "top_human" (letters, digits, _ and -)')
        if not isinstance(source, str) or not source.strip():
            raise TaskError(f'{where}: {label} ({name}) needs source = "...": where the score was published')
        refs.append(Reference(name, _finite(r.get("score"), where, f"{label} ({name}) score"), source.strip()))
    names = [r.name for r in refs]
    if twice := sorted({n for n in names if names.count(n) > 1}):
        hint = f" ({PAPER_REFERENCE} is reference_score's)" if PAPER_REFERENCE in twice else ""
        raise TaskError(f"{where}: the reference {', '.join(twice)} is declared twice{hint}; rename one")
    return tuple(refs)


def _gap_reference(raw: dict, refs: tuple[Reference, ...], folder: Path) -> str:
    name = raw.get("gap_reference", "")
    if name and name not in {r.name for r in refs}:
        known = ", ".join(r.name for r in refs) or "none"
        raise TaskError(f"{folder}/task.toml: gap_reference = {name!r} names no declared reference (declared: {known})")
    return str(name)


def _finite(value: object, where: str, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TaskError(f"{where}: {what} must be a finite number, not {value!r}")
    return float(value)
