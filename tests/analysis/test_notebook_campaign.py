"""Notebook 02 executed against the store a test campaign produced (tests/campaign.py: `bench run` of the baseline
and command agents on T6 and T5, two repeats each): it compares the strategies per task on the paper's Eq. 1 term
with the published rows beside them. The expected per-task terms are computed here from the runs' results.json
and the paper's Table 2 baselines, not by the analysis code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.campaign import campaign  # noqa: F401 (the session fixture)

ROOT = Path(__file__).resolve().parents[2]
TABLE2 = {"t5": (0.806, True), "t6": (0.384, False)}  # baseline, higher is better (paper Table 2)


@pytest.mark.slow
def test_notebook_02_compares_strategies_per_task_on_the_eq1_term(campaign, notebooks, monkeypatch):  # noqa: F811
    campaign.activate(monkeypatch)
    monkeypatch.setenv("BENCH_EXPERIMENT", campaign.name)
    nb = notebooks.execute(ROOT / "notebooks" / "02_agent_strategies.ipynb")
    text = notebooks.text(nb)
    assert "8 agent runs" in text and "Eq. 1 term of each entry's mean, per task" in text
    assert notebooks.images(nb) == 6  # scores, strategies per task, child-run curves, anytime, timelines, intervals

    printed = [float(x) for x in re.findall(r"-?\d+\.\d+", text)]
    cells: dict[tuple[str, str], list[float]] = {}
    for r in campaign.results:
        b, higher = TABLE2[r.task]
        cells.setdefault((r.agent, r.task), []).append(((r.score - b) if higher else (b - r.score)) / b)
    assert len(cells) == 4
    for (agent, task), terms in cells.items():
        mean = sum(terms) / len(terms)
        assert any(abs(p - mean) <= 6e-5 for p in printed), f"{agent} {task}: {mean:.4f} not in the notebook"
