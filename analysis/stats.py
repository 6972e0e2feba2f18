"""Uncertainty beyond the paper: bootstrap intervals for Agg and a paired comparison of two entries.

With 5 runs per task, two agents' Agg values that differ in the third decimal may not differ at all;
the paper reports mean ± std per task but no interval for Agg. Here:

- :func:`bootstrap_agg` resamples each task's successful runs with replacement (independently per
  task), recomputes the task means and Eq. 1, and reports the percentile interval. Published rows have
  no per-run scores, so they are drawn parametrically (normal with the published mean and std, n =
  successful runs), and the ``method`` column says so.
- :func:`compare` pairs two entries by task (both ran the same tasks): per-task Eq. 1 terms and their
  difference, a Welch test per task from mean/std/n, a bootstrap interval for the Agg difference, and
  a Wilcoxon signed-rank test over tasks.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.leaderboard import Leaderboard
from bench.tasks.direction import Direction

Sample = np.ndarray | tuple[float, float, int]  # per-run scores, or (mean, std, n) when only those are known


# --- tests: scipy.stats, imported when a test is asked for (it costs most of a second, a report's whole budget) ----
def pearson(x, y) -> tuple[float, float]:
    """Pearson r and its two-sided p-value (``scipy.stats.pearsonr``); NaN for fewer than 3 points or no spread."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 3 or x.std() == 0 or y.std() == 0:
        return np.nan, np.nan
    from scipy.stats import pearsonr

    result = pearsonr(x, y)
    return float(result.statistic), float(result.pvalue)


def welch_p(m1: float, s1: float, n1: float, m2: float, s2: float, n2: float) -> float:
    """Two-sided Welch t-test p-value from summary statistics (``scipy.stats.ttest_ind_from_stats``, unequal
    variances; the published rows have only mean, std and n); NaN when it is undefined."""
    if min(n1, n2) < 2 or not (np.isfinite(s1) and np.isfinite(s2)) or s1 == s2 == 0:
        return np.nan
    from scipy.stats import ttest_ind_from_stats

    return float(ttest_ind_from_stats(m1, s1, n1, m2, s2, n2, equal_var=False).pvalue)


def wilcoxon_p(diff) -> float:
    """Two-sided Wilcoxon signed-rank p-value (``scipy.stats.wilcoxon``), exact whatever the number of tasks.

    Zero differences are dropped (below 1e-12: a float's zero). Without tied magnitudes the exact distribution is
    used for any n (scipy's default switches to a normal approximation past 50); with ties, scipy's default: an
    exhaustive permutation test on the average ranks for up to 13 tasks, exact too, and past that the normal
    approximation (2**n sign flips take minutes from n = 16 on; the hand-written count before issue 30 was exact
    there, and the paper's seven tasks are far below it)."""
    d = np.asarray(diff, dtype=float)
    d = d[np.abs(d) > 1e-12]
    n = len(d)
    if n < 2:
        return np.nan
    from scipy.stats import wilcoxon

    return float(wilcoxon(d, method="exact" if len(np.unique(np.abs(d))) == n else "auto").pvalue)


def task_samples(lb: Leaderboard, source: str, entry: str, column: str = "mean") -> dict[str, Sample]:
    """What to resample per task: the successful runs' scores when the runs are at hand, else mean/std/n."""
    c = lb.cells[(lb.cells["source"] == source) & (lb.cells["entry"] == entry) & lb.cells["rel_mean"].notna()]
    out: dict[str, Sample] = {}
    for r in c.itertuples():
        scores = lb.run_scores(source, entry, r.task)
        if scores is not None and len(scores):
            out[r.task] = scores
        else:
            out[r.task] = (float(r.mean), float(r.std) if pd.notna(r.std) else np.nan, int(r.n_success))
    return out


def _draw_means(rng: np.random.Generator, sample: Sample, n_boot: int) -> np.ndarray:
    """n_boot bootstrap means of one task's score."""
    if isinstance(sample, np.ndarray):
        if len(sample) < 2:
            return np.full(n_boot, sample.mean())
        return sample[rng.integers(0, len(sample), (n_boot, len(sample)))].mean(axis=1)
    mean, std, n = sample
    if n < 2 or not np.isfinite(std) or std == 0:
        return np.full(n_boot, mean)
    return rng.normal(mean, std / np.sqrt(n), n_boot)


def _n(sample: Sample) -> int:
    """How many successful runs a task's sample stands for."""
    return len(sample) if isinstance(sample, np.ndarray) else int(sample[2])


def _method(samples: dict[str, Sample]) -> str:
    kinds = {"runs" if isinstance(s, np.ndarray) else "parametric (mean, std, n)" for s in samples.values()}
    return kinds.pop() if len(kinds) == 1 else "mixed"


def _agg_draws(lb: Leaderboard, source: str, entry: str, tasks: list[str], rng, n_boot: int) -> np.ndarray:
    samples = task_samples(lb, source, entry)
    rows = []
    for task in tasks:
        t = lb.tasks.loc[task]
        direction = Direction.of(bool(t["higher_is_better"]))
        rows.append(direction.relative(_draw_means(rng, samples[task], n_boot), t["baseline"]))
    return np.mean(rows, axis=0)


def bootstrap_agg(lb: Leaderboard, n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> pd.DataFrame:
    """Per agent entry: Agg and its bootstrap percentile interval (``lo``, ``hi``), with the method used."""
    rng = np.random.default_rng(seed)
    alpha = (1 - level) / 2
    rows = []
    for e in lb.summary[lb.summary["kind"] == "agent"].itertuples():
        samples = task_samples(lb, e.source, e.entry)
        if not samples:
            continue
        draws = _agg_draws(lb, e.source, e.entry, list(samples), rng, n_boot)
        if min(_n(s) for s in samples.values()) < 2:  # one run says nothing about its spread: no interval, not a
            draws = np.full(n_boot, np.nan)  # zero-width one (the table shows "–", the figure a bare point)
        rows.append(
            {
                "source": e.source,
                "entry": e.entry,
                "agg": e.agg,
                "lo": np.nanquantile(draws, alpha) if np.isfinite(draws).any() else np.nan,
                "hi": np.nanquantile(draws, 1 - alpha) if np.isfinite(draws).any() else np.nan,
                "method": _method(samples),
                "n_boot": n_boot,
                "tasks": len(samples),
                "of_tasks": e.of_tasks,
                "superseded_by": e.superseded_by,  # the figure marks what the tables mark
                "nonstandard": e.nonstandard,
                "deviations": e.deviations,
            }
        )
    cols = ["source", "entry", "agg", "lo", "hi", "method", "n_boot", "tasks", "of_tasks"]
    return pd.DataFrame(rows, columns=cols + ["superseded_by", "nonstandard", "deviations"])


def compare(lb: Leaderboard, a: str, b: str, n_boot: int = 2000, seed: int = 0) -> dict:
    """Paired comparison of two entries (names as :meth:`Leaderboard.find` takes them) over their common tasks."""
    (sa, ea), (sb, eb) = lb.find(a), lb.find(b)
    ca = lb.cells[(lb.cells["source"] == sa) & (lb.cells["entry"] == ea)].set_index("task")
    cb = lb.cells[(lb.cells["source"] == sb) & (lb.cells["entry"] == eb)].set_index("task")
    common = [t for t in lb.tasks.index if t in ca.index and t in cb.index]
    common = [t for t in common if pd.notna(ca.loc[t, "rel_mean"]) and pd.notna(cb.loc[t, "rel_mean"])]
    rows = []
    for t in common:
        x, y = ca.loc[t], cb.loc[t]
        p = welch_p(x["mean"], x["std"], x["n_success"], y["mean"], y["std"], y["n_success"])
        rows.append(
            {
                "task": t,
                "label": lb.tasks.loc[t, "label"],
                "mean_a": x["mean"],
                "mean_b": y["mean"],
                "std_a": x["std"],
                "std_b": y["std"],
                "n_a": x["n_success"],
                "n_b": y["n_success"],
                "rel_a": x["rel_mean"],
                "rel_b": y["rel_mean"],
                "diff": x["rel_mean"] - y["rel_mean"],
                "p_welch": p,
            }
        )
    per_task = pd.DataFrame(
        rows,
        columns=[
            "task",
            "label",
            "mean_a",
            "mean_b",
            "std_a",
            "std_b",
            "n_a",
            "n_b",
            "rel_a",
            "rel_b",
            "diff",
            "p_welch",
        ],
    )
    diff = per_task["diff"].to_numpy(dtype=float)
    overall = {
        "n_tasks": len(common),
        "agg_a": np.nan,
        "agg_b": np.nan,
        "diff": np.nan,
        "diff_lo": np.nan,
        "diff_hi": np.nan,
        "p_wilcoxon": np.nan,
        "wins_a": int((diff > 1e-12).sum()),
        "wins_b": int((diff < -1e-12).sum()),
    }
    overall["ties"] = len(common) - overall["wins_a"] - overall["wins_b"]
    if common:
        rng = np.random.default_rng(seed)
        draws = _agg_draws(lb, sa, ea, common, rng, n_boot) - _agg_draws(lb, sb, eb, common, rng, n_boot)
        overall.update(
            agg_a=per_task["rel_a"].mean(),
            agg_b=per_task["rel_b"].mean(),
            diff=diff.mean(),
            diff_lo=np.quantile(draws, 0.025),
            diff_hi=np.quantile(draws, 0.975),
        )
    overall["p_wilcoxon"] = wilcoxon_p(diff)
    return {"a": f"{ea} [{sa}]", "b": f"{eb} [{sb}]", "tasks": per_task, "overall": overall}
