"""Test isolation: every test session gets its own cache, workspaces and MLflow store.

Nothing a test does touches the user's ``~/.cache/1gc-7rc`` or the project's ``mlruns/``.
``BENCH_DATA_MIRROR`` is read by the tests that need real data; the others generate data.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REAL_MIRROR = os.environ.get("BENCH_DATA_MIRROR")


_SESSION_DIR: Path | None = None


def pytest_configure(config):
    global _SESSION_DIR
    base = _SESSION_DIR = Path(tempfile.mkdtemp(prefix="bench-tests-"))
    os.environ["BENCH_CACHE_DIR"] = str(base / "cache")
    os.environ["BENCH_MLRUNS_DIR"] = str(base / "mlruns")
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    os.environ.pop("MLFLOW_RUN_ID", None)
    os.environ.pop("BENCH_TASKS_DIR", None)
    os.environ.pop("BENCH_TASKS_PATH", None)  # a user's task packs: the tests see the seven (and the packs they make)
    # the gateway reads an answer on for its usage after its CLI was killed (20 s by default): the tests' stalled mocks
    # never end theirs, and each run they end mid-request would wait that long (test_gateway.py sets its own)
    os.environ["BENCH_GATEWAY_DRAIN_S"] = "3"


def pytest_unconfigure(config):
    if _SESSION_DIR is not None:
        shutil.rmtree(_SESSION_DIR, ignore_errors=True)


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
        pytest.skip("set BENCH_DATA_MIRROR to a folder laid out like ../shared/data to run against the real data")
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
    (folder / "task.toml").write_text(toml)
    monkeypatch.setenv("BENCH_TASKS_DIR", str(tasks))
    monkeypatch.setenv("BENCH_DATA_MIRROR", str(mirror))
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    from bench.tasks import get_task

    return get_task(folder.name.split("_")[0])


@pytest.fixture
def generated_t6(tmp_path, monkeypatch):
    """The real T6 task on a generated ETTh1-shaped file (NOT the real data)."""
    return generated_task(tmp_path, monkeypatch, "t6_time_series_forecasting", write_etth1_like)


def write_shakespeare_like(path: Path, chars: int = 30_000) -> Path:
    """Generated play-like text over the 65 characters of TinyShakespeare (NOT the real text)."""
    from tests.tasks.smalldata import fake_shakespeare

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(fake_shakespeare(chars), encoding="utf-8")
    return path


@pytest.fixture
def generated_t1(tmp_path, monkeypatch):
    """The real T1 task on generated text: 27,000 training and 3,000 validation characters (11 scored blocks)."""
    return generated_task(tmp_path, monkeypatch, "t1_language_modeling", write_shakespeare_like)
