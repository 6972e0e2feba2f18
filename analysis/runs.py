"""MLflow -> tidy pandas DataFrames, through the tag schema (never by parsing logs or run names).

Three tables, one row per run, joined by ``run_id`` / ``parent_run_id``:

- agent runs: agent, model, task, repeat, status, official score, wall time, budget utilisation,
  scripts launched, tokens, cost (what the leaderboard and the paper's tables need), and whether the run
  kept the paper's protocol (``nonstandard``, ``deviations``: see :mod:`analysis.deviations`);
- script runs: every traced ``run_<x>.py`` with its start and end in minutes into the agent's budget
  (the timelines);
- eval runs: every officially evaluated checkpoint with the minute it was saved (the anytime curves).

Each kind is read in one pass through the store's one reading interface (:mod:`bench.tracking.reader`): MLflow's
public API, or a fast path where the store has one (its tables, about a second for a campaign of the paper's size;
a server's bulk histories), with the same values. Metric histories are fetched only on demand
(:func:`metric_history`).

Every tag, param and metric name read from MLflow comes from :mod:`bench.tracking.schema`, never spelled
here (a column that carries a metric is named like it, e.g. ``tokens_input``); the direction param is read
through :class:`bench.tasks.Direction`. The leaderboard built on these tables is :mod:`analysis.leaderboard`
(imports point one way: it uses this module, never the reverse).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis import deviations
from bench.tasks.direction import Direction
from bench.tracking import reader, schema

AGENT_COLUMNS = (
    "run_id experiment agent model task repeat seed status reason score metric higher_is_better budget_min "
    "wall_time_s budget_utilisation scripts_launched launches_observed checkpoints best_val_score "
    "tokens_input tokens_output tokens_cached cost_usd cost_source api_budget start_time end_time synthetic "
    "partial_data unsandboxed too_short "
    "audit_disqualified audit_flagged nonstandard deviations deviation_notes hardware "
    "task_source task_pack task_pack_version task_sha256 tags"
).split()
SCRIPT_COLUMNS = (
    "run_id parent_run_id experiment agent task repeat script exit reason start_time end_time start_min "
    "end_min last_val_score"
).split()
EVAL_COLUMNS = (
    "run_id parent_run_id experiment agent task repeat candidate script saved_minutes val_score official_score error"
).split()


@dataclass
class RunSet:
    """The runs of one or more experiments: agent runs and their script and eval child runs."""

    agents: pd.DataFrame
    scripts: pd.DataFrame
    evals: pd.DataFrame

    @property
    def empty(self) -> bool:
        return self.agents.empty


def _read(names: list[str] | None, fast: bool | None, children: bool) -> tuple[dict[str, str], list[pd.DataFrame]]:
    kinds = [(schema.KIND_AGENT, True)] + ([(schema.KIND_SCRIPT, False), (schema.KIND_EVAL, False)] if children else [])
    source = reader.open_reader(fast)
    exps = source.experiments(names)
    return exps, [source.runs(list(exps), k, p) for k, p in kinds]


def _col(w: pd.DataFrame, name: str, default=np.nan) -> pd.Series:
    return (
        w[name] if name in w else pd.Series(default, index=w.index, dtype=object if isinstance(default, str) else float)
    )


def _num(w: pd.DataFrame, name: str) -> pd.Series:
    return pd.to_numeric(_col(w, name), errors="coerce").astype(float)


def _ms(series: pd.Series) -> pd.Series:
    return pd.to_numeric(series, errors="coerce").astype(float) / 1000.0


def _first_official(w: pd.DataFrame) -> pd.Series:
    """The run's ``official_<metric>`` value (a run logs one: its task's)."""
    prefix = f"m:{schema.official_metric('')}"
    cols = [c for c in w.columns if c.startswith(prefix)]
    return w[cols].bfill(axis=1).iloc[:, 0].astype(float) if cols else pd.Series(np.nan, index=w.index)


def _higher_is_better(value) -> bool | float:
    """The direction param as ``higher_is_better``; NaN where it is missing or not a direction (the task decides)."""
    try:
        return Direction(value).higher_is_better
    except ValueError:
        return np.nan


def _agents(w: pd.DataFrame, names: dict[str, str]) -> pd.DataFrame:
    if w.empty:
        return pd.DataFrame(columns=AGENT_COLUMNS)
    t = lambda k, d="": _col(w, f"t:{k}", d).fillna(d)  # noqa: E731
    score = _num(w, f"m:{schema.SCORE}").fillna(_first_official(w))
    out = pd.DataFrame(
        {
            "run_id": w["run_id"],
            "experiment": w["experiment_id"].map(names),
            "agent": t(schema.AGENT),
            "model": t(schema.MODEL),
            "task": t(schema.TASK),
            "repeat": pd.to_numeric(t(schema.REPEAT), errors="coerce"),
            # the run's recorded seed (a seeded agent's draw, bench run --seed); NaN for a run without one
            "seed": pd.to_numeric(_col(w, f"p:{schema.PARAM_SEED}", ""), errors="coerce"),
            "status": t(schema.STATUS),
            "reason": t(schema.REASON),
            "score": score,
            "metric": _col(w, f"p:{schema.PARAM_METRIC}", "").fillna(""),
            "higher_is_better": _col(w, f"p:{schema.PARAM_DIRECTION}", "").map(_higher_is_better),
            "budget_min": _num(w, f"p:{schema.PARAM_BUDGET_MINUTES}"),
            "wall_time_s": _num(w, f"m:{schema.WALL_TIME}"),
            "budget_utilisation": _num(w, f"m:{schema.BUDGET_UTILISATION}"),
            "scripts_launched": _num(w, f"m:{schema.SCRIPTS_LAUNCHED}"),
            "launches_observed": _num(w, f"m:{schema.LAUNCHES_OBSERVED}"),
            "checkpoints": _num(w, f"m:{schema.CHECKPOINTS}"),
            "best_val_score": _num(w, f"m:{schema.BEST_VAL}"),
            "tokens_input": _num(w, f"m:{schema.TOKENS_INPUT}"),
            "tokens_output": _num(w, f"m:{schema.TOKENS_OUTPUT}"),
            "tokens_cached": _num(w, f"m:{schema.TOKENS_CACHED}"),
            "cost_usd": _num(w, f"m:{schema.COST_USD}"),
            # where cost_usd came from (gateway, cli, unknown) and the API budget's state ("" without one)
            "cost_source": t(schema.COST_SOURCE).fillna(""),
            "api_budget": t(schema.API_BUDGET).fillna(""),
            "start_time": _ms(w["start_time"]),
            "end_time": _ms(w["end_time"]),
            "synthetic": t(schema.SYNTHETIC).str.lower() == "true",
            "partial_data": t(schema.PARTIAL_DATA).str.lower() == "true",
            # marked only when the run says so: runs recorded before the sandbox existed carry no tag
            "unsandboxed": t(schema.SANDBOXED).str.lower() == "false",
            # why the run is too short to compare ("" when it is not: bench.pipeline.record.too_short)
            "too_short": t(schema.TOO_SHORT).fillna(""),
            # the rules the audit found broken / flagged, comma-joined ("" when none, or for runs before the audit)
            "audit_disqualified": t(schema.AUDIT_DISQUALIFIED).fillna(""),
            "audit_flagged": t(schema.AUDIT_FLAGGED).fillna(""),
            # where the task came from (bench.tasks.packs) and its folder's hash ("" for runs before task packs)
            "task_source": t(schema.TASK_SOURCE),
            "task_pack": t(schema.TASK_PACK),
            "task_pack_version": t(schema.TASK_PACK_VERSION),
            "task_sha256": t(schema.TASK_SHA256),
            # the run's own labels (bench run --tag, a campaign's tags): {key: value}, {} for a run without
            "tags": _labels(w),
        }
    )
    # the paper's protocol: the run's own verdict (bench.protocol tags), or one derived from what an older run has
    tags = {k: t(k) for k in (schema.PROTOCOL, schema.DEVIATIONS, schema.DEVIATION_NOTES, schema.HARDWARE)}
    params = {schema.PARAM_DEVICE: _col(w, f"p:{schema.PARAM_DEVICE}", "").fillna("")}
    out[["nonstandard", "deviations", "deviation_notes", "hardware"]] = deviations.protocol_columns(tags, params, out)
    return out[AGENT_COLUMNS]


def _labels(w: pd.DataFrame) -> pd.Series:
    """Each run's ``bench.tag.KEY`` tags as {KEY: value}."""
    prefix = f"t:{schema.TAG_PREFIX}"
    cols = [c for c in w.columns if c.startswith(prefix)]
    rows = w[cols].to_dict("records") if cols else [{} for _ in range(len(w))]
    return pd.Series([{k[len(prefix) :]: v for k, v in r.items() if isinstance(v, str)} for r in rows], index=w.index)


def _child(w: pd.DataFrame, names: dict[str, str]) -> dict[str, pd.Series]:
    t = lambda k: _col(w, f"t:{k}", "").fillna("")  # noqa: E731
    return {
        "run_id": w["run_id"],
        "parent_run_id": t(schema.PARENT),
        "experiment": w["experiment_id"].map(names),
        "agent": t(schema.AGENT),
        "task": t(schema.TASK),
        "repeat": pd.to_numeric(t(schema.REPEAT), errors="coerce"),
        "script": t(schema.SCRIPT),
    }


def _scripts(w: pd.DataFrame, names: dict[str, str]) -> pd.DataFrame:
    if w.empty:
        return pd.DataFrame(columns=SCRIPT_COLUMNS)
    exit_ = _col(w, f"t:{schema.EXIT}", "").fillna("")
    return pd.DataFrame(
        {
            **_child(w, names),
            "exit": exit_.where(exit_ != "", w["status"]),
            "reason": _col(w, f"t:{schema.REASON}", "").fillna(""),
            "start_time": _ms(w["start_time"]),
            "end_time": _ms(w["end_time"]),
            "last_val_score": _num(w, f"m:{schema.CHECKPOINT_SCORE}"),
        }
    ).reindex(columns=SCRIPT_COLUMNS)


def _evals(w: pd.DataFrame, names: dict[str, str]) -> pd.DataFrame:
    if w.empty:
        return pd.DataFrame(columns=EVAL_COLUMNS)
    return pd.DataFrame(
        {
            **_child(w, names),
            "candidate": _col(w, f"t:{schema.CANDIDATE}", "").fillna(""),
            "saved_minutes": _num(w, f"m:{schema.EVAL_SAVED_MINUTES}"),
            "val_score": _num(w, f"m:{schema.EVAL_VAL_SCORE}"),
            "official_score": _first_official(w),
            "error": _col(w, f"t:{schema.REASON}", "").fillna(""),
        }
    )[EVAL_COLUMNS]


def load(
    experiments: str | Sequence[str] | None = None, *, include_children: bool = True, fast: bool | None = None
) -> RunSet:
    """Agent, script and eval runs of the named experiments (all experiments when None).

    ``fast``: read through the store's fast path (:func:`bench.tracking.reader.open_reader`) when it has one (None,
    the default), always (True: an error when it has none), or never (False: MLflow's public API only).
    """
    names = [experiments] if isinstance(experiments, str) else (list(experiments) if experiments else None)
    exps, wides = _read(names, fast, include_children)
    agents = _agents(wides[0], exps)
    agents["repeat"] = agents["repeat"].astype("Int64")
    agents = agents.sort_values(["experiment", "task", "agent", "model", "repeat"], kind="stable").reset_index(
        drop=True
    )
    if not include_children:
        return RunSet(agents, pd.DataFrame(columns=SCRIPT_COLUMNS), pd.DataFrame(columns=EVAL_COLUMNS))
    scripts, evals = _scripts(wides[1], exps), _evals(wides[2], exps)
    start = agents.set_index("run_id")["start_time"]
    parent_start = scripts["parent_run_id"].map(start).astype(float)
    scripts["start_min"] = (scripts["start_time"].astype(float) - parent_start) / 60.0
    scripts["end_min"] = (scripts["end_time"].astype(float) - parent_start) / 60.0
    for df in (scripts, evals):
        df["repeat"] = pd.to_numeric(df["repeat"], errors="coerce").astype("Int64")
    scripts = scripts.sort_values(["parent_run_id", "start_time"], kind="stable").reset_index(drop=True)
    evals = evals.sort_values(["parent_run_id", "saved_minutes"], kind="stable").reset_index(drop=True)
    return RunSet(agents, scripts, evals)


def agent_runs(campaign: str | Sequence[str] | None = None) -> pd.DataFrame:
    """One row per agent run of a campaign (an MLflow experiment; all experiments when None)."""
    return load(campaign, include_children=False).agents


def metric_history(run_ids: Iterable[str], key: str, fast: bool | None = None) -> pd.DataFrame:
    """Every logged value of metric ``key`` for the runs: run_id, step, value, time (unix seconds)."""
    return reader.open_reader(fast).metric_history(list(run_ids), key)


def latest_campaign(agents: pd.DataFrame | None = None) -> str | None:
    """The experiment (campaign) of the agent run started last: what a notebook reads when told nothing, since
    experiments mixed together compare an agent with itself and draw a 3-minute pilot on a 40-minute axis; ``bench
    report`` without ``--experiment`` too. ``agents``: :func:`agent_runs` already loaded."""
    agents = agent_runs() if agents is None else agents
    if agents.empty:
        return None
    return str(agents.loc[agents["start_time"].astype(float).idxmax(), "experiment"])
