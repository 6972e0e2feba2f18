"""What the adversarial and audit suites share: the honest agent's command, a guard over everything outside the
workspace, and a `command`-agent run of T6 (or T1) through the real pipeline."""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from pathlib import Path

import psutil

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


class PeakRSS:
    """The harness process's resident memory sampled in a thread while the block runs: ``base`` at the start,
    ``peak`` the largest sample (every ``every`` seconds), for the tests that bound what an agent can make the
    harness hold."""

    def __init__(self, every: float = 0.2) -> None:
        self.every, self.me, self.done = every, psutil.Process(), threading.Event()
        self.base = self.peak = self.me.memory_info().rss

    def __enter__(self) -> PeakRSS:
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self) -> None:
        while not self.done.wait(self.every):
            self.peak = max(self.peak, self.me.memory_info().rss)

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()
        self.peak = max(self.peak, self.me.memory_info().rss)
