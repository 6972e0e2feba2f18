"""Fixtures shared by the task tests: the session's small generated data and trained baselines."""

from __future__ import annotations

import pytest

from tests.tasks.smalldata import SmallTasks


@pytest.fixture(scope="session")
def small(tmp_path_factory) -> SmallTasks:
    """Every task's prepared workspace, trained baseline and official evaluation, each made once per session."""
    return SmallTasks(tmp_path_factory)
