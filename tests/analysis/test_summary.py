"""The campaign summary (analysis/summary.py) on a small hand-made store: every metric against Eq. 1 by hand.

The agent runs are written through the harness's MlflowWriter with the tags, params and metrics a real run carries
(analysis reads nothing else). The task baselines are those of the installed task.toml files: T6 (MSE, lower is
better) 0.384, T5 (accuracy, higher is better) 0.806. Eq. 1's term of a score s against the baseline b is
(b - s) / b on T6 and (s - b) / b on T5; Agg is the mean over the tasks of the term of the mean of the successful
runs' scores, Agg-max the same with the best run.

    alpha        t6: 0.30, 0.34         t5: 0.90, failed (no score)
    beta (m-1)   t6: 0.40, 0.36         t5: 0.80, 0.84
"""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path

import pytest

from analysis import summary
from analysis.runs import load
from bench.tracking import schema, store, views
from bench.tracking.writer import MlflowWriter
from tests.campaign import campaign  # noqa: F401 (the session fixture of the slow test below)

STD2 = math.sqrt(2 * 0.02**2)  # sample std of two scores 0.04 apart: sqrt(((0.02)^2 + (0.02)^2) / (2 - 1))
T6, T5 = 0.384, 0.806  # the baselines (task.toml)
R6, R5 = 0.375, 0.969  # the references (task.toml reference_score): MLRC-Bench's gap closed is (s - b) / (r - b)
TASK = {"t6": ("mse", "min"), "t5": ("accuracy", "max")}


def agent_run(writer: MlflowWriter, agent: str, model: str, task: str, repeat: int, score: float | None) -> str:
    """An agent run as the record step writes it (status, score, the task's metric and direction)."""
    tags = schema.agent_run_tags(writer.campaign, agent, model, task, repeat, f"/runs/{task}-{agent}-r{repeat}")
    run = writer.create_run(f"{task}-{agent}-r{repeat}", tags)
    metric, direction = TASK[task]
    writer.log_params(run, {schema.PARAM_METRIC: metric, schema.PARAM_DIRECTION: direction})
    rows = [(schema.SUCCESS, float(score is not None), 0, None)]
    if score is not None:
        rows.append((schema.SCORE, score, 0, None))
    writer.log_metrics(run, rows)
    writer.set_tags(run, {schema.STATUS: "success" if score is not None else "failed"})
    writer.end_run(run)
    return run


@pytest.fixture
def hand_store() -> str:
    name = f"summary-{uuid.uuid4().hex[:6]}"
    w = MlflowWriter(name)
    for task, agent, model, scores in [
        ("t6", "alpha", "", [0.30, 0.34]),
        ("t5", "alpha", "", [0.90, None]),
        ("t6", "beta", "m-1", [0.40, 0.36]),
        ("t5", "beta", "m-1", [0.80, 0.84]),
    ]:
        for repeat, score in enumerate(scores, 1):
            agent_run(w, agent, model, task, repeat, score)
    return name


def runs_of(experiment: str, kind: str) -> list:
    exp = store.client().get_experiment_by_name(experiment)
    return store.client().search_runs([exp.experiment_id], f"tags.`{schema.KIND}` = '{kind}'")


def metrics_by_entry(experiment: str) -> dict[str, dict[str, float]]:
    return {r.data.tags[schema.ENTRY]: r.data.metrics for r in runs_of(experiment, schema.KIND_SUMMARY)}


ALPHA = {
    "agg": ((T6 - 0.32) / T6 + (0.90 - T5) / T5) / 2,
    "agg_max": ((T6 - 0.30) / T6 + (0.90 - T5) / T5) / 2,
    "success_rate": 3 / 4,
    "runs": 4,
    "tasks": 2,
    "t6_mean": 0.32,
    "t6_std": STD2,
    "t6_rel_mean": (T6 - 0.32) / T6,
    "t6_success_rate": 1.0,
    "t6_n_runs": 2,
    "t5_mean": 0.90,
    "t5_rel_mean": (0.90 - T5) / T5,
    "t5_success_rate": 0.5,
    "t5_n_runs": 2,
    "t6_gap_closed": (0.32 - T6) / (R6 - T6),
    "t5_gap_closed": (0.90 - T5) / (R5 - T5),
    "gap_closed": ((0.32 - T6) / (R6 - T6) + (0.90 - T5) / (R5 - T5)) / 2,
    "gap_closed_max": ((0.30 - T6) / (R6 - T6) + (0.90 - T5) / (R5 - T5)) / 2,
    "gap_tasks": 2,
}  # no t5_std: one successful run
BETA = {
    "agg": ((T6 - 0.38) / T6 + (0.82 - T5) / T5) / 2,
    "agg_max": ((T6 - 0.36) / T6 + (0.84 - T5) / T5) / 2,
    "success_rate": 1.0,
    "runs": 4,
    "tasks": 2,
    "t6_mean": 0.38,
    "t6_std": STD2,
    "t6_rel_mean": (T6 - 0.38) / T6,
    "t6_success_rate": 1.0,
    "t6_n_runs": 2,
    "t5_mean": 0.82,
    "t5_std": STD2,
    "t5_rel_mean": (0.82 - T5) / T5,
    "t5_success_rate": 1.0,
    "t5_n_runs": 2,
    "t6_gap_closed": (0.38 - T6) / (R6 - T6),
    "t5_gap_closed": (0.82 - T5) / (R5 - T5),
    "gap_closed": ((0.38 - T6) / (R6 - T6) + (0.82 - T5) / (R5 - T5)) / 2,
    "gap_closed_max": ((0.36 - T6) / (R6 - T6) + (0.84 - T5) / (R5 - T5)) / 2,
    "gap_tasks": 2,
}


def test_summary_runs_hold_eq1_and_the_cells_by_hand(hand_store):
    written = summary.write_campaign(hand_store)
    got = metrics_by_entry(hand_store)
    assert set(got) == {"alpha", "beta (m-1)"}
    for entry, expected in (("alpha", ALPHA), ("beta (m-1)", BETA)):
        assert set(got[entry]) == set(expected), entry
        for key, value in expected.items():
            assert got[entry][key] == pytest.approx(value, rel=1e-9, abs=1e-12), (entry, key)
    (camp_run,) = runs_of(hand_store, schema.KIND_CAMPAIGN)
    assert camp_run.info.run_id == written.campaign_run and camp_run.info.status == "FINISHED"
    assert camp_run.data.metrics[schema.SUMMARY_RUNS] == 8
    for run in runs_of(hand_store, schema.KIND_SUMMARY):
        tags = run.data.tags
        assert tags[schema.PARENT] == camp_run.info.run_id
        assert (tags[schema.AGENT], tags[schema.MODEL]) in {("alpha", ""), ("beta", "m-1")}
        assert tags[schema.CAMPAIGN] == hand_store
    # the campaign run's description ranks alpha first (Agg ~0.142 against ~0.014)
    note = camp_run.data.tags[schema.RUN_NOTE]
    assert note.index("| 1 | alpha |") < note.index("| 2 | beta (m-1) |")


def test_rewriting_updates_the_same_runs_and_never_duplicates(hand_store):
    first = summary.write_campaign(hand_store)
    again = summary.write_campaign(hand_store)
    assert (again.campaign_run, again.summary_runs) == (first.campaign_run, first.summary_runs)
    agent_run(MlflowWriter(hand_store), "alpha", "", "t5", 3, 0.86)  # a third T5 run: mean 0.88, 2 of 3 succeeded
    third = summary.write_campaign(hand_store)
    assert (third.campaign_run, third.summary_runs) == (first.campaign_run, first.summary_runs)
    assert len(runs_of(hand_store, schema.KIND_SUMMARY)) == 2 and len(runs_of(hand_store, schema.KIND_CAMPAIGN)) == 1
    alpha = metrics_by_entry(hand_store)["alpha"]
    assert alpha["t5_mean"] == pytest.approx(0.88)
    assert alpha["t5_n_runs"] == 3 and alpha["t5_success_rate"] == pytest.approx(2 / 3)
    assert alpha["t5_std"] == pytest.approx(0.02 * math.sqrt(2))  # 0.90 and 0.86: now defined
    assert alpha["agg"] == pytest.approx(((T6 - 0.32) / T6 + (0.88 - T5) / T5) / 2)
    assert alpha["success_rate"] == pytest.approx(4 / 5) and alpha["runs"] == 5


@pytest.mark.parametrize("fast", [True, False])
def test_summary_runs_are_not_read_as_agent_runs(hand_store, fast):
    before = load(hand_store, fast=fast)
    summary.write_campaign(hand_store)
    after = load(hand_store, fast=fast)
    assert len(after.agents) == len(before.agents) == 8
    assert sorted(after.agents["run_id"]) == sorted(before.agents["run_id"])
    assert after.scripts.empty and after.evals.empty


def test_the_report_folder_goes_to_the_campaign_run_and_a_failing_report_does_not_stop_the_summary(
    hand_store, tmp_path
):
    folder = tmp_path / "report"
    folder.mkdir()
    (folder / "index.md").write_text("# report\n")
    written = summary.write_campaign(hand_store, report_dir=folder)
    assert written.report_files == 1 and written.report_error == ""
    files = [f.path for f in store.client().list_artifacts(written.campaign_run, schema.REPORT_ARTIFACTS)]
    assert files == [f"{schema.REPORT_ARTIFACTS}/index.md"]

    def broken(out: Path, experiments: list[str]) -> None:
        raise ValueError("no figure today")

    again = summary.write_campaign(hand_store, render=broken)
    assert again.report_error == "ValueError: no figure today" and "report not attached" in again.line()
    assert again.summary_runs == written.summary_runs
    assert store.client().get_run(again.campaign_run).info.status == "FINISHED"


def test_the_saved_views_are_written_on_the_experiment(hand_store):
    summary.write_campaign(hand_store)
    tags = store.client().get_experiment_by_name(hand_store).tags
    compare = json.loads(tags[schema.SHARED_VIEW_PREFIX + views.COMPARE_VIEW])
    assert compare["name"] == "1GC-7RC: compare agents (Agg)" and compare["createdAt"] == compare["updatedAt"]
    state = json.loads(compare["state"])  # the UI parses the state string a second time
    assert state["groupBy"] is None and state["searchFilter"] == "tags.`bench.kind` = 'summary'"
    who = ["tags.`bench.entry`", "tags.`bench.agent`", "tags.`bench.model`"]  # the names first, then Agg, ...
    assert state["selectedColumns"][:6] == [*who, "metrics.`agg`", "metrics.`agg_max`", "metrics.`success_rate`"]
    tasks = json.loads(json.loads(tags[schema.SHARED_VIEW_PREFIX + views.TASKS_VIEW])["state"])
    assert tasks["groupBy"] == {
        "aggregateFunction": "average",
        "groupByKeys": [{"mode": "tag", "groupByData": "bench.group"}],  # "t6 · baseline": task, then entry
    }
    assert tasks["searchFilter"] == "tags.`bench.kind` = 'agent'"
    assert tasks["selectedColumns"][:2] == ["metrics.`score`", "metrics.`rel_improvement`"]  # group rows: means
    runs = json.loads(json.loads(tags[schema.SHARED_VIEW_PREFIX + views.RUNS_VIEW])["state"])
    assert runs["groupBy"] is None and runs["searchFilter"] == ""
    front = ["tags.`bench.status`", "tags.`bench.reason`", "tags.`bench.entry`", "tags.`bench.task`"]
    assert runs["selectedColumns"][:5] == [*front, "metrics.`score`"]  # how each run ended, before any metric


def test_an_experiment_without_agent_runs_gets_no_summary():
    name = f"empty-{uuid.uuid4().hex[:6]}"
    assert summary.write_campaign(name) is None
    assert store.client().get_experiment_by_name(name) is None  # nothing was created for it
    assert summary.summary_line(name) == f"campaign summary of {name}: no agent runs"


def test_bench_run_prints_one_line_when_the_summary_fails(monkeypatch, capsys):
    import argparse
    from types import SimpleNamespace

    from bench import cli
    from bench.tracking.writer import TrackingError

    def down(experiment, **kwargs):
        raise TrackingError("store down")

    monkeypatch.setattr(summary, "write_campaign", down)
    results = [SimpleNamespace(run=SimpleNamespace(campaign=c)) for c in ("c1", "c1", "c2")]
    cli._campaign_summaries(results, argparse.Namespace(no_summary=False))
    assert capsys.readouterr().out.splitlines() == [
        "[bench] campaign summary of c1 not written: TrackingError: store down",
        "[bench] campaign summary of c2 not written: TrackingError: store down",
    ]
    cli._campaign_summaries(results, argparse.Namespace(no_summary=True))
    assert capsys.readouterr().out == ""


@pytest.mark.slow
def test_bench_report_writes_the_summary_only_when_asked_and_then_the_campaigns_own_report(
    hand_store, tmp_path, capsys
):
    from analysis import report_cli

    out = tmp_path / "report"
    assert report_cli.main(["--experiment", hand_store, "--out", str(out), "--published"]) == 0
    assert not [s for s in capsys.readouterr().out.splitlines() if s.startswith("campaign summary of")]
    assert runs_of(hand_store, schema.KIND_CAMPAIGN) == []  # a reader's report writes nothing

    assert report_cli.main(["--experiment", hand_store, "--out", str(out), "--published", "--record"]) == 0
    (line,) = [s for s in capsys.readouterr().out.splitlines() if s.startswith("campaign summary of")]
    (camp_run,) = runs_of(hand_store, schema.KIND_CAMPAIGN)
    assert line.startswith(f"campaign summary of {hand_store}: MLflow run {camp_run.info.run_id} (2 entries, ")
    logged = {f.path for f in store.client().list_artifacts(camp_run.info.run_id, schema.REPORT_ARTIFACTS)}
    assert f"{schema.REPORT_ARTIFACTS}/index.md" in logged
    index = store.client().download_artifacts(
        camp_run.info.run_id, f"{schema.REPORT_ARTIFACTS}/index.md", str(tmp_path)
    )
    assert "published" in (out / "index.md").read_text().lower()  # the reader's variant has the paper's rows ...
    assert Path(index).read_text() != (out / "index.md").read_text()  # ... the campaign's own report does not
    assert metrics_by_entry(hand_store)["alpha"]["agg"] == pytest.approx(ALPHA["agg"])


# --- a real campaign (tests/campaign.py: bench run of two agents x T6, T5 x 2 repeats) -----------------------------
@pytest.mark.slow
def test_a_real_campaign_summary_against_its_runs_results(campaign, monkeypatch):  # noqa: F811
    """The numbers of the summary runs from the runs' own result.json scores and Eq. 1 by hand; the report that
    `bench run` attached at its end; and the fixture's cost, printed (a figure, not a test: 255 s at load 23)."""
    print(f"campaign fixture: {len(campaign.results)} runs and the summary in {campaign.seconds:.0f} s")
    campaign.activate(monkeypatch)
    assert [(r.run.agent, r.run.task) for r in campaign.results] == [
        (a, t) for a in ("baseline", "command") for t in ("t5", "t5", "t6", "t6")
    ]
    got = metrics_by_entry(campaign.name)
    for agent in ("baseline", "command"):
        runs = campaign.results
        scores = {t: [r.score for r in runs if (r.run.agent, r.run.task) == (agent, t)] for t in ("t6", "t5")}
        mean = {t: sum(s) / 2 for t, s in scores.items()}
        rel = {"t6": (T6 - mean["t6"]) / T6, "t5": (mean["t5"] - T5) / T5}
        best = {"t6": (T6 - min(scores["t6"])) / T6, "t5": (max(scores["t5"]) - T5) / T5}
        m = got[agent]
        assert m["agg"] == pytest.approx((rel["t6"] + rel["t5"]) / 2, rel=1e-9)
        assert m["agg_max"] == pytest.approx((best["t6"] + best["t5"]) / 2, rel=1e-9)
        assert (m["runs"], m["tasks"], m["success_rate"]) == (4, 2, 1.0)
        for t in ("t6", "t5"):
            assert m[f"{t}_mean"] == pytest.approx(mean[t], rel=1e-9)
            assert m[f"{t}_std"] == pytest.approx(abs(scores[t][0] - scores[t][1]) / math.sqrt(2), abs=1e-12)
            assert (m[f"{t}_n_runs"], m[f"{t}_success_rate"]) == (2, 1.0)
    (run,) = runs_of(campaign.name, schema.KIND_CAMPAIGN)
    files = {f.path for f in store.client().list_artifacts(run.info.run_id, schema.REPORT_ARTIFACTS)}
    assert {f"{schema.REPORT_ARTIFACTS}/{n}" for n in ("index.md", "leaderboard.csv", "table4.md")} <= files
    line = f"[bench] campaign summary of {campaign.name}: MLflow run {run.info.run_id} ("
    assert line in campaign.log("command", "t5").read_text()  # `bench run` wrote it at its end, into the same run
    assert "campaign summary" not in campaign.log("baseline", "t6").read_text()  # --no-summary


def test_the_summary_line_counts_one_entry_in_the_singular():
    from analysis.summary import Written

    one = Written("demo", "abc", {"baseline": "r1"}, 34, None, 1.8).line()
    two = Written("demo", "abc", {"a": "r1", "b": "r2"}, 34, None, 1.8).line()
    assert "(1 entry, 34 report files, 1.8 s)" in one and "(2 entries, 34 report files" in two
