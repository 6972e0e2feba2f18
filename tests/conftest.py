"""Test isolation: every test session gets its own cache, workspaces and MLflow store.

Nothing a test does touches the user's ``~/.cache/1gc-7rc`` or the project's ``mlruns/``.
``BENCH_DATA_MIRROR`` is read by the tests that need real data; the others generate data.

Tiers (README "Tests"): ``pytest`` alone, like ``make test`` (``-m "not slow"``), runs the fast tier: the tests
marked ``slow`` are left out unless ``--runslow`` is given (``make test-slow`` is ``--runslow -m slow``, ``make
test-all`` ``--runslow``), and the session's header and summary say how to run them (:class:`_Tiers`), so that a
bare ``pytest`` (or ``pytest tests/bench``) never starts twenty minutes of whole benchmark runs by surprise. Each
tier has a ceiling per test (pytest-timeout, tests/tiers.py): a hung test fails with the timeout's message instead
of hanging CI. Each pytest-xdist worker is a pytest process with its own session folder (below); what costs the
same for every worker (the generated tasks' prepared data) is built once per test run in a folder the workers share
(:func:`with_prepared_data`). A test not marked ``slow`` that starts a whole benchmark run fails (tests/tiers.py),
so the fast tier stays fast by construction, not by care.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests import tiers

ROOT = Path(__file__).resolve().parents[1]
REAL_MIRROR = os.environ.get("BENCH_DATA_MIRROR")


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run the slow tier too (tests marked slow)")


_SESSION_DIR: Path | None = None
# what the pytest-xdist workers of one test run share (the prepared data of the generated tasks); made by the
# first pytest process of the run (the controller, or the only process without workers) and inherited by the
# workers through the environment, which they get from it when they start (after its pytest_configure)
SHARED_VAR = "BENCH_TESTS_SHARED_DIR"
_SHARED_MADE: Path | None = None


def pytest_configure(config):
    global _SESSION_DIR, _SHARED_MADE
    if not os.environ.get(SHARED_VAR):
        _SHARED_MADE = Path(tempfile.mkdtemp(prefix="bench-tests-shared-"))
        os.environ[SHARED_VAR] = str(_SHARED_MADE)
    base = _SESSION_DIR = Path(tempfile.mkdtemp(prefix="bench-tests-"))
    os.environ["BENCH_CACHE_DIR"] = str(base / "cache")
    os.environ["BENCH_MLRUNS_DIR"] = str(base / "mlruns")
    # each session (each xdist worker) its own evaluation lock: its runs never wait for other sessions' agents
    os.environ["BENCH_EVAL_LOCK"] = str(base / "evaluation.lock")
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    os.environ.pop("MLFLOW_RUN_ID", None)
    os.environ.pop("BENCH_TASKS_DIR", None)
    os.environ.pop("BENCH_TASKS_PATH", None)  # a user's task packs: the tests see the seven (and the packs they make)
    # the gateway reads an answer on for its usage after its CLI was killed (20 s by default): the tests' stalled mocks
    # never end theirs, and each run they end mid-request would wait that long (tests/bench/gateway/ sets its own)
    os.environ["BENCH_GATEWAY_DRAIN_S"] = "3"
    # one thread per torch process (the sandbox passes these on to the agent's scripts and the predictors): the suite
    # runs several workers on two cores, where torch's default of one thread per core made each process spin for the
    # others' cores (T6's train.py under load: 42 s of CPU with two threads, 10.5 s with one; a user's values win)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    if not config.pluginmanager.has_plugin("bench-tiers"):
        config.pluginmanager.register(_Tiers(), "bench-tiers")
    sys.addaudithook(tiers.audit)  # the fast tier's guard (tests/tiers.py), after the environment is the tests'
    tiers.wrap_runner()


def pytest_unconfigure(config):
    if _SESSION_DIR is not None:
        shutil.rmtree(_SESSION_DIR, ignore_errors=True)
    if _SHARED_MADE is not None:
        shutil.rmtree(_SHARED_MADE, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist adds the group to the node id
def pytest_collection_modifyitems(config, items):
    """The tests of the real campaign (``tests/campaign.py``: eight ``bench run``s, ~2 minutes) on one pytest-xdist
    worker (``--dist loadgroup``): three modules use it, and each worker that ran one of them built it again."""
    for item in items:
        defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {}).get("campaign", ())
        if any(d.func.__module__ == "tests.campaign" for d in defs):
            item.add_marker(pytest.mark.xdist_group("real-campaign"))
    # the files that hold slow tests first (a stable sort: files stay whole, so their module fixtures are made once):
    # pytest-xdist hands tests out in this order, so the whole runs of a minute or more start early and the
    # second-long tests fill the end, instead of one worker finishing a five-minute self-test while the others wait
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


class _Tiers:
    """Each tier's ceiling per test, and the slow tier left out without ``--runslow``.

    A plugin of its own (registered in :func:`pytest_configure`): this module already implements
    ``pytest_collection_modifyitems``, first, and this one must come last, after every conftest's marks
    (tests/tasks/conftest.py marks tests slow). A bare ``pytest`` (or ``pytest tests/bench``) deselects the slow
    tests, so that it selects what ``make test`` does (``pytest --co`` lists the fast tier); a slow test asked for by
    name (``pytest FILE::TEST``) or by mark (``-m slow``) without ``--runslow`` is skipped with the way to run it.
    """

    def __init__(self) -> None:
        self.left_out: int | None = None  # slow tests deselected or skipped here (None: not known in this process)
        self._by_mark = 0  # slow tests deselected by -m (make test's -m "not slow") before this plugin's turn

    def pytest_deselected(self, items):
        self._by_mark += sum(item.get_closest_marker("slow") is not None for item in items)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        runslow = config.getoption("--runslow")
        slow = []
        for item in items:
            is_slow = item.get_closest_marker("slow") is not None
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(tiers.SLOW_TIMEOUT_S if is_slow else tiers.FAST_TIMEOUT_S))
            if is_slow and not runslow:
                slow.append(item)
        self.left_out = len(slow) + self._by_mark
        if hasattr(config, "workeroutput"):  # a pytest-xdist worker: told to the controller, which collects nothing
            config.workeroutput["slow_left_out"] = self.left_out
        asked = config.option.markexpr or any("::" in str(arg) for arg in config.args)
        if not slow or asked:
            for item in slow:
                item.add_marker(pytest.mark.skip(reason=tiers.SLOW_SKIPPED))
        else:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if item.get_closest_marker("slow") is None]

    @pytest.hookimpl(optionalhook=True)  # pytest-xdist's: a worker is done (what it told is in node.workeroutput)
    def pytest_testnodedown(self, node, error):
        told = getattr(node, "workeroutput", {}).get("slow_left_out")
        if told is not None:
            self.left_out = max(self.left_out or 0, told)

    def pytest_report_header(self, config):
        if config.getoption("--runslow"):
            return ["slow tier: selected (--runslow)"]
        return [f"slow tier: left out (tests marked slow); {tiers.RUN_SLOW}"]

    def pytest_terminal_summary(self, terminalreporter, exitstatus, config):
        """How to run the rest, under the summary of a session that left the slow tier out."""
        if config.getoption("--runslow") or self.left_out == 0:
            return
        n = self.left_out
        count = f"{n} test{'' if n == 1 else 's'}" if n is not None else "tests marked slow"
        terminalreporter.write_line(f"slow tier not run ({count}); {tiers.RUN_SLOW}", yellow=True, bold=True)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """The fast tier's guard (tests/tiers.py), from the test's first fixture on: a session fixture that a test
    needs is set up in that test's setup."""
    tiers.begin(slow=item.get_closest_marker("slow") is not None)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    started = tiers.end()
    if started:
        pytest.fail(f"the fast tier starts no whole benchmark run; this test started {'; '.join(started)}: "
                    "mark it @pytest.mark.slow with the reason", pytrace=False)  # fmt: skip


@pytest.fixture(autouse=True)
def _no_state_leaks_between_tests():
    """Each test starts from the environment and MLflow tracking URI the one before it started from.

    A test that changes ``os.environ`` without monkeypatch (``mlflow.set_tracking_uri`` writes
    ``MLFLOW_TRACKING_URI``; a notebook runner sets ``JUPYTER_PATH``) or points MLflow's module-level API at its
    own store would otherwise decide where later tests, and the ``bench`` processes they start, read and write:
    the suite's result would depend on its order. Fixtures of a wider scope set up before this snapshot, so what
    they set stays for the tests that share them."""
    import sys

    env = dict(os.environ)
    uri = _fluent_uri()
    yield
    if "mlflow" in sys.modules and _fluent_uri() != uri:
        import mlflow

        mlflow.set_tracking_uri(uri)  # MLflow's own global and its tracer's state (the environment: below)
    if dict(os.environ) != env:
        os.environ.clear()
        os.environ.update(env)


def _fluent_uri() -> str | None:
    import sys

    if "mlflow" not in sys.modules:
        return None
    from mlflow.tracking._tracking_service import utils

    return utils._tracking_uri


@pytest.fixture
def real_mirror() -> Path:
    """The offline copy of the real datasets; the test is skipped without one."""
    if not REAL_MIRROR:
        pytest.skip("set BENCH_DATA_MIRROR to the datasets' offline mirror (docs/tasks-and-data.md) for the real data")
    return Path(REAL_MIRROR)


def write_etth1_like(path: Path, rows: int = 17420, seed: int = 0) -> Path:
    """Generated data with the exact schema of ETTh1.csv (date + 7 channels, hourly): NOT the real data."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    t = np.arange(rows)
    cols = {"date": pd.date_range("2016-07-01", periods=rows, freq="h").strftime("%Y-%m-%d %H:%M:%S")}
    for i, name in enumerate(["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"]):
        cols[name] = (
            5
            + i
            + 2 * np.sin(2 * np.pi * t / 24 + i)
            + 0.5 * np.sin(2 * np.pi * t / 168)
            + 0.3 * rng.standard_normal(rows)
        ).round(3)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(cols).to_csv(path, index=False)
    return path


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def generated_margins(toml: str) -> str:
    """A generated-data copy's task.toml without the score margins of its ``[scoring]`` (bench/rules/labels.py): a
    score on generated data means nothing against the real task's reference or its val/test gap (the label scan,
    which looks for the copy's own targets, stays)."""
    return re.sub(r"(?m)^(reference_margin|test_val_error_ratio) = .*\n", "", toml)


def generated_task(tmp_path: Path, monkeypatch, folder_name: str, write_raw) -> object:
    """A copy of the real task folder ``folder_name`` whose one data source is a generated file in a local mirror.

    The harness code path is the real one (mirror copy, checksum, prepare.py --prepare); only the bytes differ,
    and the task.toml copy declares their checksum. ``write_raw(path)`` writes the file at its mirror path.
    """
    import tomllib

    tasks = tmp_path / "tasks"
    folder = tasks / folder_name
    shutil.copytree(ROOT / "tasks" / folder_name, folder)
    (source,) = tomllib.loads((folder / "task.toml").read_text())["data"]
    mirror = tmp_path / "mirror"
    raw = write_raw(mirror / source["mirror"])
    toml = (folder / "task.toml").read_text()
    toml = re.sub(r'sha256 = "[0-9a-f]*"', f'sha256 = "{_sha256(raw)}"', toml)
    toml = re.sub(r'\nmd5 = "[0-9a-f]*"', "", toml)
    toml = re.sub(r"size = \d+", f"size = {raw.stat().st_size}", toml)
    (folder / "task.toml").write_text(generated_margins(toml))
    monkeypatch.setenv("BENCH_TASKS_DIR", str(tasks))
    monkeypatch.setenv("BENCH_DATA_MIRROR", str(mirror))
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    from bench.tasks import get_task

    return get_task(folder.name.split("_")[0])


def _digest(folder: Path) -> str:
    """sha256 over a folder's files (names and bytes; caches of compiled Python left out)."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(str(path.relative_to(folder)).encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def with_prepared_data(task) -> None:
    """Put in the test's cache the raw and prepared data that ``bench.tasks.data.prepare(task)`` would build there.

    Preparing T6 costs seconds of CPU, and ~90 tests start from it: it is built once per test run (by whichever
    pytest-xdist worker first needs it, under a lock, in the folder the workers share) and copied for each test,
    so that a test that damages its cache (as several do, on purpose) damages only its own. The build is keyed by
    the bytes of the task folder and of its mirror, and is ``bench data prepare`` itself in a process of its own
    (its output is no test's output): what the copy holds is what the test would have built."""
    from bench.tasks import data

    mirror = data.mirror_root()
    key = hashlib.sha256(f"{task.folder.name}:{_digest(task.folder)}:{_digest(mirror)}".encode()).hexdigest()[:16]
    shared = Path(os.environ[SHARED_VAR]) / "prepared" / key
    shared.parent.mkdir(parents=True, exist_ok=True)
    with open(shared.parent / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not shared.is_dir():
            build = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=shared.parent))
            shutil.copytree(
                task.folder, build / "tasks" / task.folder.name, ignore=shutil.ignore_patterns("__pycache__")
            )
            shutil.copytree(mirror, build / "mirror")
            env = {**os.environ, "BENCH_TASKS_DIR": str(build / "tasks"), "BENCH_DATA_MIRROR": str(build / "mirror"),
                   "BENCH_CACHE_DIR": str(build / "cache"), "BENCH_TASKS_PATH": ""}  # fmt: skip
            done = subprocess.run([sys.executable, "-m", "bench.cli", "data", "prepare", task.id],
                                  env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
            assert done.returncode == 0, f"bench data prepare {task.id}: {done.stdout}{done.stderr}"
            build.rename(shared)
    for target in (data.raw_dir(task), data.prepared_dir(task)):
        shutil.copytree(shared / "cache" / target.relative_to(data.cache_dir()), target, dirs_exist_ok=True)
    assert data.is_prepared(task)


@pytest.fixture
def generated_t6(request, tmp_path, monkeypatch):
    """The real T6 task on a generated ETTh1-shaped file (NOT the real data), its data prepared (built once per
    test run); a test marked ``fresh_data`` gets them unprepared, to see them being prepared."""
    task = generated_task(tmp_path, monkeypatch, "t6_time_series_forecasting", write_etth1_like)
    if request.node.get_closest_marker("fresh_data") is None:
        with_prepared_data(task)
    return task


def write_shakespeare_like(path: Path, chars: int = 30_000) -> Path:
    """Generated play-like text over the 65 characters of TinyShakespeare (NOT the real text)."""
    from tests.tasks.smalldata import fake_shakespeare

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(fake_shakespeare(chars), encoding="utf-8")
    return path


@pytest.fixture
def generated_t1(request, tmp_path, monkeypatch):
    """The real T1 task on generated text: 27,000 training and 3,000 validation characters (11 scored blocks),
    prepared as ``generated_t6`` is (``fresh_data``: unprepared)."""
    task = generated_task(tmp_path, monkeypatch, "t1_language_modeling", write_shakespeare_like)
    if request.node.get_closest_marker("fresh_data") is None:
        with_prepared_data(task)
    return task
