"""Fixtures shared by the task tests: the session's small generated data and trained baselines."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tasks.smalldata import SmallTasks


@pytest.fixture(scope="session")
def small(tmp_path_factory) -> SmallTasks:
    """Every task's prepared workspace, trained baseline and official evaluation, each made once per session."""
    return SmallTasks(tmp_path_factory)


def _task_name(request: pytest.FixtureRequest) -> str:
    """The task folder of the requesting per-task test file: its module's ``TASK_DIR``."""
    folder = getattr(request.module, "TASK_DIR", None)
    if folder is None:
        pytest.fail(f"{request.module.__name__} uses `fake` or `trained` without a TASK_DIR", pytrace=False)
    return Path(folder).name


@pytest.fixture(scope="module")
def fake(small, request) -> dict:
    """The test file's task (its ``TASK_DIR``) prepared on generated data, once per session: a copy of the task
    folder with data/ made by ``prepare.py --prepare`` from the generated raw files: {"ws", "raw", "stdout" (of
    --prepare), and what the task's generator returned: T2 "index" (what the zip holds), T3 "pairs" (the image and
    mask bytes; weights/ holds generated random-init weight files), T5 "table" (the rows), T6 "values" [17420, 7],
    ...}."""
    return small.prepared(_task_name(request))


@pytest.fixture(scope="module")
def trained(small, request) -> dict:
    """The test file's task's baseline trained with its tiny config on the CPU, once per session (the config is each
    task folder's smalldata.py TINY: a few steps or epochs): {"log", "checkpoints" (in the order written), "config",
    "started", "finished"}."""
    return small.trained(_task_name(request))


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist adds the group to the node id
def pytest_collection_modifyitems(config, items):
    """The tests of the session's small tasks are slow (each task's data prepared and baseline trained: minutes on 2
    cores; ``make test-all``), and a task's tests run on one pytest-xdist worker (``--dist loadgroup``), so that its
    small data are prepared and its baseline trained once per test run, not once per worker (``small`` is per
    session, and each worker is one)."""
    tasks = Path(__file__).resolve().parents[2] / "tasks"
    names = sorted((p.name for p in tasks.iterdir() if (p / "task.toml").is_file()), key=len, reverse=True)
    here = Path(__file__).resolve().parent
    for item in items:
        if here not in Path(str(item.path)).parents:
            continue
        name = next((n for n in names if n in item.nodeid or n[:2] == Path(str(item.path)).stem[5:7]), None)
        if "small" in getattr(item, "fixturenames", ()):
            # its task's small data prepared and its baseline trained in this process: minutes per task on 2 cores
            item.add_marker(pytest.mark.slow)
            if name is not None:
                item.add_marker(pytest.mark.xdist_group(f"small-{name}"))
