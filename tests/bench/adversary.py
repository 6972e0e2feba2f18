"""What the adversarial and audit suites share: the honest agent's command, a guard over everything outside the
workspace, and a `command`-agent run of T6 (or T1) through the real pipeline."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

from bench.paths import ROOT, cache_dir, mlruns_dir, workspaces_dir
from bench.result import RunResult
from bench.runner import RunSpec, run

# The honest part every case shares: the baseline cut to one epoch, as its own script.
HONEST = 'sed \'s/"epochs": 5/"epochs": 1/\' train.py > run_1.py && python run_1.py > run_1.log 2>&1\n'


def _hashes(root: Path, skip: tuple[Path, ...] = ()) -> dict[str, str]:
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and not any(path.is_relative_to(s) for s in skip):
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


class Guard:
    """What must not change while an adversarial agent runs, and where its planted files must not appear."""

    def __init__(self, task) -> None:
        self.task = task
        self.sibling = workspaces_dir() / "adversarial" / "t6-earlier-run"
        (self.sibling / "workspace").mkdir(parents=True, exist_ok=True)
        (self.sibling / "result.json").write_text(json.dumps({"status": "success", "score": 0.4}))
        mlruns_dir().mkdir(parents=True, exist_ok=True)
        (mlruns_dir() / "sentinel.txt").write_text("the store's own file\n")
        self.before = self.snapshot()

    def snapshot(self) -> dict[str, dict[str, str]]:
        return {
            "cache": _hashes(cache_dir(), skip=(workspaces_dir(),)),
            "tasks": _hashes(self.task.folder),
            "sibling": _hashes(self.sibling),
            "store": {"sentinel.txt": hashlib.sha256((mlruns_dir() / "sentinel.txt").read_bytes()).hexdigest()},
        }

    def check(self, result: RunResult, marker: str) -> None:
        assert self.snapshot() == self.before, "something outside the workspace changed"
        ws = Path(result.workspace)
        for root in (cache_dir(), self.task.folder, mlruns_dir(), ROOT / "bench", Path(result.run_dir)):
            planted = [p for p in root.rglob(f"*{marker}*") if not p.is_relative_to(ws)]
            assert not planted, f"planted outside the workspace: {planted}"


def _guard(task) -> Guard:
    from bench.tasks import data

    data.prepare(task, progress=False)  # the cache exists before the agent does
    return Guard(task)


def _run(task, command: str, budget_s: float = 120) -> RunResult:
    return run(
        RunSpec(
            task=task,
            agent="command",
            campaign=f"adv-{uuid.uuid4().hex[:6]}",
            budget_s=budget_s,
            grace_s=3,
            options={"command": command},
            console=False,
        )
    )


_HONEST: dict[str, RunResult] = {}  # the generated data are the same in every test: one honest run for all
