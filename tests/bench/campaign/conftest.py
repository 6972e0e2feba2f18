"""Campaign tests: the real T6 and T5 task folders on GENERATED data (NOT results) in one tasks folder, the
workspaces in the test's folder, and a helper that writes a campaign file."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

# the command agent of the campaign tests: each task's train.py cut to a few steps (each sed expression matches one
# task's CONFIG only), as in tests/campaign.py
CUT = (
    """sed 's/"epochs": 5/"epochs": 1/; s/"batch_size": 4096/"batch_size": 256/; s/"epochs": 40/"epochs": 2/' """
    "train.py > run_1.py && python run_1.py > run_1.log 2>&1"
)
T5_ROWS = 6000  # the baseline's batch of 4,096 fits once per epoch in the 4,800 training rows


@pytest.fixture
def task_folders(tmp_path, monkeypatch):
    """T6 and T5 (their generated data in a mirror, not prepared) as the only tasks; workspaces under the test's
    folder."""
    from tests.conftest import generated_task, write_etth1_like
    from tests.tasks.smalldata import make_covtype_like, write_covtype

    def write_t5(path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_covtype(path, make_covtype_like(rows=T5_ROWS))

    t6 = generated_task(tmp_path, monkeypatch, "t6_time_series_forecasting", write_etth1_like)
    t5 = generated_task(tmp_path, monkeypatch, "t5_tabular_prediction", write_t5)
    monkeypatch.setenv("BENCH_WORKSPACES_DIR", str(tmp_path / "workspaces"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # torch's threads on a busy 2-core machine
    return {"t6": t6, "t5": t5}


@pytest.fixture
def tasks(task_folders):
    """The same, with their data prepared (as a run would, once)."""
    from bench.tasks import data

    for task in task_folders.values():
        data.prepare(task, progress=False)
    return task_folders


def campaign_file(folder: Path, body: str, name: str | None = None) -> tuple[Path, str]:
    """A campaign file ``body`` (TOML, without its name) under a fresh campaign name; (path, name)."""
    name = name or f"camp-{uuid.uuid4().hex[:8]}"
    path = folder / f"{name}.toml"
    path.write_text(f'name = "{name}"\n{body}')
    return path, name
