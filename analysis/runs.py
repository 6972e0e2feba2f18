"""MLflow -> tidy pandas DataFrames, through the tag schema (never by parsing logs)."""

from __future__ import annotations

import pandas as pd

from bench.tracking import schema, store

AGENT_COLUMNS = {
    f"tags.{schema.AGENT}": "agent",
    f"tags.{schema.MODEL}": "model",
    f"tags.{schema.TASK}": "task",
    f"tags.{schema.REPEAT}": "repeat",
    f"tags.{schema.STATUS}": "status",
    f"tags.{schema.REASON}": "reason",
    f"metrics.{schema.SCORE}": "score",
    f"metrics.{schema.WALL_TIME}": "wall_time_s",
    f"metrics.{schema.BUDGET_UTILISATION}": "budget_utilisation",
    f"metrics.{schema.SCRIPTS_LAUNCHED}": "scripts_launched",
    "run_id": "run_id",
}


def agent_runs(campaign: str) -> pd.DataFrame:
    """One row per agent run of a campaign: agent, model, task, repeat, status, score, wall time, ..."""
    import mlflow

    store.client()
    exp = mlflow.get_experiment_by_name(campaign)
    if exp is None:
        return pd.DataFrame(columns=list(AGENT_COLUMNS.values()))
    df = mlflow.search_runs([exp.experiment_id], filter_string=f"tags.`{schema.KIND}` = '{schema.KIND_AGENT}'")
    for col in AGENT_COLUMNS:
        if col not in df:
            df[col] = None
    df = df[list(AGENT_COLUMNS)].rename(columns=AGENT_COLUMNS)
    df["repeat"] = pd.to_numeric(df["repeat"], errors="coerce").astype("Int64")
    return df.sort_values(["task", "agent", "repeat"]).reset_index(drop=True)


def leaderboard(runs: pd.DataFrame, baselines: dict[str, float]) -> pd.DataFrame:
    """Per agent x task: mean and std of the score over successful runs, and success n/N."""
    if runs.empty:
        return pd.DataFrame(columns=["task", "agent", "mean", "std", "success", "baseline"])
    ok = runs[runs["status"] == "success"]
    stats = ok.groupby(["task", "agent"])["score"].agg(["mean", "std"])
    counts = runs.groupby(["task", "agent"]).agg(n=("status", "size"), ok=("status", lambda s: (s == "success").sum()))
    table = counts.join(stats).reset_index()
    table["success"] = table["ok"].astype(str) + "/" + table["n"].astype(str)
    table["baseline"] = table["task"].map(baselines)
    return table[["task", "agent", "mean", "std", "success", "baseline"]]
