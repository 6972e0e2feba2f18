"""Fixtures shared by the task tests: the session's small generated data and trained baselines."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tasks.smalldata import SmallTasks


@pytest.fixture(scope="session")
def small(tmp_path_factory) -> SmallTasks:
    """Every task's prepared workspace, trained baseline and official evaluation, each made once per session."""
    return SmallTasks(tmp_path_factory)


def pytest_collection_modifyitems(config, items):
    """A task's tests on one pytest-xdist worker (``--dist loadgroup``), so that its small data are prepared and its
    baseline trained once per test run, not once per worker (``small`` is per session, and each worker is one)."""
    tasks = Path(__file__).resolve().parents[2] / "tasks"
    names = sorted((p.name for p in tasks.iterdir() if (p / "task.toml").is_file()), key=len, reverse=True)
    here = Path(__file__).resolve().parent
    for item in items:
        if here not in Path(str(item.path)).parents:
            continue
        name = next((n for n in names if n in item.nodeid or n[:2] == Path(str(item.path)).stem[5:7]), None)
        if name is not None and "small" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(f"small-{name}"))
