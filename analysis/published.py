"""Numbers that are not agent runs in MLflow: the paper's published results and the tuned baselines.

The paper's per-task numbers live in ``analysis/data/published/`` (transcribed from the
paper's tables, see ``PROVENANCE.md`` there); they come back here as *cells* in the same columns as the ones
:func:`analysis.leaderboard.cells` makes from MLflow runs, so every table and figure treats a
published row and a new row alike. The Optuna-tuned reference baselines (``baselines/results/<task>.json``,
one tuned configuration per task) become the calibration row "Optuna-tuned".
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from bench.tasks.direction import Direction

DATA = Path(__file__).resolve().parent / "data" / "published"
PAPER = "arXiv:2605.17046v2"
CALIBRATION_DIR = Path(__file__).resolve().parents[1] / "baselines" / "results"
CALIBRATION_LABEL = "Optuna-tuned"
PUBLISHED = "published"
CALIBRATION = "calibration"

# The paper's CLIs -> names in the dispatch table, so that a new run of the same CLI and model is
# recognised as the same agent as a published row (the supersede rule compares them).
CLI_AGENT = {"Claude Code": "claude-code", "Codex CLI": "codex", "OpenCode": "opencode"}
# Figure 3 groups agents by harness, not by licence: the vendors' own CLIs ("proprietary") against the
# OpenCode cluster, which holds Qwen 3.6+ (a proprietary model) beside the two Kimi models (paper §4.2, Fig. 3)
PROPRIETARY_HARNESS, OPENCODE_HARNESS, OTHER_HARNESS = "proprietary", "OpenCode", "other"
AGENT_HARNESS = {"claude-code": PROPRIETARY_HARNESS, "codex": PROPRIETARY_HARNESS, "opencode": OPENCODE_HARNESS}
UNREGISTERED_CLI = "CLI not in Table 3"  # a results row whose agent agents.csv does not list
METRIC_LABELS = {"val_bpb": "bpb", "top1_acc": "Acc", "miou": "mIoU", "auroc": "AUROC", "accuracy": "Acc", "mse": "MSE"}


def model_key(model: str) -> str:
    """A model name as compared across sources: lower case, without a router prefix (``moonshotai/``)."""
    return str(model or "").strip().lower().rsplit("/", 1)[-1]


@cache
def _csv(name: str) -> pd.DataFrame:
    return pd.read_csv(DATA / name)


def published_tasks() -> pd.DataFrame:
    """Table 2 and the Reference row, indexed by task id (``t1`` ... ``t7``)."""
    t = _csv("tasks.csv").copy()
    t["task"] = t["task"].str.lower()
    return pd.DataFrame(
        {
            "label": t["task"].str.upper().values,
            "title": t["domain"].values,
            "metric": t["metric"].values,
            "higher_is_better": [Direction(d).higher_is_better for d in t["direction"]],  # "higher" / "lower"
            "baseline": t["baseline_score"].astype(float).values,
            "paper_baseline": t["baseline_score"].astype(float).values,  # Table 2: what published rows' Agg uses
            "reference": t["reference_score"].astype(float).values,
            "reference_source": t["reference_source"].fillna("").values,
            "budget_min": t["budget_min"].astype(float).values,
        },
        index=pd.Index(t["task"], name="task"),
    )


def tasks(registry: bool = True) -> pd.DataFrame:
    """Task metadata: the harness's ``task.toml`` (when ``registry``) over the paper's Table 2.

    The harness is the truth for the tasks it has (a lab may re-measure a baseline on its hardware);
    the paper fills in the tasks that are not installed, so published rows always have their baselines.
    """
    table = published_tasks()
    # the reference of the gap-closed measure (analysis.gap): the paper's Reference row unless task.toml says more
    table["gap_reference"], table["gap_reference_source"] = table["reference"], table["reference_source"]
    table["gap_reference_name"] = np.where(table["reference"].notna(), "paper_reference", "")
    if not registry:
        return table
    from bench.tasks import TaskError, all_tasks

    try:
        installed = all_tasks()
    except (TaskError, OSError):
        installed = []
    for t in installed:
        row = {
            "label": t.id.upper(),
            "title": t.title,
            "metric": t.metric,
            "higher_is_better": t.higher_is_better,
            "baseline": float(t.baseline_score),
            "budget_min": float(t.budget_minutes),
            "gap_reference": t.reference.score if t.reference else np.nan,
            "gap_reference_name": t.reference.name if t.reference else "",
            "gap_reference_source": t.reference.source if t.reference else "",
        }
        if t.id in table.index:
            for k, v in row.items():
                table.loc[t.id, k] = v
            if t.reference_score is not None:
                table.loc[t.id, "reference"] = float(t.reference_score)
        else:
            extra = {"reference": t.reference_score or np.nan, "reference_source": "", "paper_baseline": np.nan}
            table.loc[t.id] = {**row, **extra}
    table["higher_is_better"] = table["higher_is_better"].astype(bool)
    return table.sort_index(key=lambda s: s.str.extract(r"(\d+)")[0].astype(float).fillna(1e9))


def harness(agent_name: str) -> str:
    """Figure 3's group of an agent by its dispatch name: ``proprietary`` (Claude Code, Codex CLI), ``OpenCode``,
    or ``other`` for a harness the paper did not run."""
    return AGENT_HARNESS.get(str(agent_name or ""), OTHER_HARNESS)


def metric_label(metric: str) -> str:
    return METRIC_LABELS.get(metric, metric)


def published_agents() -> pd.DataFrame:
    """Table 3: display name, CLI, model, provider, family, run dates (paper order)."""
    a = _csv("agents.csv").copy()
    a["agent_name"] = a["cli"].map(CLI_AGENT).fillna(a["cli"].str.lower().str.replace(" ", "-"))
    return a


def published_cells() -> pd.DataFrame:
    """Tables 4, 5, 6 and 8 as cells: one row per published agent and task."""
    r = _csv("results.csv").copy()
    agents = published_agents().set_index("agent")
    tk = published_tasks()
    util = _csv("codex_budget_utilisation.csv").copy()
    util["task"] = util["task"].str.lower()
    util = util.set_index(["agent", "task"])
    r["task"] = r["task"].str.lower()
    key = list(zip(r["agent"], r["task"], strict=True))
    used = util.reindex(key)
    # an agent that agents.csv does not list still gets a row: its own group, its name as dispatch name, no model
    own_name = r["agent"].str.lower().str.replace(" ", "-")
    name = r["agent"].map(agents["agent_name"]).fillna(own_name)
    return pd.DataFrame(
        {
            "source": PUBLISHED,
            "kind": "agent",
            "group": "Published: " + r["agent"].map(agents["cli"]).fillna(UNREGISTERED_CLI),
            "entry": r["agent"],
            "agent": name,
            "model": r["agent"].map(agents["model"]).fillna(""),
            "family": r["agent"].map(agents["family"]).fillna(""),
            "harness": name.map(harness),
            "task": r["task"],
            "n_runs": r["n_runs"].astype(int),
            "n_success": r["n_success"].astype(int),
            "mean": r["mean"].astype(float),
            "std": r["std"].astype(float),
            "best": r["best"].astype(float),
            "mean_scripts": r["mean_scripts"].astype(float),
            "budget_min": r["task"].map(tk["budget_min"]),
            "wall_min": used["used_min"].to_numpy(),
            "utilisation": used["utilisation_pct"].to_numpy() / 100.0,
            "synthetic": False,
        }
    )


def calibration_cells(directory: Path | None = None) -> pd.DataFrame:
    """The "Optuna-tuned" row: one cell per committed ``baselines/results/<task>.json`` (none: empty).

    Each cell keeps where and how it was tuned (``hardware``, ``trials``, ``budget_min``, and ``detail`` in
    words), because these files come from whatever machine ran ``bench baselines tune`` (the committed ones: a
    2-core CPU, a few trials), not from the paper's protocol; :func:`calibration_label` and the tables say so."""
    folder = Path(directory) if directory is not None else CALIBRATION_DIR
    rows = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            d = json.loads(path.read_text())
            score = float(d["official_score"])
            task = str(d["task"]).lower()
        except (ValueError, KeyError, TypeError):
            continue  # a file being written, or not a result: not a row
        budget = float(d.get("budget_s", np.nan)) / 60.0
        pruned = f" ({d['pruned']} pruned)" if d.get("pruned") is not None else ""
        rows.append(
            {
                "source": CALIBRATION,
                "kind": CALIBRATION,
                "group": "",
                "entry": CALIBRATION_LABEL,
                "agent": "optuna",
                "model": "",
                "family": "",
                "task": task,
                "n_runs": 1,
                "n_success": 1,
                "mean": score,
                "std": np.nan,
                "best": score,
                "mean_scripts": np.nan,  # trials of the tuning driver are not an agent's launches
                "budget_min": budget,
                "synthetic": False,
                "hardware": str(d.get("hardware") or "unknown hardware"),
                "trials": float(d["trials"]) if d.get("trials") is not None else np.nan,
                "detail": f"{task.upper()}: {d.get('trials', '?')} trials{pruned} in {budget:g} min on "
                f"{d.get('hardware') or 'unknown hardware'}, {d.get('date', '?')}",
            }
        )
    return pd.DataFrame(rows)


def calibration_label(cells: pd.DataFrame) -> str:
    """The Optuna-tuned row's label with where and how it was tuned: ``Optuna-tuned (CPU, 5-42 trials)``.

    Hardware in one word when it is not the paper's GPU (``CPU`` for a CPU-only machine), "mixed hardware" when
    the tasks were tuned on different machines; trials as one number or a range."""
    from bench.protocol import is_paper_gpu

    if cells.empty:
        return CALIBRATION_LABEL

    def short(h: str) -> str:  # baselines/tune.py:hardware(): "GPU (CUDA x), CPU xN, ..." or "CPU, N cores, no GPU ..."
        if is_paper_gpu(h):
            return "A100 80GB"
        return h.split(" (CUDA", 1)[0] if "(cuda" in h.lower() else ("CPU" if "cpu only" in h.lower() else h)

    kinds = {short(h) for h in cells["hardware"].fillna("unknown hardware")}
    where = kinds.pop() if len(kinds) == 1 else "mixed hardware"
    t = cells["trials"].dropna()
    span = "?" if t.empty else f"{t.min():.0f}" + (f"-{t.max():.0f}" if t.max() > t.min() else "")
    trials = f"{span} trials"
    return f"{CALIBRATION_LABEL} ({where}, {trials})"
