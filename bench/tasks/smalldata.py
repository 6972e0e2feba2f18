"""A task folder's small GENERATED data (its optional ``smalldata.py``).

It is read for ``bench tasks check`` and the tests.

The contract (docs/extending.md, "Checking a task"): ``smalldata.py`` beside task.toml defines
``write_raw(raw)`` (small raw files with the real schema, what ``prepare.py --prepare --raw-dir``
reads), ``TINY`` (overrides of train.CONFIG so the baseline trains in seconds on a CPU and saves a
checkpoint), optionally ``VAL_SPLIT`` (the split its self-reported val_score is measured on; default
"val") and ``setup(workspace)`` (files a prepared workspace needs before training, e.g. T3's
generated weight files). The workspace builder copies only program.md, train.py and the locked
files, so this file never reaches an agent.

It is imported by path, not as a package (task folders are not packages), once per folder and
process: the tests reuse the same module object, so its helpers are defined once.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from bench.errors import InputError

FILE = "smalldata.py"

_loaded: dict[Path, ModuleType] = {}


class SmallDataError(InputError):
    """A smalldata.py that breaks the contract (a missing or malformed name)."""


@dataclass(frozen=True)
class SmallData:
    """How to run one task on small generated data."""

    write_raw: Callable[[Path], dict]  # writes the raw files into an empty folder; returns what tests check
    tiny: dict  # baseline CONFIG overrides: a few steps on a CPU, at least one scored checkpoint
    val_split: str  # the split the baseline's self-reported val_score is measured on (prepare.py's name for it)
    setup: Callable[[Path], None] | None = None  # files a prepared workspace needs before training (T3's weights)


def module(folder: Path) -> ModuleType:
    """The folder's smalldata.py as a module (loaded once; FileNotFoundError without one)."""
    path = (Path(folder) / FILE).resolve()
    if path not in _loaded:
        if not path.is_file():
            raise FileNotFoundError(path)
        spec = importlib.util.spec_from_file_location(f"_smalldata_{path.parent.name}", path)
        loaded = importlib.util.module_from_spec(spec)
        written, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ in the task folder
        try:
            spec.loader.exec_module(loaded)
        finally:
            sys.dont_write_bytecode = written
        _loaded[path] = loaded
    return _loaded[path]


def load(folder: Path) -> SmallData:
    """The folder's small-data contract, checked.

    SmallDataError names what is missing; FileNotFoundError when the folder has no smalldata.py.
    """
    mod = module(folder)
    write_raw, tiny = getattr(mod, "write_raw", None), getattr(mod, "TINY", None)
    val_split, setup = getattr(mod, "VAL_SPLIT", "val"), getattr(mod, "setup", None)
    problems = []
    if not callable(write_raw):
        problems.append("define write_raw(raw: Path) writing the small raw files into the folder `raw`")
    if not isinstance(tiny, dict):
        problems.append("define TINY: a dict of train.CONFIG overrides that train a few steps on a CPU")
    if not isinstance(val_split, str) or not val_split:
        problems.append("VAL_SPLIT must be prepare.py's name of the validation split (a str)")
    if setup is not None and not callable(setup):
        problems.append("setup must be a function setup(workspace: Path)")
    if problems:
        raise SmallDataError(f"{Path(folder) / FILE}: " + "; ".join(problems))
    return SmallData(write_raw, dict(tiny), val_split, setup)
