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
        b, higher = TABLE2[r.run.task]
        cells.setdefault((r.run.agent, r.run.task), []).append(((r.score - b) if higher else (b - r.score)) / b)
    assert len(cells) == 4
    for (agent, task), terms in cells.items():
        mean = sum(terms) / len(terms)
        assert any(abs(p - mean) <= 6e-5 for p in printed), f"{agent} {task}: {mean:.4f} not in the notebook"


@pytest.mark.slow
def test_notebook_02_reads_the_latest_campaign_by_default_and_pairs_two_agents(
    campaign,  # noqa: F811
    notebooks,
    monkeypatch,
    tmp_path,
):
    """Without BENCH_EXPERIMENT, in a store that also holds an older pilot of the same baseline agent (a better T6
    score, so that mixing it in would change the ranking and pair baseline with baseline): the notebook reads the
    latest campaign only, and its paired comparison is baseline against command."""
    import shutil

    from bench.tracking import schema
    from bench.tracking.writer import MlflowWriter

    campaign.activate(monkeypatch)
    store = tmp_path / "mlruns"
    store.mkdir()
    shutil.copyfile(Path(campaign.env()["BENCH_MLRUNS_DIR"]) / "mlflow.db", store / "mlflow.db")  # the runs' table
    monkeypatch.setenv("BENCH_MLRUNS_DIR", str(store))
    monkeypatch.delenv("BENCH_EXPERIMENT", raising=False)
    pilot = MlflowWriter("older-pilot")
    tags = {schema.KIND: schema.KIND_AGENT, schema.AGENT: "baseline", schema.TASK: "t6", schema.REPEAT: "1"}
    run = pilot.create_run("t6-baseline-r1", {**tags, schema.STATUS: "success"}, start_time=1_000_000_000.0)
    pilot.log_params(run, {schema.PARAM_BUDGET_MINUTES: 3, schema.PARAM_DIRECTION: "min"})
    pilot.log_metrics(run, [(schema.SCORE, 0.1, 0, 1_000_000_060.0)])
    pilot.end_run(run, end_time=1_000_000_180.0)

    nb = notebooks.execute(ROOT / "notebooks" / "02_agent_strategies.ipynb")
    text = notebooks.text(nb)
    assert f"campaign {campaign.name!r}: 8 agent runs" in text and "older-pilot" not in text
    paired = [line for line in text.splitlines() if line.startswith("**Paired comparison.**")]
    assert len(paired) == 1, paired
    pair = re.match(r"\*\*Paired comparison\.\*\* (\S+) \[(\S+)\] vs (\S+) \[(\S+)\],", paired[0])
    assert pair and {pair[1], pair[3]} == {"baseline", "command"}, paired  # two agents, not one with itself
    assert pair[2] == pair[4] == campaign.name
    assert notebooks.images(nb) == 6
