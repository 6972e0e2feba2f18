"""A small campaign made by REAL harness runs, in a store of its own, for tests that need a realistic MLflow store.

Two agents (``baseline``: the task's train.py unchanged; ``command``: a cut train.py with a random seed) x two tasks
(T6 and T5, the real task folders on GENERATED data: not results) x two repeats, each a real ``bench run`` (sandbox,
tracer, scorer, audit, MLflow) with a short budget, then the campaign summary with the report
(:mod:`analysis.summary`). Built once per test session (a minute or two of a loaded 2-core machine: the slow test
in ``tests/analysis/test_summary.py`` prints it) and kept in its own ``BENCH_MLRUNS_DIR``, so that the session's
other stores do not change what it holds.

Use it from a test module with ``from tests.campaign import campaign`` (the fixture) and
``campaign.activate(monkeypatch)`` to point ``bench.tracking.store`` and ``analysis`` at it, or ``campaign.env()``
for a subprocess (``bench ui``, a notebook kernel).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

AGENTS = ("baseline", "command")
TASKS = ("t6", "t5")
REPEATS = 2
BUDGET = "90s"  # every run ends well before it: the agents exit when their script is done
GRACE = "5"
T5_ROWS = 6000  # 4,800 training rows: the baseline's batch of 4,096 fits once per epoch (3,000 rows would not)
# the command agent: the task's train.py cut to a few steps (T6: 1 epoch of 5; T5: batch 256, 2 epochs of 40) with a
# random seed (its repeats differ, as real ones do; the baseline draws a seed per repeat too), one command for both
# tasks (each substitution matches in one task's train.py only)
COMMAND = (
    """sed 's/"epochs": 5,/"epochs": 1,/; s/"batch_size": 4096/"batch_size": 256/; s/"epochs": 40/"epochs": 2/' """
    """train.py | sed -E "s/(seed.: )[0-9]+/\\1$RANDOM/" > run_1.py && python run_1.py > run_1.log 2>&1\n"""
)
ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Campaign:
    """Where the campaign lives and what it holds (the results of its runs, the seconds it took to make)."""

    name: str
    base: Path
    results: list = field(default_factory=list)  # bench.result.RunResult of every run, in run order
    summary: object = None  # analysis.summary.Written
    experiment_id: str = ""
    seconds: float = 0.0

    def env(self) -> dict[str, str]:
        """The variables that point the harness and ``analysis`` at this campaign's store, tasks and data."""
        return {
            "BENCH_MLRUNS_DIR": str(self.base / "mlruns"),
            "BENCH_TASKS_DIR": str(self.base / "tasks"),
            "BENCH_DATA_MIRROR": str(self.base / "mirror"),
            "BENCH_CACHE_DIR": str(self.base / "cache"),
        }

    def log(self, agent: str, task: str) -> Path:
        """The output of the ``bench run`` of ``agent`` on ``task``."""
        return self.base / f"bench-run-{agent}-{task}.log"

    def activate(self, mp: pytest.MonkeyPatch) -> None:
        """Point this process at the campaign's store (undone with ``mp``); MLFLOW_TRACKING_URI must not override it."""
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        for key, value in self.env().items():
            mp.setenv(key, value)


def _write_t5(path: Path) -> Path:
    from tests.tasks.smalldata import make_covtype_like, write_covtype

    path.parent.mkdir(parents=True, exist_ok=True)
    return write_covtype(path, make_covtype_like(rows=T5_ROWS))


def _write_t6(path: Path) -> Path:
    from tests.conftest import write_etth1_like

    return write_etth1_like(path)


def _bench_run(camp: Campaign, agent: str, task: str, log: Path, summary: bool) -> subprocess.Popen:
    """``bench run`` of one agent on one task, both repeats, as a user types it."""
    argv = [sys.executable, "-m", "bench.cli", "run", "--agent", agent, "--task", task, "--repeats", str(REPEATS)]
    argv += ["--budget", BUDGET, "--grace", GRACE, "--campaign", camp.name, "--quiet"]
    argv += ["--agent-command", COMMAND] if agent == "command" else []
    argv += [] if summary else ["--no-summary"]
    # torch's default threads on a busy 2-core machine made T5's baseline 7x slower (measured): one thread
    env = {**os.environ, **camp.env(), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    with open(log, "w") as out:
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def build(base: Path, name: str | None = None) -> Campaign:
    """Run the grid into a fresh store under ``base`` and write its summary; the environment is restored after.

    The four ``bench run``s (agent x task) go side by side: on a loaded 2-core machine most of a short run is
    start-up, polling and evaluation, not training (measured: 8 runs one after the other 3.4 min, two processes
    1.7 min, at a load of 6). The last one (command on T5) writes the campaign summary when it ends, as ``bench run``
    does; the others are told not to (each would draw the report again); then this function writes the summary with
    the report once more, so that it holds every run whichever process ended last.
    """
    from analysis import summary
    from analysis.report import write_report
    from bench.pipeline.workspace import campaign_dir
    from bench.result import RunResult
    from bench.tasks import data
    from bench.tracking.writer import MlflowWriter
    from tests.conftest import generated_task

    started = time.perf_counter()
    camp = Campaign(name or f"campaign-{uuid.uuid4().hex[:6]}", base)
    with pytest.MonkeyPatch.context() as mp:
        camp.activate(mp)
        for folder, write in (("t6_time_series_forecasting", _write_t6), ("t5_tabular_prediction", _write_t5)):
            data.prepare(generated_task(base, mp, folder, write), progress=False)  # once, before four processes
        camp.activate(mp)  # generated_task pointed the cache at base/cache too; the store stays the campaign's
        camp.experiment_id = MlflowWriter(camp.name).experiment_id  # schema and experiment before four processes
        grid = [(agent, task) for agent in AGENTS for task in TASKS]
        procs = {
            (agent, task): _bench_run(camp, agent, task, camp.log(agent, task), summary=(agent, task) == grid[-1])
            for agent, task in grid
        }
        for (agent, task), proc in procs.items():
            if proc.wait(timeout=600) != 0:
                tail = camp.log(agent, task).read_text()[-3000:]
                raise RuntimeError(f"bench run --agent {agent} --task {task} exited {proc.returncode}:\n{tail}")
        camp.results = sorted(
            (RunResult.load(f) for f in campaign_dir(camp.name).glob("*/result.json")),
            key=lambda r: (r.run.agent, r.run.task, r.run.repeat),
        )
        camp.summary = summary.write_campaign(camp.name, render=write_report)
    camp.seconds = time.perf_counter() - started
    return camp


_BUILT: dict[str, Campaign] = {}  # one campaign per session, whichever test modules import the fixture


@pytest.fixture(scope="session")
def campaign(tmp_path_factory) -> Campaign:
    """The campaign (built on first use in the session); every run must have succeeded."""
    if "campaign" not in _BUILT:
        camp = build(tmp_path_factory.mktemp("campaign"))
        failed = [(r.run.label, r.status, r.reason) for r in camp.results if r.status != "success"]
        assert not failed, failed
        _BUILT["campaign"] = camp
    return _BUILT["campaign"]


if __name__ == "__main__":  # python -m tests.campaign DIR: build one by hand and say how long it took
    import tempfile

    where = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="campaign-"))
    c = build(where)
    print(f"{c.name} in {where}: {len(c.results)} runs in {c.seconds:.0f} s; env: {c.env()}")
    for r in c.results:
        print(f"{r.run.task} {r.run.agent} r{r.run.repeat} {r.status} {r.score} {r.wall_time_s:.0f} s")
    print(c.summary.line() if c.summary else "no summary")
