"""``bench baselines noise`` (baselines/noise.py): a campaign's seeded baseline runs -> the floor's file.

Five result.json files of the T6 baseline (the v2 fixture, each with its own seed and score, one without a seed, one
of another agent, one failed) in a campaign folder; the file's numbers by hand from the five scores. T6's baseline
b = 0.384 (MSE, lower is better): Eq. 1's term of s is (b - s) / b.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path

import pytest

from baselines import noise
from baselines.cli import cmd_noise
from bench.result import RunResult

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "bench" / "fixtures" / "results" / "v3_t6_baseline.json"
SCORES = {101: 0.3763, 102: 0.3765, 103: 0.3797, 104: 0.3798, 105: 0.3782}


def _result(folder: Path, seed: int | None, score: float, agent: str = "baseline", status: str = "success") -> None:
    base = RunResult.load(FIXTURE)
    outcome = dataclasses.replace(base.outcome, status=status, score=score)
    run = dataclasses.replace(base.run, agent=agent, seed=seed)
    folder.mkdir(parents=True)
    dataclasses.replace(base, run=run, outcome=outcome).write(folder / "result.json")


def test_a_campaigns_seeded_baseline_runs_make_the_floors_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BENCH_WORKSPACES_DIR", str(tmp_path / "ws"))
    camp = tmp_path / "ws" / "noise-t6"
    for i, (seed, score) in enumerate(SCORES.items(), 1):
        _result(camp / f"t6-baseline-r{i}-x", seed, score)
    _result(camp / "t6-baseline-r9-x", None, 0.3782)  # before seeds: no spread to measure
    _result(camp / "t6-command-r1-x", 7, 0.30, agent="command")
    _result(camp / "t6-baseline-r8-x", 106, 0.5, status="failed")
    assert noise.from_campaign("noise-t6", "t6") == SCORES

    out = tmp_path / "t6.json"
    args = argparse.Namespace(task="t6", seeds=5, campaign=None, from_campaign="noise-t6", small=False, budget=None,
                              out=out, no_write=False, quiet=True)  # fmt: skip
    assert cmd_noise(args) == 0
    d = json.loads(out.read_text())
    terms = [(0.384 - s) / 0.384 for s in SCORES.values()]
    assert d["seeds"] == list(SCORES) and d["data"] == "full" and d["source"] == "campaign noise-t6"
    assert d["std_score"] == pytest.approx(statistics.stdev(SCORES.values()))
    assert (d["mean_rel"], d["std_rel"]) == (
        pytest.approx(statistics.mean(terms)),
        pytest.approx(statistics.stdev(terms)),
    )
    assert "over 5 seeds" in capsys.readouterr().out
