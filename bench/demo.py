"""``bench demo``: the whole pipeline on a laptop-class CPU in about ten minutes.

Runs the ``baseline`` agent on T6 (its full protocol; DLinear trains in seconds) and on T1
with a reduced budget (the full T1 baseline needs ~18 minutes of CPU), then prints a
leaderboard read back from MLflow and how to open the MLflow UI.
"""

from __future__ import annotations

from bench.durations import fmt_s
from bench.runner import RunSpec, run
from bench.tasks import get_task


def demo(t1_budget_s: float = 480.0, campaign: str = "demo") -> int:
    from analysis.leaderboard import short_table
    from analysis.runs import agent_runs

    t6, t1 = get_task("t6"), get_task("t1")
    print(
        f"== 1GC-7RC demo: baseline agent on {t6.id} (full, budget {t6.budget_minutes:g} min) and on {t1.id} "
        f"(REDUCED budget {fmt_s(t1_budget_s)} instead of {t1.budget_minutes:g} min: on a CPU the full T1 baseline "
        f"takes ~18 min, so its score is not comparable to the paper's) ==",
        flush=True,
    )
    results = [
        run(RunSpec(task=t6, agent="baseline", campaign=campaign)),
        run(RunSpec(task=t1, agent="baseline", campaign=campaign, budget_s=t1_budget_s)),
    ]

    runs = agent_runs(campaign)
    table = short_table(runs, {t.id: t.baseline_score for t in (t1, t6)})
    print(f"\n== leaderboard (campaign {campaign!r}, from MLflow) ==")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}") if not table.empty else "(no runs)")
    print(f"\nOpen the MLflow UI:  bench ui   (then http://127.0.0.1:5000, experiment {campaign!r};")
    print("each agent run has its training scripts nested under it)")
    return 0 if all(r.status == "success" for r in results) else 1
