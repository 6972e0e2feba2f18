"""What every task test does with a task folder: copy it, run its prepare.py, import its modules.

A task folder is self-contained (its locked prepare.py is what agents read), so the tests drive it the way a
workspace does: as files in a folder, run as scripts or imported from there, never as a package.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from bench.tasks import load_task

TASKS_DIR = Path(__file__).resolve().parents[2] / "tasks"
# the probes every task's scorer answers for an honest model with more than one scored batch (bench.scoring.checks)
PROBES = ["determinism", "history-independence", "batch-independence"]
# the name of the candidate inside an evaluation folder (bench.pipeline.evaluate.CHECKPOINT)
CHECKPOINT = "checkpoint.pt"
# never copied into a test workspace: prepared data, checkpoints, installed weights, bytecode, and the small-data
# generator, which no real workspace holds either (bench/pipeline/workspace.py copies only the task's named files)
_NOT_COPIED = shutil.ignore_patterns("data", "checkpoints", "weights", "__pycache__", "smalldata.py")


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
    """The JSON line `prepare.py --eval` (or the scorer) ends its output with (stderr in the message when none)."""
    lines = proc.stdout.strip().splitlines()
    assert lines, f"no stdout; stderr: {proc.stderr[-2000:]}"
    return json.loads(lines[-1])


def with_feed(task_dir: Path, dest: Path, feed: int) -> Path:
    """A copy of the task folder whose prepare.py feeds the scorer ``feed`` samples a batch (the one line
    ``FEED_BATCH_SIZE = N`` changed), so that a test sees several batches, and batches of other shapes, on small
    data; the folder itself when ``feed`` is the task's own."""
    source = (task_dir / "prepare.py").read_text(encoding="utf-8")
    (line,) = re.findall(r"^FEED_BATCH_SIZE = \d+\n", source, flags=re.M)
    if line == f"FEED_BATCH_SIZE = {feed}\n":
        return task_dir
    copy = shutil.copytree(task_dir, dest, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "prepare.py").write_text(source.replace(line, f"FEED_BATCH_SIZE = {feed}\n"), encoding="utf-8")
    return copy


def expected_probes(n_batches: int) -> list[str]:
    """The probes an honest model passes when the scorer fed it ``n_batches`` batches.

    History independence replays stretches of the feed that start AFTER its first batch (bench.scoring.checks): a
    scorer that fed a single batch has none to replay, so it answers only determinism and batch independence.
    """
    return [p for p in PROBES if n_batches > 1 or p != "history-independence"]


def stage_eval(folder: Path, task_dir: Path, checkpoint: Path, scripts: dict[str, str | Path] | None = None) -> Path:
    """An evaluation folder as bench.pipeline.evaluate.stage builds one, for tests that stage without a workspace.

    The harness never scores the workspace's copies of the locked files: the folder holds the task's ORIGINALS
    (prepare.py and task.toml's ``extra_locked``, e.g. T3's dinov3.py, T4's molecules.py), the agent's scripts and
    the candidate as checkpoint.pt, and nothing else. ``scripts`` maps a file name to a file to copy (a Path) or to
    the script's text (a str); by default the task's own train.py.
    """
    folder.mkdir(parents=True)
    for name in load_task(task_dir).locked_files:
        shutil.copyfile(task_dir / name, folder / name)
    for name, script in (scripts if scripts is not None else {"train.py": task_dir / "train.py"}).items():
        if isinstance(script, Path):
            shutil.copyfile(script, folder / name)
        else:
            (folder / name).write_text(script, encoding="utf-8")
    shutil.copyfile(checkpoint, folder / CHECKPOINT)
    return folder


def run_scorer(task_dir: Path, data_dir: Path, eval_dir: Path, script: str = "train.py") -> tuple[int, dict]:
    """The trusted scorer on a staged folder, on the CPU and unsandboxed: (exit status, its JSON line).

    Run as bench.pipeline.evaluate.evaluate runs it: `python -I -m bench.scoring.scorer` (-I: nothing of the
    working directory on sys.path) from the folder's parent, so the scorer imports nothing the folder holds.
    """
    cmd = [sys.executable, "-I", "-m", "bench.scoring.scorer", "--task-dir", str(task_dir), "--data-dir", str(data_dir)]
    cmd += ["--eval-dir", str(eval_dir), "--checkpoint", CHECKPOINT, "--script", script, "--device", "cpu"]
    proc = subprocess.run([*cmd, "--unsandboxed"], cwd=eval_dir.parent, capture_output=True, text=True, timeout=600)
    return proc.returncode, last_json(proc)


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
