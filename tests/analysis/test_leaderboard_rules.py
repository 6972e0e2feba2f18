"""Issue #15: a leaderboard that follows the paper's rules (entry-level supersede, runs outside the protocol,
Figure 3's harness groups, the Optuna-tuned row as an opt-in, published agents missing from Table 3).

Every expected value is worked out by hand from the paper's numbers (analysis/data/published/, Tables 2-6) and
its rules (Section 3.1: a larger sample supersedes a smaller one whatever the scores; Appendix D: one A100 80 GB,
the task's budget), never by calling the code under test.
"""

from __future__ import annotations

import argparse
import json
import uuid

import numpy as np
import pandas as pd
import pytest

from analysis import figures, leaderboard, published, render, report_cli, tables
from analysis.runs import load
from bench.tracking import schema
from bench.tracking.writer import MlflowWriter

# Table 2 baselines (lower is better on t1 and t6)
BASELINE = {"t1": 3.438, "t2": 0.343, "t3": 0.660, "t4": 0.706, "t5": 0.806, "t6": 0.384, "t7": 0.793}
TASKS = list(BASELINE)


def _runs(experiment: str, per_task: dict[str, int], model: str = "claude-opus-4-7", **extra) -> pd.DataFrame:
    """Hand-made successful agent runs of Claude Code + ``model``: ``per_task[t]`` runs on t, each scoring the
    Table 2 baseline (so every Eq. 1 term, and the Agg, is exactly 0)."""
    rows = [
        {"run_id": f"{experiment}-{t}-{i}", "experiment": experiment, "agent": "claude-code", "model": model,
         "task": t, "repeat": i + 1, "status": "success", "score": BASELINE[t], "higher_is_better": np.nan,
         "budget_min": 40.0, "wall_time_s": 600.0, "budget_utilisation": 0.25, "scripts_launched": 4.0,
         "synthetic": False, "metric": "", "tokens_input": np.nan, "tokens_output": np.nan, "tokens_cached": np.nan,
         "cost_usd": np.nan, "nonstandard": False, "deviations": "", "deviation_notes": "", "hardware": "", **extra}
        for t, n in per_task.items() for i in range(n)
    ]  # fmt: skip
    return pd.DataFrame(rows)


def _bold(t: render.Table) -> set[tuple[str, str, str]]:
    d = t.data
    return {(s, e, k) for s, e, k, b in zip(d["source"], d["entry"], d["task"], d["bold"], strict=True) if b is True}


# --- 1. entry-level supersede -----------------------------------------------------------------
def test_a_fully_superseded_entry_is_listed_but_neither_ranked_nor_bold():
    """ "mine" ran Opus 4.7 3 times on T1 and 10 times on each other task: 3 + 6 x 10 = 63 runs on the 7 tasks
    of the paper's Opus 4.7 (7 x 5 = 35), so the paper's entry is superseded as a whole, although its T1 cell
    (5 runs) still supersedes mine's (3). Without it, by hand from Table 4: T1 best mean GPT 5.5 2.0964
    (< Kimi K2.6 2.1741 < Opus 4.6 2.1797), T2 Sonnet 4.6 0.6813, T6 GPT 5.5 0.3803 (< Sonnet 0.3809), and the
    best Agg Sonnet 4.6 +0.293; mine scores the baselines (Agg 0): ranked 7th of the 7 ranked entries.
    Table 6: Agg-max bold GPT 5.5 alone (+0.325085; Opus 4.7's +0.325093 no longer competes)."""
    lb = leaderboard.build(_runs("mine", {t: 3 if t == "t1" else 10 for t in TASKS}), published=True,
                           registry=False)  # fmt: skip
    s = lb.summary.set_index(["source", "entry"])
    old, new = s.loc[("published", "Opus 4.7")], s.loc[("mine", "Opus 4.7")]
    assert pd.isna(old["rank"]) and old["superseded_by"] == "mine" and f"{old['agg']:+.3f}" == "+0.302"
    assert new["rank"] == 7 and new["superseded_by"] == "" and new["agg"] == pytest.approx(0.0)
    assert s.loc[("published", "Sonnet 4.6"), "rank"] == 1 and s.loc[("published", "GPT 5.5"), "rank"] == 2
    assert lb.cell("mine", "Opus 4.7", "t1")["superseded_by"] == "published"  # cells: 5 runs beat 3

    t4 = tables.table4(lb)
    cells4 = {(s, e, k) for s, e, k in _bold(t4) if k.startswith("t")}
    assert ("published", "GPT 5.5", "t1") in cells4 and ("published", "Sonnet 4.6", "t2") in cells4
    assert ("published", "GPT 5.5", "t6") in cells4 and len(cells4) == 7
    assert not {c for c in cells4 if c[1] == "Opus 4.7"}
    assert {(s, e) for s, e, k in _bold(t4) if k == "agg"} == {("published", "Sonnet 4.6")}
    md6 = render.to_markdown(tables.table6(lb))
    assert md6.count("**+0.325**") == 1  # GPT 5.5 only
    lead = render.to_markdown(tables.leaderboard_table(lb))
    assert "| Opus 4.7 (superseded) | published |" in lead and "| 7. Opus 4.7 | mine |" in lead
    assert any("Opus 4.7 [published] (35 runs) is superseded by mine" in n for n in t4.notes)


def test_a_campaign_on_fewer_tasks_supersedes_cells_not_the_entry():
    """6 runs on T6 alone supersede the paper's T6 cell (5 runs) but cannot replace a 7-task entry: Opus 4.7
    stays ranked 1st (Agg +0.302). 3 runs on T6 alone are fewer than the paper's 5 on that task: that entry is
    superseded by the published one."""
    lb = leaderboard.build(_runs("six", {"t6": 6}), published=True, registry=False)
    s = lb.summary.set_index(["source", "entry"])
    assert s.loc[("published", "Opus 4.7"), "rank"] == 1 and s.loc[("published", "Opus 4.7"), "superseded_by"] == ""
    assert lb.cell("published", "Opus 4.7", "t6")["superseded_by"] == "six"
    lb = leaderboard.build(_runs("three", {"t6": 3}), published=True, registry=False)
    s = lb.summary.set_index(["source", "entry"])
    three = s.loc[("three", "Opus 4.7")]
    assert three["superseded_by"] == "published" and pd.isna(three["rank"])
    assert "Opus 4.7 (superseded)" in render.to_markdown(tables.table4(lb))


# --- 2. runs outside the protocol --------------------------------------------------------------
def test_nonstandard_runs_are_left_out_of_a_published_comparison_unless_asked():
    """The same 63 runs, made on a CPU: with published rows they are left out (63 runs named in a note); asked
    for, they are shown with § and their deviations, and supersede nothing standard (the paper's Opus 4.7 stays
    1st, its cells unsuperseded); alone (no published rows) they are shown, marked."""
    ns = {"nonstandard": True, "deviations": "hardware", "deviation_notes": "hardware: cpu (x) instead of one A100"}
    runs = _runs("cpu", {t: 3 if t == "t1" else 10 for t in TASKS}, **ns)
    lb = leaderboard.build(runs, published=True, registry=False)
    assert set(lb.cells["source"]) == {"published"} and len(lb.excluded) == 63
    assert any(n.startswith("63 non-standard run(s) (hardware) left out") for n in tables.table4(lb).notes)

    lb = leaderboard.build(runs, published=True, registry=False, include_nonstandard=True)
    s = lb.summary.set_index(["source", "entry"])
    assert s.loc[("published", "Opus 4.7"), "rank"] == 1 and s.loc[("published", "Opus 4.7"), "superseded_by"] == ""
    assert (lb.cells.loc[lb.cells["source"] == "published", "superseded_by"] == "").all()
    pilot = "claude-code (claude-opus-4-7)"  # a pilot never wears the paper's name (issue 41): its dispatch name
    assert set(lb.cells.loc[lb.cells["source"] == "cpu", "entry"]) == {pilot}
    assert s.loc[("cpu", pilot), "nonstandard"] and s.loc[("cpu", pilot), "deviations"] == "hardware"
    md = render.to_markdown(tables.table4(lb))
    assert f"| {pilot} § |" in md  # one note for the entry's 7 cells, which deviate alike
    assert f"§ {pilot} [cpu] on T1, T2, T3, T4, T5, T6, T7 has runs outside the paper's protocol (hardware)" in md
    assert rf"{pilot} \S{{}}" in render.to_latex(tables.table4(lb))
    assert md.count("| Opus 4.7") == 1  # the paper's name: the published row alone

    alone = leaderboard.build(runs, registry=False)
    assert alone.excluded.empty and alone.summary.loc[0, "nonstandard"] and alone.summary.loc[0, "rank"] == 1


def _agent_run(w: MlflowWriter, agent: str, task: str, budget: float, tags: dict, params: dict, score: float) -> None:
    base = {schema.KIND: schema.KIND_AGENT, schema.AGENT: agent, schema.MODEL: "", schema.TASK: task}
    run = w.create_run(f"{task}-{agent}", {**base, schema.REPEAT: "1", schema.STATUS: "success", **tags})
    w.log_params(run, {schema.PARAM_BUDGET_MINUTES: budget, schema.PARAM_METRIC: "m", **params})
    metrics = {schema.SCORE: score, schema.WALL_TIME: 60.0 * budget, schema.BUDGET_UTILISATION: 1.0,
               schema.SCRIPTS_LAUNCHED: 1.0}  # fmt: skip
    w.log_metrics(run, [(k, v, 0, None) for k, v in metrics.items()])
    w.end_run(run)


def test_runs_without_protocol_tags_get_their_deviations_from_what_they_carry():
    """Older runs (no bench.protocol tag) judged by bench.protocol's rule; tagged runs keep their own verdict.
    t1's budget is 40 min (task.toml, Table 2), t6's 40 min. Both read paths (SQL and MLflow API) agree."""
    campaign = f"legacy-{uuid.uuid4().hex[:6]}"
    w = MlflowWriter(campaign)
    _agent_run(w, "a", "t1", 8, {}, {schema.PARAM_DEVICE: "cpu"}, 2.5)  # 8 of 40 min, on a CPU
    _agent_run(w, "b", "t6", 40, {schema.SANDBOXED: "true"}, {schema.PARAM_DEVICE: "cuda"}, 0.38)  # as the paper
    _agent_run(w, "c", "t6", 40, {schema.SANDBOXED: "false", schema.PARTIAL_DATA: "true"}, {}, 0.38)
    tagged = {schema.PROTOCOL: "nonstandard", schema.DEVIATIONS: "hardware", schema.HARDWARE: "cpu (X, 2 cores)",
              schema.DEVIATION_NOTES: "hardware: cpu (X, 2 cores) instead of one NVIDIA A100 80GB"}  # fmt: skip
    _agent_run(w, "d", "t6", 40, tagged, {schema.PARAM_DEVICE: "cpu"}, 0.38)
    for fast in (True, False):
        a = load(campaign, fast=fast).agents.set_index("agent")
        assert a["nonstandard"].to_dict() == {"a": True, "b": False, "c": True, "d": True}, fast
        assert a["deviations"].to_dict() == {"a": "budget,hardware", "b": "", "c": "sandbox,partial-data",
                                             "d": "hardware"}  # fmt: skip
        assert a.loc["a", "deviation_notes"] == (
            "budget: 8 min instead of the task's 40 min\nhardware: cpu instead of one NVIDIA A100 80GB"
        )
        assert a.loc["d", "hardware"] == "cpu (X, 2 cores)" and a.loc["a", "hardware"] == "cpu"


@pytest.mark.slow
def test_bench_report_published_leaves_out_a_demo_run_unless_asked(tmp_path):
    """``make demo``'s runs (T6 on a CPU, T1 for 8 of its 40 minutes on a CPU) no longer enter Table 4 and
    Figure 3 of ``bench report --published``: 7 published points, a note naming the 2 runs left out;
    ``--include-nonstandard`` shows them as "baseline §" (8 entries in Figure 3's data)."""
    campaign = f"demo-{uuid.uuid4().hex[:6]}"
    w = MlflowWriter(campaign)
    hw = "cpu (AMD EPYC, 2 cores)"
    for task, budget, kinds in (("t6", 40, "hardware"), ("t1", 8, "budget,hardware")):
        tags = {schema.PROTOCOL: "nonstandard", schema.DEVIATIONS: kinds, schema.HARDWARE: hw}
        _agent_run(w, "baseline", task, budget, tags, {schema.PARAM_DEVICE: "cpu"}, BASELINE[task])
    out = tmp_path / "default"
    assert report_cli.main(["--experiment", campaign, "--published", "--out", str(out)]) == 0
    assert f"MLflow: {campaign}" not in (out / "table4.md").read_text()
    assert len(pd.read_csv(out / "figure3.csv")) == 7
    assert "2 non-standard run(s) (budget, hardware) left out" in (out / "index.md").read_text()
    out = tmp_path / "asked"
    assert report_cli.main(["--experiment", campaign, "--published", "--include-nonstandard", "--out", str(out)]) == 0
    t4 = (out / "table4.md").read_text()
    assert f"**MLflow: {campaign}**" in t4 and "| baseline § |" in t4
    assert f"§ baseline [{campaign}] on T1 has runs outside the paper's protocol (budget, hardware)" in t4
    assert len(pd.read_csv(out / "figure3.csv")) == 8


# --- 3. Figure 3's groups ----------------------------------------------------------------------
def test_figure3_groups_published_agents_by_harness_as_the_paper_does():
    """Figure 3's legend: "proprietary" (Claude Code: Sonnet 4.6, Opus 4.6, Opus 4.7; Codex CLI: GPT 5.5) and
    "OpenCode" (Kimi K2.5, Kimi K2.6 and Qwen 3.6+, whose model is proprietary but whose harness is OpenCode)."""
    lb = leaderboard.build(published=True, registry=False)
    points = figures.figure3_data(lb)[0].set_index("entry")
    assert points["harness"].to_dict() == {
        "Sonnet 4.6": "proprietary", "Opus 4.6": "proprietary", "Opus 4.7": "proprietary", "GPT 5.5": "proprietary",
        "Kimi K2.5": "OpenCode", "Kimi K2.6": "OpenCode", "Qwen 3.6+": "OpenCode",
    }  # fmt: skip
    ax = figures.figure3(lb).axes[0]
    assert ax.get_legend_handles_labels()[1][:2] == ["proprietary", "OpenCode"]
    x_qwen, x_kimi = 93 / 7, sum((8, 12, 9, 10, 12, 20, 10)) / 7  # Table 5: Qwen 93/7, Kimi K2.5 81/7
    colour = {round(float(c.get_offsets()[0][0]), 6): tuple(c.get_facecolor()[0]) for c in ax.collections}
    assert colour[round(x_qwen, 6)] == colour[round(x_kimi, 6)]


# --- 4. the Optuna-tuned row -------------------------------------------------------------------
def test_the_optuna_tuned_row_is_opt_in_and_says_where_it_was_tuned(tmp_path):
    """Off by default (build, bench report); asked for, its label and note carry the results files' hardware,
    trials and budget: here T1 tuned with 5 trials (3 pruned) in 2400 s = 40 min, T6 with 42 (32 pruned) in 600 s =
    10 min, both on a CPU-only machine -> "Optuna-tuned (CPU, 5-42 trials)"."""
    cpu = "AMD EPYC, 2 cores, no GPU (CPU only), torch 2.13.0+cpu"
    for task, score, trials, pruned, budget in (("t1", 2.2064, 5, 3, 2400.0), ("t6", 0.3701, 42, 32, 600.0)):
        d = {"task": task, "official_score": score, "trials": trials, "pruned": pruned, "budget_s": budget,
             "hardware": cpu, "date": "2026-11-22"}  # fmt: skip
        (tmp_path / f"{task}.json").write_text(json.dumps(d))
    assert "calibration" not in set(leaderboard.build(published=True, registry=False).cells["source"])
    lb = leaderboard.build(published=True, registry=False, calibration=True, calibration_dir=tmp_path)
    t4 = tables.table4(lb)
    assert [r.label for r in t4.rows[:3]] == ["Reference", "Baseline", "Optuna-tuned (CPU, 5-42 trials)"]
    note = next(n for n in t4.notes if n.startswith("Optuna-tuned (CPU, 5-42 trials)"))
    assert f"T1: 5 trials (3 pruned) in 40 min on {cpu}, 2026-11-22" in note
    assert f"T6: 42 trials (32 pruned) in 10 min on {cpu}" in note
    parser = argparse.ArgumentParser(prog="bench")
    report_cli.add_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["report"])
    assert not args.calibration and not args.include_nonstandard
    args = parser.parse_args(["report", "--calibration", "--include-nonstandard"])
    assert args.calibration and args.include_nonstandard


# --- 5. robustness -----------------------------------------------------------------------------
def test_a_published_agent_missing_from_table3_still_renders(monkeypatch):
    """results.csv with an agent agents.csv does not list ("Newbie 1", a copy of GPT 5.5's numbers): its own
    group header, the "other" harness in Figure 3, and GPT 5.5's Agg (+0.287, Table 4)."""
    original = published._csv

    def csv(name: str) -> pd.DataFrame:
        df = original(name)
        if name == "results.csv":
            df = pd.concat([df, df[df["agent"] == "GPT 5.5"].assign(agent="Newbie 1")], ignore_index=True)
        return df

    monkeypatch.setattr(published, "_csv", csv)
    lb = leaderboard.build(published=True, registry=False)
    for make in (tables.table4, tables.table5, tables.table6, tables.table8, tables.leaderboard_table):
        render.to_latex(make(lb))
        assert "Newbie 1" in render.to_markdown(make(lb)) or make is tables.table8
    assert "| **Published: CLI not in Table 3** |" in render.to_markdown(tables.table4(lb))
    assert f"{lb.summary.set_index('entry').loc['Newbie 1', 'agg']:+.3f}" == "+0.287"
    ax = figures.figure3(lb).axes[0]
    assert "other" in ax.get_legend_handles_labels()[1]


# --- a reduced budget ----------------------------------------------------------------------------
def test_an_entry_on_a_reduced_budget_is_listed_but_neither_ranked_nor_bold():
    """The demo's case: an 8-minute T1 (and T6) beside runs on the tasks' own 40 minutes. The short entry scores
    10 % under both baselines (lower is better on T1 and T6: each Eq. 1 term +0.1, Agg +0.100 by hand), the full
    one the baselines (Agg 0): still only the full one is ranked (1st) and bold, the short one listed with its Agg."""
    full = _runs("full", {"t1": 2, "t6": 2}, model="m-full")
    short = _runs("short", {"t1": 2, "t6": 2}, model="m-short", budget_min=8.0, nonstandard=True,
                  deviations="budget,hardware", deviation_notes="budget: 8 min instead of 40")  # fmt: skip
    short["score"] = short["task"].map(BASELINE) * 0.9
    lb = leaderboard.build(pd.concat([full, short], ignore_index=True), registry=False)
    s = lb.summary.set_index("source")
    assert s.loc["full", "rank"] == 1 and s.loc["full", "agg"] == pytest.approx(0.0)
    assert pd.isna(s.loc["short", "rank"]) and s.loc["short", "agg"] == pytest.approx(0.1)
    assert s.loc["short", "deviations"] == "budget,hardware"
    t4 = tables.table4(lb)
    assert {(src, k) for src, _, k in _bold(t4)} == {("full", "t1"), ("full", "t6"), ("full", "agg")}
    assert {(src, k) for src, _, k in _bold(tables.table6(lb))} == {("full", "t1"), ("full", "t6"), ("full", "agg_max")}


def test_a_campaign_whose_runs_all_failed_still_gets_its_tables():
    """No scored cell (one failed run, as a first try often is): the tables render with nothing bold, rather than
    the summary's report failing (an empty reduced-budget mask once selected columns instead of rows)."""
    failed = _runs("failed", {"t6": 1}, status="failed", score=np.nan)
    lb = leaderboard.build(failed, registry=False)
    for table in (tables.table4(lb), tables.table6(lb)):
        assert _bold(table) == set()
    assert leaderboard.reduced_budget(pd.Series([], dtype=object)).dtype == bool
