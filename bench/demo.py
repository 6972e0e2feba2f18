"""``bench demo``: the whole pipeline on a laptop-class CPU in about ten minutes.

Runs the ``baseline`` agent on T6 (its full protocol; DLinear trains in seconds) and on T1 with a
reduced budget (the full T1 baseline needs ~18 minutes of CPU), then (:func:`finish`) prints a
leaderboard read back from MLflow, writes the campaign's summary runs (Agg per agent, the report,
as ``bench run`` does) and says how to open the MLflow UI with a command that works from where the
demo ran.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from bench.durations import fmt_s
from bench.runner import RunSpec, run
from bench.tasks import get_task


def ui_hint() -> str:
    """How to open the UI from here: ``bench`` is on PATH only in an activated environment.

    ``make ui`` works from the checkout, the environment's own ``bench`` from anywhere.
    """
    bench = Path(sys.executable).parent / "bench"
    found = shutil.which("bench")
    if not bench.exists() or (found and Path(found).resolve() == bench.resolve()):
        return "bench ui"
    try:
        shown = bench.relative_to(Path.cwd())
    except ValueError:
        shown = bench
    if (Path.cwd() / "Makefile").exists() and (Path.cwd() / "pyproject.toml").exists():
        return f"make ui   (or: {shown} ui)"
    return f"{shown} ui"


def finish(campaign: str, baselines: dict[str, float]) -> None:
    """The demo's end: the leaderboard from MLflow, the campaign summary runs, the way to the UI."""
    from analysis.leaderboard import short_text
    from analysis.report_cli import write_summaries
    from analysis.runs import agent_runs

    print(f"\n== leaderboard (campaign {campaign!r}, from MLflow) ==")
    print(short_text(agent_runs(campaign), baselines), flush=True)
    write_summaries([campaign], prefix="[demo]")
    print(f"\nOpen the MLflow UI:  {ui_hint()}")
    print(f"(it prints links to the campaign {campaign!r}: its runs, per task, and the agents compared by Agg;")
    print("each agent run has its training scripts nested under it)")


def demo(t1_budget_s: float = 480.0, campaign: str = "demo") -> int:
    """``bench demo``: the baseline agent on T6 and T1 (a reduced budget) in one campaign."""
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
    finish(campaign, {t.id: t.baseline_score for t in (t1, t6)})
    return 0 if all(r.status == "success" for r in results) else 1
