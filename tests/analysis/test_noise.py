"""The noise floor (analysis/noise.py) and the seeds behind it (bench/runspec.py, bench/pipeline/launch.py,
tasks/task_helpers.py).

Fast: a hand-made store (the harness's writer, the params a real run carries): five seeded baseline runs of T6
and two entries, one far better than the baseline and one inside its noise; every number by hand from the scores.
T6's baseline b = 0.384 (task.toml, MSE, lower is better): Eq. 1's term of a score s is (b - s) / b.

Slow: a real campaign of the baseline agent on T6 (generated data, the real harness), five repeats: five different
seeds in run.json, result.json and MLflow, a spread that is not zero, and the report's noise table.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from analysis import noise
from analysis.leaderboard import build
from analysis.runs import load
from bench.protocol import SEED_VAR
from bench.runspec import SEED_RANGE, RunSpec
from bench.tracking import schema
from bench.tracking.writer import MlflowWriter

ROOT = Path(__file__).resolve().parents[2]
B = 0.384  # T6's baseline (task.toml)
T975 = {4: 2.7764451051977987, 1: 12.706204736174705}  # Student's t, 0.975 quantile, by degrees of freedom (tables)
BASELINE = {11: 0.380, 12: 0.384, 13: 0.390, 14: 0.378, 15: 0.386}  # seed -> score
ALPHA = [0.300, 0.320]  # far below the baseline's MSE: clears the noise
BETA = [0.382, 0.386]  # the baseline's own range: does not


def _run(w: MlflowWriter, agent: str, repeat: int, score: float, seed: int | None) -> None:
    tags = schema.agent_run_tags(w.campaign, agent, "", "t6", repeat, f"/runs/t6-{agent}-r{repeat}")
    run = w.create_run(f"t6-{agent}-r{repeat}", tags)
    params = {schema.PARAM_METRIC: "mse", schema.PARAM_DIRECTION: "min"}
    w.log_params(run, {**params, **schema.spec_params({"agent": agent, "task": "t6", "repeat": repeat, "seed": seed})})
    w.log_metrics(run, [(schema.SUCCESS, 1.0, 0, None), (schema.SCORE, score, 0, None)])
    w.set_tags(run, {schema.STATUS: "success"})
    w.end_run(run)


@pytest.fixture(scope="module")
def board():
    name = f"noise-{uuid.uuid4().hex[:6]}"
    w = MlflowWriter(name)
    for repeat, (seed, score) in enumerate(BASELINE.items(), 1):
        _run(w, "baseline", repeat, score, seed)
    for agent, scores in (("alpha", ALPHA), ("beta", BETA)):
        for repeat, score in enumerate(scores, 1):
            _run(w, agent, repeat, score, None)  # an LLM agent: no seed of the harness's
    return build(load(name), calibration=False)


def test_the_floor_is_the_baselines_spread_over_its_seeds_by_hand(board):
    (f,) = noise.floors(board).to_dict("records")
    scores = list(BASELINE.values())
    terms = [(B - s) / B for s in scores]
    m, s = statistics.mean(terms), statistics.stdev(terms)
    half = T975[4] * s * math.sqrt(1 + 1 / 5)
    assert f["n"] == 5 and f["seeds"] == "11,12,13,14,15" and f["data"] == "full"
    assert f["std_score"] == pytest.approx(statistics.stdev(scores)) and f["std_score"] > 0
    assert (f["lo"], f["hi"]) == (pytest.approx(m - half), pytest.approx(m + half))


def test_each_entrys_gain_has_its_interval_and_clears_the_noise_or_not(board):
    g = noise.gains(board, noise.floors(board)).set_index("entry")
    terms = [(B - s) / B for s in BASELINE.values()]
    m, s = statistics.mean(terms), statistics.stdev(terms)
    for entry, scores, clears in (("alpha", ALPHA, True), ("beta", BETA, False)):
        mine = [(B - x) / B for x in scores]
        half = T975[1] * statistics.stdev(mine) / math.sqrt(2)
        row = g.loc[entry]
        assert row["gain"] == pytest.approx(statistics.mean(mine))
        assert (row["gain_lo"], row["gain_hi"]) == (
            pytest.approx(row["gain"] - half),
            pytest.approx(row["gain"] + half),
        )
        bar = m + T975[4] * s * math.sqrt(1 / 2 + 1 / 5)  # where the mean of two baseline seeds would fall
        assert bool(row["clears"]) == clears and bool(row["gain"] > bar) == clears
    table = noise.noise_table(board)
    alpha = next(r for r in table.rows if r.label.startswith("alpha"))
    assert [c.text for c in alpha.cells][-1] == "yes" and "11,12,13,14,15" in " ".join(table.notes)


def test_a_fixed_seed_measures_no_noise_and_the_table_says_how_to_measure_it():
    name = f"noise-fixed-{uuid.uuid4().hex[:6]}"
    w = MlflowWriter(name)
    for repeat in range(1, 6):  # runs before seeds were recorded (or five repeats of one --seed): no spread
        _run(w, "baseline", repeat, 0.3782, None)
    lb = build(load(name), calibration=False)
    floor = noise.floors(lb, results_dir=Path("/nonexistent"))
    assert floor["lo"].isna().all()
    assert any("bench run --agent baseline --task t6 --repeats 5" in n for n in noise.noise_table(lb, Path("/x")).notes)


def test_a_seeded_agent_draws_a_seed_per_repeat_others_none_and_a_given_seed_stays():
    from bench.tasks import get_task

    task = get_task("t6")
    drawn = [RunSpec(task="t6", agent="baseline", repeat=r).launched("cpu", {}, seeded=True).seed for r in range(1, 6)]
    assert len(set(drawn)) == 5 and all(0 <= s < SEED_RANGE for s in drawn)
    assert RunSpec(task="t6", agent="claude-code").launched("cpu", {}, seeded=False).seed is None
    given = RunSpec(task="t6", agent="command", seed=7).launched("cpu", {}, seeded=False)
    assert given.seed == 7 and RunSpec.from_dict(json.loads(json.dumps(given.to_dict()))).seed == 7
    assert schema.spec_params(given.to_dict())[schema.PARAM_SEED] == 7
    assert task.id == "t6"


@pytest.mark.parametrize("bad", [-1, SEED_RANGE, "3", True])
def test_a_seed_that_is_not_one_is_refused_naming_the_flag(bad):
    from bench.errors import InputError

    with pytest.raises(InputError, match="--seed must be a whole number"):  # the model's rule, named as given
        RunSpec.build("t6", "baseline", {"seed": bad})


def test_the_agents_processes_get_the_runs_seed_and_train_py_reads_it(tmp_path, monkeypatch):
    from bench.pipeline.launch import agent_env

    class Ws:
        path, spool_dir = tmp_path, tmp_path / "spool"

    monkeypatch.setenv(SEED_VAR, "999")  # the harness's own environment never leaks through
    assert agent_env(Ws(), "tok", {}, 60.0, 0.0, seed=1234)[SEED_VAR] == "1234"
    assert SEED_VAR not in agent_env(Ws(), "tok", {}, 60.0, 0.0)
    helpers = ROOT / "tasks" / "task_helpers.py"
    read = "import sys; sys.path.insert(0, sys.argv[1]); import task_helpers as h; print(h.run_seed(2021))"
    for env, expected in (({SEED_VAR: "1234"}, "1234"), ({}, "2021")):
        clean = {k: v for k, v in os.environ.items() if k != SEED_VAR}
        out = subprocess.run([sys.executable, "-c", read, str(helpers.parent)], env={**clean, **env}, text=True,
                             capture_output=True, check=True).stdout  # fmt: skip
        assert out.strip() == expected
    for train in sorted((ROOT / "tasks").glob("t*/train.py")):  # every task trains with it
        assert 'run_seed(config["seed"])' in train.read_text(), train


@pytest.mark.slow
def test_a_t6_campaign_of_the_baseline_with_five_repeats_has_five_seeds_a_spread_and_a_noise_interval(
    tmp_path, monkeypatch
):
    """The issue's bar, on the real harness (T6's folder on GENERATED data): five repeats, five recorded seeds (in
    run.json, result.json and MLflow, the same in each), scores that differ, and the report's noise table with the
    interval computed from those scores by hand."""
    from analysis.report import write_report
    from bench.pipeline.workspace import campaign_dir
    from bench.result import RunResult
    from bench.tasks import data
    from bench.tracking import whole_runs
    from tests.conftest import generated_task, write_etth1_like

    monkeypatch.setenv("BENCH_MLRUNS_DIR", str(tmp_path / "mlruns"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    task = generated_task(tmp_path, monkeypatch, "t6_time_series_forecasting", write_etth1_like)
    data.prepare(task, progress=False)
    name = f"noise-real-{uuid.uuid4().hex[:6]}"
    argv = [sys.executable, "-m", "bench.cli", "run", "--agent", "baseline", "--task", "t6", "--repeats", "5"]
    argv += ["--budget", "5m", "--grace", "5", "--campaign", name, "--quiet", "--no-summary"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # one thread: faster on a busy machine
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    folders = sorted(campaign_dir(name).glob("t6-baseline-r*"))
    results = [RunResult.load(f / "result.json") for f in folders]
    seeds = [r.run.seed for r in results]
    assert len(folders) == 5 and len(set(seeds)) == 5 and all(isinstance(s, int) for s in seeds)
    assert [json.loads((f / "run.json").read_text())["spec"]["seed"] for f in folders] == seeds
    _, runs = whole_runs.campaign_runs(name)
    agents = [r for r in runs if r.data.tags.get(schema.KIND) == schema.KIND_AGENT]
    by_run = {r.data.params[schema.PARAM_REPEAT]: int(r.data.params[schema.PARAM_SEED]) for r in agents}
    assert by_run == {str(r.run.repeat): r.run.seed for r in results}
    scores = [r.score for r in results]
    assert all(r.status == "success" for r in results) and statistics.stdev(scores) > 0

    out = tmp_path / "report"
    write_report(out, [name])
    terms = [(B - s) / B for s in scores]
    m, s = statistics.mean(terms), statistics.stdev(terms)
    lo, hi = m - T975[4] * s * math.sqrt(1.2), m + T975[4] * s * math.sqrt(1.2)
    noise_md = (out / "noise.md").read_text()
    assert f"[{lo:+.4f}, {hi:+.4f}]" in noise_md and "| baseline [" in noise_md
    assert all(str(x) in noise_md for x in seeds) and "Noise floor" in (out / "index.md").read_text()
