"""Fixtures for the analysis tests: a store made by real ``bench run``s, a small synthetic store, notebooks.

Both stores live in the session's isolated MLflow store (tests/conftest.py) and are built once per
session: the real one costs a minute or two of CPU (four T6 runs on generated data), the synthetic one
a few seconds.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

# Two scripts in parallel (1 and 2 epochs, so the timeline has lanes and the anytime curve steps), then a third.
TWO_PARALLEL_THEN_ONE = r"""
sed 's/"epochs": 5/"epochs": 1/' train.py > run_1.py
sed 's/"epochs": 5/"epochs": 2/; s/"kernel_size": 25/"kernel_size": 13/' train.py > run_2.py
python run_1.py & python run_2.py & wait
sed 's/"epochs": 5/"epochs": 2/; s/"lr": 1e-3/"lr": 3e-3/' train.py > run_3.py
python run_3.py
"""
CRASHING = "echo 'x = 1/0' > run_1.py && python run_1.py"


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _generated_t6(base: Path, mp: pytest.MonkeyPatch):
    """The root conftest's ``generated_t6``, session-scoped: the real T6 folder on generated ETTh1-shaped data."""
    helpers = _module("bench_tests_root_conftest", ROOT / "tests" / "conftest.py")
    folder = base / "tasks" / "t6_time_series_forecasting"
    shutil.copytree(ROOT / "tasks" / "t6_time_series_forecasting", folder)
    csv = helpers.write_etth1_like(base / "mirror" / "ETTh1" / "ETTh1.csv")
    toml = (folder / "task.toml").read_text()
    toml = re.sub(r'sha256 = "[0-9a-f]*"', f'sha256 = "{helpers._sha256(csv)}"', toml)
    toml = re.sub(r'\nmd5 = "[0-9a-f]*"', "", toml)
    toml = re.sub(r"size = \d+", f"size = {csv.stat().st_size}", toml)
    (folder / "task.toml").write_text(helpers.generated_margins(toml))
    mp.setenv("BENCH_TASKS_DIR", str(base / "tasks"))
    mp.setenv("BENCH_DATA_MIRROR", str(base / "mirror"))
    mp.setenv("BENCH_CACHE_DIR", str(base / "cache"))


@pytest.fixture(scope="session")
def real_store(tmp_path_factory) -> str:
    """A campaign made by real ``bench run``s: baseline x1, command x3 (repeat 3 crashes). Returns its name."""
    from bench.cli import main

    campaign = f"analysis-real-{uuid.uuid4().hex[:6]}"
    common = ["--task", "t6", "--grace", "5", "--campaign", campaign, "--quiet"]
    with pytest.MonkeyPatch.context() as mp:
        _generated_t6(tmp_path_factory.mktemp("real-store"), mp)
        codes = [
            main(["run", "--agent", "baseline", "--budget", "3m", *common]),
            main(
                [
                    "run",
                    "--agent",
                    "command",
                    "--agent-command",
                    TWO_PARALLEL_THEN_ONE,
                    "--repeats",
                    "2",
                    "--budget",
                    "3m",
                    *common,
                ]
            ),
            main(
                [
                    "run",
                    "--agent",
                    "command",
                    "--agent-command",
                    CRASHING,
                    "--first-repeat",
                    "3",
                    "--budget",
                    "1m",
                    *common,
                ]
            ),
        ]
    assert codes == [0, 0, 1], codes  # the crashing repeat makes its `bench run` exit 1
    return campaign


@pytest.fixture(scope="session")
def synthetic_store() -> str:
    """A small generated campaign (2 agents x 2 tasks x 3 repeats, 4 scripts, 3 windows), tagged synthetic."""
    synthetic = _module("analysis_synthetic", HERE / "synthetic.py")
    campaign = f"analysis-synthetic-{uuid.uuid4().hex[:6]}"
    synthetic.generate(campaign, agents=2, tasks=2, repeats=3, scripts=4, evals=3, fail_every=5)
    return campaign


class Notebooks:
    """Run notebooks headless with the venv's python3 kernel, and read their outputs."""

    def __init__(self, spare: Path):
        self.spare = spare

    def execute(self, path: Path, timeout: int = 600):
        import nbclient
        import nbformat
        from jupyter_client.kernelspec import KernelSpecManager

        if "python3" not in KernelSpecManager().find_kernel_specs():  # a venv without ipykernel's data files
            from ipykernel.kernelspec import install

            install(prefix=str(self.spare))
            os.environ["JUPYTER_PATH"] = str(self.spare / "share" / "jupyter")
        nb = nbformat.read(path, as_version=4)
        client = nbclient.NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            allow_errors=False,
            resources={"metadata": {"path": str(path.parent)}},
        )
        client.execute()
        return nb

    @staticmethod
    def text(nb) -> str:
        """Every text output of an executed notebook, concatenated (for assertions)."""
        chunks = []
        for cell in nb.cells:
            for out in cell.get("outputs", []):
                data = out.get("data", {})
                chunks += [out.get("text", ""), str(data.get("text/markdown", "")), str(data.get("text/plain", ""))]
        return "\n".join(chunks)

    @staticmethod
    def images(nb) -> int:
        return sum("image/png" in out.get("data", {}) for cell in nb.cells for out in cell.get("outputs", []))


@pytest.fixture(scope="session")
def notebooks(tmp_path_factory) -> Notebooks:
    return Notebooks(tmp_path_factory.mktemp("jupyter"))


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist adds the group to the node id
def pytest_collection_modifyitems(config, items):
    """The tests of the real store on one pytest-xdist worker (``--dist loadgroup``): each worker would otherwise
    make its own (four T6 runs)."""
    for item in items:
        if "real_store" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("analysis-real-store"))
