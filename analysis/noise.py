"""A noise floor per task: how far the unchanged baseline moves from seed to seed, and each entry's gain against it.

Five repeats of a baseline with a fixed seed are five copies of one number: they say nothing about how much of an
agent's gain is the task's own run-to-run noise. Repeats of a seeded agent (``baseline``, ``optuna``) draw a seed
each (``bench.runspec.draw_seed``, recorded as the run's ``seed`` param); the ``baseline`` agent's repeats with
distinct recorded seeds measure the task's noise here:

- per task, the baseline runs' Eq. 1 terms ``r_i`` (paper Eq. 1's per-task term of one run's score against the
  task's baseline b, sign-corrected so that higher is better), their mean ``m`` and sample std ``s`` over ``n``
  distinct seeds (at least :data:`MIN_SEEDS`, else the task has no floor from this campaign);
- the **noise interval** of one run: ``m ± t(0.975, n-1) · s · sqrt(1 + 1/n)``, the 95 % prediction interval of
  the term one more seed of the baseline would get (a normal model of the seeds; Student's t for the few of them);
- each entry's **gain** on the task: the mean of its successful runs' terms (the leaderboard's cell), with its 95 %
  t-interval over those runs; it **clears the noise** when the gain exceeds ``m + t · s · sqrt(1/k + 1/n)``, the
  upper end of where the mean of ``k`` baseline seeds would fall (``k``: the entry's successful runs).

Where a campaign has no such baseline runs, a floor measured by ``bench baselines noise`` (``baselines/results/
noise/<task>.json``) is used, and the table says where it was measured and on which data (``small`` data: generated,
a few steps on a CPU: a floor of the code's nondeterminism, not of the task's, until a GPU runs it on the real data).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.leaderboard import AGENT, Leaderboard
from analysis.render import Cell, Row, Table
from bench.tasks.direction import relative

MIN_SEEDS = 3  # fewer distinct seeds give no usable spread (the issue's own bar is five: bench baselines noise)
NOISE_AGENT = "baseline"
RESULTS_DIR = Path(__file__).resolve().parents[1] / "baselines" / "results" / "noise"
FLOOR_COLUMNS = "task n seeds mean_score std_score mean_rel std_rel lo hi source data hardware".split()


@dataclass(frozen=True)
class Floor:
    """One task's noise floor: the baseline's Eq. 1 terms over ``n`` distinct seeds (``mean``, ``std``)."""

    mean: float
    std: float
    n: int

    def t(self) -> float:
        from scipy.stats import t as student

        return float(student.ppf(0.975, self.n - 1))

    def interval(self) -> tuple[float, float]:
        """The 95 % prediction interval of one more seed's term."""
        half = self.t() * self.std * math.sqrt(1 + 1 / self.n)
        return self.mean - half, self.mean + half

    def clears(self, gain: float, k: int) -> bool:
        """Whether a mean term over ``k`` runs is above where the mean of ``k`` baseline seeds would fall."""
        return bool(gain > self.mean + self.t() * self.std * math.sqrt(1 / max(k, 1) + 1 / self.n))


def seeded_baseline_runs(agents: pd.DataFrame) -> pd.DataFrame:
    """The successful ``baseline`` agent runs with a recorded seed, one per (experiment, task, seed)."""
    if agents is None or agents.empty or "seed" not in agents:
        return pd.DataFrame(columns=["experiment", "task", "seed", "score"])
    seed = pd.to_numeric(agents["seed"], errors="coerce")
    ok = (agents["agent"] == NOISE_AGENT) & (agents["status"] == "success") & agents["score"].notna() & seed.notna()
    runs = agents[ok].assign(seed=seed[ok].astype("int64"))
    return runs.drop_duplicates(["experiment", "task", "seed"])


def floors(lb: Leaderboard, results_dir: Path | None = None) -> pd.DataFrame:
    """One row per task of the leaderboard (:data:`FLOOR_COLUMNS`): from the reported campaigns' seeded baseline
    runs where they have at least :data:`MIN_SEEDS` distinct seeds, else from a measured file, else none (NaN)."""
    agents = lb.runs.agents if lb.runs is not None else pd.DataFrame()
    runs = seeded_baseline_runs(agents)
    rows = []
    for task, meta in lb.tasks.iterrows():
        mine = runs[runs["task"] == task]
        row = {"task": task, "n": 0, "seeds": "", "source": "", "data": "", "hardware": ""}
        if mine["seed"].nunique() >= MIN_SEEDS and pd.notna(meta["baseline"]):
            scores = mine["score"].astype(float)
            terms = pd.Series(relative(scores, meta["baseline"], bool(meta["higher_is_better"])))
            row.update(
                n=len(mine),
                seeds=",".join(str(s) for s in mine["seed"]),
                mean_score=scores.mean(),
                std_score=scores.std(),
                mean_rel=terms.mean(),
                std_rel=terms.std(),
                source=", ".join(sorted(set(mine["experiment"]))),
                data="synthetic" if mine.get("synthetic", pd.Series(False)).any() else "full",
                hardware=", ".join(sorted({h for h in mine.get("hardware", []) if h})),
            )
        elif (measured := _measured(task, results_dir)) is not None:
            row.update(measured)
        rows.append(row)
    out = pd.DataFrame(rows).reindex(columns=FLOOR_COLUMNS)
    for i, r in out.iterrows():
        if r["n"] >= MIN_SEEDS and pd.notna(r["std_rel"]):
            out.loc[i, ["lo", "hi"]] = Floor(r["mean_rel"], r["std_rel"], int(r["n"])).interval()
    return out


def _measured(task: str, results_dir: Path | None) -> dict | None:
    """The floor ``bench baselines noise`` wrote for a task (its JSON file), or None."""
    path = Path(results_dir or RESULTS_DIR) / f"{task}.json"
    if not path.is_file():
        return None
    d = json.loads(path.read_text())
    return {
        "n": len(d["seeds"]),
        "seeds": ",".join(str(s) for s in d["seeds"]),
        "mean_score": d["mean_score"],
        "std_score": d["std_score"],
        "mean_rel": d["mean_rel"],
        "std_rel": d["std_rel"],
        "source": f"{path.name} ({d.get('date', '?')})",
        "data": d.get("data", "full"),
        "hardware": d.get("hardware", ""),
    }


def gains(lb: Leaderboard, floor: pd.DataFrame) -> pd.DataFrame:
    """Each MLflow entry's gain per task (Eq. 1's term of its mean) with its 95 % t-interval, the task's noise
    interval, and whether the gain clears the noise."""
    from scipy.stats import t as student

    by_task = floor.set_index("task")
    rows = []
    cells = lb.cells[(lb.cells["kind"] == AGENT) & lb.cells["rel_mean"].notna()]
    for c in cells.itertuples():
        scores = lb.run_scores(c.source, c.entry, c.task)
        terms = None if scores is None else pd.Series(relative(scores, c.baseline, bool(c.higher_is_better)))
        k = len(terms) if terms is not None else int(c.n_success)
        half = np.nan
        if terms is not None and k >= 2:
            half = float(student.ppf(0.975, k - 1) * terms.std() / math.sqrt(k))
        f = by_task.loc[c.task] if c.task in by_task.index else None
        has_floor = f is not None and pd.notna(f["lo"])
        clears = Floor(f["mean_rel"], f["std_rel"], int(f["n"])).clears(c.rel_mean, k) if has_floor else None
        rows.append(
            {
                "source": c.source,
                "entry": c.entry,
                "task": c.task,
                "runs": k,
                "gain": c.rel_mean,
                "gain_lo": c.rel_mean - half,
                "gain_hi": c.rel_mean + half,
                "noise_lo": f["lo"] if has_floor else np.nan,
                "noise_hi": f["hi"] if has_floor else np.nan,
                "clears": clears,
            }
        )
    return pd.DataFrame(rows)


def _pm(lo: float, hi: float) -> str:
    return f"[{lo:+.4f}, {hi:+.4f}]" if pd.notna(lo) and pd.notna(hi) else "–"


def noise_table(lb: Leaderboard, results_dir: Path | None = None) -> Table:
    """The report's ``noise`` table: per task its floor, then each entry's gain against it."""
    floor = floors(lb, results_dir)
    table = gains(lb, floor)
    t = Table(
        "noise",
        "Noise floor",
        "Each entry's gain per task (Eq. 1's term of its mean score, with its 95 % t-interval over its runs) against "
        "the task's noise: the 95 % interval of the term of one run of the unchanged baseline with a fresh seed "
        "(its seeded repeats: bench run --agent baseline --repeats 5, or bench baselines noise). Clears: the gain "
        "is above where the mean of as many baseline seeds would fall. See analysis/noise.py.",
        ["Task", "Runs", "Gain", "95 % interval", "Noise interval", "Clears"],
        None,
        corner="Entry",
    )
    for r in table.itertuples():
        clears = "–" if r.clears is None else ("yes" if r.clears else "no")
        t.rows.append(
            Row(
                f"{r.entry} [{r.source}]",
                [
                    Cell(r.task.upper()),
                    Cell(str(r.runs)),
                    Cell(f"{r.gain:+.4f}"),
                    Cell(_pm(r.gain_lo, r.gain_hi)),
                    Cell(_pm(r.noise_lo, r.noise_hi)),
                    Cell(clears),
                ],
            )
        )
    t.data = table
    for f in floor.itertuples():
        if pd.isna(f.lo):
            t.notes.append(
                f"{f.task.upper()}: no noise floor (fewer than {MIN_SEEDS} baseline runs with distinct recorded "
                f"seeds; bench run --agent baseline --task {f.task} --repeats 5 measures one)"
            )
            continue
        where = f"{f.data} data"
        if f.data == "small":
            where += " (generated, a few CPU steps: not the task's noise until a GPU runs it on its data)"
        t.notes.append(
            f"{f.task.upper()}: baseline score {f.mean_score:.4f} ± {f.std_score:.4f} (std) over {f.n} seeds "
            f"({f.seeds}); noise interval of Eq. 1's term {_pm(f.lo, f.hi)}; from {f.source}, {where}"
            + (f", {f.hardware}" if f.hardware else "")
        )
    return t
