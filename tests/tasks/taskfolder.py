"""What every task test does with a task folder: copy it, run its prepare.py, import its modules.

A task folder is self-contained (its locked prepare.py is what agents read), so the tests drive it the way a
workspace does: as files in a folder, run as scripts or imported from there, never as a package.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

TASKS_DIR = Path(__file__).resolve().parents[2] / "tasks"
# the probes every task's scorer answers for an honest model with more than one scored batch (bench.scoring.checks)
PROBES = ["determinism", "history-independence", "batch-independence"]
# never copied into a test workspace: prepared data, checkpoints, installed weights, bytecode
_NOT_COPIED = shutil.ignore_patterns("data", "checkpoints", "weights", "__pycache__")


def copy_task(task_dir: Path, dest: Path) -> Path:
    """A fresh workspace: the task's files, without prepared data or checkpoints."""
    shutil.copytree(task_dir, dest, ignore=_NOT_COPIED)
    return dest


def run_prepare(workspace: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python prepare.py ARGS` in the workspace, as the harness and the agents run it."""
    return subprocess.run(
        [sys.executable, "prepare.py", *args], cwd=workspace, capture_output=True, text=True, timeout=timeout
    )


def last_json(proc: subprocess.CompletedProcess) -> dict:
    """The JSON line `prepare.py --eval` ends its output with (stderr in the message when there is none)."""
    lines = proc.stdout.strip().splitlines()
    assert lines, f"no stdout; stderr: {proc.stderr[-2000:]}"
    return json.loads(lines[-1])


@contextlib.contextmanager
def task_modules(workspace: Path) -> Iterator[tuple[ModuleType, ModuleType]]:
    """Import the workspace's prepare.py and train.py as `prepare` / `train`, and forget them afterwards.

    Every module of the folder (T3's dinov3.py, T4's molecules.py) is imported afresh from this workspace, so that
    two tests on two workspaces never share one: the same names exist in every task folder.
    """
    local = sorted({p.stem for p in Path(workspace).glob("*.py")} | {"prepare", "train"})
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(workspace)
        mp.syspath_prepend(str(workspace))
        mp.setattr(sys, "argv", ["train.py"])  # save_checkpoint() names checkpoints after sys.argv[0]
        mp.setattr(sys, "dont_write_bytecode", True)  # leave no __pycache__ in the task folder
        for name in local:
            mp.delitem(sys.modules, name, raising=False)
        try:
            yield importlib.import_module("prepare"), importlib.import_module("train")
        finally:
            for name in local:
                sys.modules.pop(name, None)
