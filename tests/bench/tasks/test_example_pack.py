"""The example pack of docs/extending.md, installed as a user installs it and run end to end.

``pip install`` (no index, no dependencies: offline) of a copy of ``docs/example-pack/`` into a folder on
``PYTHONPATH``; then, as a user's shell runs them, ``bench tasks`` lists its task, ``bench run --agent baseline``
runs it sandboxed and scores it with the trusted scorer, and ``bench report`` shows its gap closed (MLRC-Bench's
measure) against the reference its task.toml declares. The expected gap is worked out here from the recorded score
and the task.toml's numbers, not read from the code under test.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import pytest

from bench.result import RunResult
from bench.sandbox.bwrap import probe
from bench.tracking import schema, store

ROOT = Path(__file__).resolve().parents[3]
PACK = ROOT / "docs" / "example-pack"
TASK = PACK / "bench_example_pack" / "spirals"
BENCH = Path(sys.executable).with_name("bench")


def test_the_example_task_follows_the_folder_contract():
    """Read without installing: the loader takes it, its reference has a source, its test split is held out."""
    from bench.tasks import load_task

    task = load_task(TASK)
    assert (task.id, task.direction, task.eval_split, task.held_out) == (
        "spirals",
        "max",
        "test",
        ("test_x.npy", "test_y.npy"),
    )
    assert task.data == ()  # prepare.py generates its data: nothing to download
    assert task.reference.name == "label_noise_ceiling" and task.reference.score == 0.95 and task.reference.source
    assert [r.name for r in task.references] == ["label_noise_ceiling", "knn_15"]
    toml = tomllib.loads((PACK / "pyproject.toml").read_text())
    assert toml["project"]["entry-points"]["bench.tasks"] == {"example": "bench_example_pack"}


def test_train_and_val_are_the_same_everywhere_and_the_test_points_cannot_be_regenerated(tmp_path):
    """Two preparations: train and val byte for byte equal (seeded), the held-out test points not (fresh entropy),
    so the locked prepare.py in every workspace cannot rebuild what it is scored on."""
    spec = importlib.util.spec_from_file_location("example_spirals_prepare", TASK / "prepare.py")
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    for name in ("a", "b"):
        prepare.prepare(None, str(tmp_path / name))
    same = lambda f: (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()  # noqa: E731
    assert all(same(f"{s}_{p}.npy") for s in ("train", "val") for p in ("x", "y"))
    assert not same("test_x.npy")
    x, y = prepare.load_split("test", str(tmp_path / "a"))
    assert tuple(x.shape) == (5000, 2) and set(y.tolist()) == {0, 1}


def _bench(args: list[str], env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(BENCH), *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """The pack pip-installed into a folder of its own; the environment a shell would have with it on PYTHONPATH."""
    base = tmp_path_factory.mktemp("example-pack")
    src = base / "src"  # a copy: a build writes build/ and *.egg-info beside pyproject.toml
    shutil.copytree(PACK, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    site = base / "site"
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(site), str(src)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert pip.returncode == 0, f"pip install of the example pack failed:\n{pip.stdout}\n{pip.stderr}"
    env = {**os.environ, "PYTHONPATH": str(site), "BENCH_CACHE_DIR": str(base / "cache")}
    env["BENCH_MLRUNS_DIR"] = str(base / "mlruns")
    env.pop("BENCH_TASKS_PATH", None)
    env.pop("MLFLOW_TRACKING_URI", None)  # its own store (an earlier test of the session may have left one set)
    return {"env": env, "base": base, "site": site}


def test_bench_tasks_lists_the_installed_pack(installed):
    out = _bench(["tasks"], installed["env"], timeout=120)
    assert out.returncode == 0, out.stderr
    line = next(line for line in out.stdout.splitlines() if line.startswith("spirals"))
    assert "pack bench-example-pack 0.1.0" in line and "accuracy" in line


@pytest.mark.slow
@pytest.mark.skipif(probe() is not None, reason=f"no usable sandbox here: {probe()}")
def test_the_installed_pack_runs_end_to_end_and_its_gap_closed_is_reported(installed, monkeypatch):
    env, base = installed["env"], installed["base"]
    campaign = f"example-pack-{uuid.uuid4().hex[:6]}"
    run = _bench(
        ["run", "--agent", "baseline", "--task", "spirals", "--budget", "2m", "--grace", "5", "--campaign", campaign,
         "--quiet", "--no-summary"],
        env,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    (result_file,) = (base / "cache" / "workspaces" / campaign).glob("*/result.json")
    result = RunResult.load(result_file)
    assert result.status == "success" and result.sandboxed is True, result.reason
    score = result.score
    # train.py's expected accuracy as task.toml records it (0.733); 5,000 fresh test points: a standard error of 0.0063
    assert abs(score - 0.733) < 0.03, score

    out = base / "report"
    report = _bench(["report", "--out", str(out), "--experiment", campaign, "--record"], env)  # --record: the summary
    assert report.returncode == 0, report.stdout + report.stderr
    expected = (score - 0.733) / (0.95 - 0.733)  # task.toml: baseline 0.733, label_noise_ceiling 0.95
    rows = {r["task"]: r for r in csv.DictReader((out / "gap.csv").open())}
    assert float(rows["spirals"]["gap_mean"]) == pytest.approx(expected, rel=1e-5, abs=1e-6)  # the CSV: 6 digits
    assert float(rows["spirals"]["gap_reference"]) == 0.95
    gap_md = (out / "gap.md").read_text()
    assert "label_noise_ceiling" in gap_md and "by construction" in gap_md
    # in MLflow: the agent run's own gap closed, and the summary run `bench report --record` wrote for the campaign
    monkeypatch.setenv("BENCH_MLRUNS_DIR", env["BENCH_MLRUNS_DIR"])
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    client = store.client()
    exp = client.get_experiment_by_name(campaign).experiment_id
    kinds = (schema.KIND_AGENT, schema.KIND_SUMMARY)
    runs = {k: client.search_runs([exp], f"tags.`{schema.KIND}` = '{k}'") for k in kinds}
    (agent_run,), (summary_run,) = runs[schema.KIND_AGENT], runs[schema.KIND_SUMMARY]
    assert agent_run.data.metrics[schema.GAP_CLOSED] == pytest.approx(expected)
    assert agent_run.data.metrics[schema.TASK_REFERENCE] == 0.95
    assert summary_run.data.metrics[schema.SUMMARY_GAP] == pytest.approx(expected)
    assert summary_run.data.metrics[schema.summary_task_metric("spirals", schema.SUMMARY_GAP_MEAN)] == pytest.approx(
        expected
    )
    board = (out / "leaderboard.md").read_text()
    shown = f"{expected:+.3f}" if round(expected, 3) != 0 else "+0.000"  # the tables print no "-0.000"
    assert "Gap closed" in board and shown in board


@pytest.mark.slow
@pytest.mark.skipif(probe() is not None, reason=f"no usable sandbox here: {probe()}")
def test_the_installed_task_passes_bench_tasks_check(installed):
    """The conformance suite as a task author runs it, on the folder pip installed (what `bench run` reads)."""
    folder = installed["site"] / "bench_example_pack" / "spirals"
    out = _bench(["tasks", "check", str(folder)], installed["env"])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "spirals: all 6 promises kept" in out.stdout
