"""The leaderboard: per agent x task statistics, Agg and Agg-max (paper Eq. 1), and the supersede rule.

Everything is built from *cells*: one row per leaderboard entry and task, whether the entry comes
from MLflow (an experiment's runs of one agent and model), from the paper (``source="published"``)
or from the tuned baselines (``source="calibration"``). An entry is identified by ``(source, entry)``.

Paper rules implemented here (Section 3.1 and Table 4/5/6 captions):

- mean and std over the *successful* runs only; success is n/N of all runs;
- best of N is the best successful run under the task's direction (:class:`bench.tasks.Direction`
  decides which way is better, here and in Eq. 1);
- Agg = mean over tasks of the baseline-relative improvement of the mean (Eq. 1), with the Table 2
  baselines; Agg-max the same with the best run. An entry that lacks a task (or whose runs on it all
  failed) gets its Agg over the tasks it has, and ``agg_tasks`` says how many;
- an entry evaluated over more runs supersedes one with fewer for the same agent and model (:func:`supersede`
  says what "more runs" means for a cell and for a whole entry): it keeps its numbers (a published row still
  reproduces the paper) but is marked, does not compete for best-in-column and, as a whole entry, is not ranked;
- runs outside the paper's protocol are marked, and left out when published rows are included unless asked
  (:mod:`analysis.deviations`);
- a cell whose runs had another budget than the task's own (deviation ``budget``: the demo's 8-minute T1 on a CPU, a
  ``--budget 3m`` trial) measured something else than the task: it never competes for best-in-column, and an entry
  with such a cell is listed with its Agg but not ranked (:func:`reduced_budget`), so a short trial is never shown
  as the best or the first against runs on the full budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis import deviations, gap
from analysis import published as pub
from analysis.runs import RunSet
from bench import protocol
from bench.errors import InputError
from bench.tasks.direction import Direction, relative, signs

CELL_COLUMNS = (
    "source kind group entry agent model family task n_runs n_success mean std best mean_scripts "
    "mean_scripts_all budget_min wall_min utilisation tokens_input tokens_output tokens_cached cost_usd "
    "synthetic partial_data unsandboxed too_short flagged nonstandard deviations deviation_notes hardware trials "
    "harness detail"
).split()
AGENT = "agent"
AGG_DIRECTION = Direction.MAX  # Eq. 1's terms (and Agg) grow with quality, whatever each task's direction


def identity(agent: str, model: str) -> str:
    """What makes two entries 'the same agent' for the supersede rule: dispatch name and model."""
    return f"{agent}|{pub.model_key(model)}"


def entry_labels(agents: pd.DataFrame) -> pd.Series:
    """Display name of each agent run's entry: the paper's name for a published CLI + model, else agent (model).

    The paper's names are the paper's: an entry (experiment, agent, model) with any run outside the paper's protocol
    (a pilot on a CPU, a mock API, a shorter budget: :mod:`analysis.deviations`) keeps its dispatch name
    (``claude-code (claude-opus-4-7)``), so that it never reads as the published row it is not."""
    known = {identity(r.agent_name, r.model): r.agent for r in pub.published_agents().itertuples()}
    agent, model = agents["agent"].fillna(""), agents["model"].fillna("")
    exp = agents["experiment"].fillna("") if "experiment" in agents else pd.Series("", index=agents.index)
    pilot = deviations.flags(agents).groupby([exp, agent, model]).transform("any")
    labels = [
        (None if p else known.get(identity(a, m))) or (f"{a} ({m})" if m else a)
        for a, m, p in zip(agent, model, pilot, strict=True)
    ]
    return pd.Series(labels, index=agents.index, dtype=object)


def higher_is_better(runs: pd.DataFrame, tasks: pd.DataFrame) -> pd.Series:
    """Each agent run's direction: its task's metadata, else the run's own param, else higher is better."""
    known = runs["task"].map(tasks["higher_is_better"]) if not tasks.empty else pd.Series(np.nan, index=runs.index)
    return known.astype(object).fillna(runs["higher_is_better"].astype(object)).fillna(True).astype(bool)


def cells(runs: pd.DataFrame, tasks: pd.DataFrame | None = None) -> pd.DataFrame:
    """Agent runs (from :func:`analysis.runs.load`) -> one cell per (experiment, agent, model, task)."""
    if runs.empty:
        return pd.DataFrame(columns=CELL_COLUMNS)
    tasks = pub.tasks() if tasks is None else tasks
    df = runs.copy()
    df["entry"] = entry_labels(df)
    df["ok"] = (df["status"] == "success") & df["score"].notna()  # a success without a score is not counted
    for flag in ("partial_data", "unsandboxed"):
        df[flag] = df[flag] if flag in df else False  # frames built by hand may lack them
    df["too_short"] = df["too_short"].fillna("").astype(str) if "too_short" in df else ""
    df["nonstandard"] = deviations.flags(df)
    for col in ("deviations", "deviation_notes", "hardware"):
        df[col] = df[col].fillna("").astype(str) if col in df else ""
    flagged = df["audit_flagged"] if "audit_flagged" in df else pd.Series("", index=df.index)
    df["flagged"] = flagged.fillna("").astype(str).ne("")  # a finding for a person to look at (not disqualifying)
    df["higher"] = higher_is_better(df, tasks)
    df["signed"] = signs(df["higher"]) * df["score"].astype(float)  # grows with quality: its max is the best run
    good = df[df["ok"] & df["score"].notna()]
    keys = ["experiment", "agent", "model", "entry", "task"]
    base = df.groupby(keys, sort=False).agg(
        n_runs=("run_id", "size"),
        n_success=("ok", "sum"),
        mean_scripts_all=("scripts_launched", "mean"),
        budget_min=("budget_min", "mean"),
        wall_min=("wall_time_s", lambda s: s.mean() / 60.0),
        utilisation=("budget_utilisation", "mean"),
        tokens_input=("tokens_input", "mean"),
        tokens_output=("tokens_output", "mean"),
        tokens_cached=("tokens_cached", "mean"),
        cost_usd=("cost_usd", "mean"),
        synthetic=("synthetic", "any"),
        partial_data=("partial_data", "any"),
        unsandboxed=("unsandboxed", "any"),
        too_short=("too_short", lambda s: "; ".join(dict.fromkeys(v for v in s if v))),
        flagged=("flagged", "any"),
        nonstandard=("nonstandard", "any"),
        deviations=("deviations", deviations.join_kinds),
        deviation_notes=("deviation_notes", deviations.join_notes),
        hardware=("hardware", lambda s: ", ".join(sorted({h for h in s if h}))),
        higher=("higher", "first"),
    )
    stats = good.groupby(keys, sort=False).agg(
        mean=("score", "mean"),
        std=("score", "std"),
        signed_best=("signed", "max"),
        mean_scripts=("scripts_launched", "mean"),
    )
    out = base.join(stats).reset_index()
    out["best"] = signs(out["higher"]) * out["signed_best"]
    out["source"] = out["experiment"]
    out["kind"] = AGENT
    out["group"] = "MLflow: " + out["experiment"] + np.where(out["synthetic"], " [synthetic]", "")
    out["family"] = ""
    out["harness"] = out["agent"].map(pub.harness)
    out["detail"] = ""
    return out.reindex(columns=CELL_COLUMNS)


def short_table(runs: pd.DataFrame, baselines: dict[str, float] | None = None) -> pd.DataFrame:
    """Per task x agent: mean and std over successful runs, success n/N, best, and the task baseline.

    The short form that ``bench demo`` prints, from :func:`analysis.runs.agent_runs`; :func:`build` makes
    the full one (Agg, Agg-max, supersede rule, published rows).
    """
    columns = ["task", "agent", "mean", "std", "success", "best", "baseline"]
    if runs.empty:
        return pd.DataFrame(columns=columns)
    table = cells(runs)
    table["success"] = table["n_success"].astype(int).astype(str) + "/" + table["n_runs"].astype(int).astype(str)
    table["baseline"] = table["task"].map(baselines or {})
    table["agent"] = table["entry"]
    return table.sort_values(["task", "agent"])[columns].reset_index(drop=True)


def _winners(pairs: pd.DataFrame, keys: list[str], runs: str) -> pd.Series:
    """Per loser (``keys``), the sources of the rivals with the most runs among those that supersede it.

    ``pairs``: one row per (loser, rival) with ``runs``/``runs_w``, ``nonstandard``/``nonstandard_w`` and
    ``source_w``. A rival supersedes with more runs, and only if it is standard or the loser is non-standard
    too: a sample outside the paper's protocol never supersedes one inside it."""
    ok = pairs[(pairs[runs + "_w"] > pairs[runs]) & (~pairs["nonstandard_w"] | pairs["nonstandard"])]
    top = ok[ok[runs + "_w"] == ok.groupby(keys)[runs + "_w"].transform("max")]
    return top.groupby(keys)["source_w"].agg(lambda s: ", ".join(dict.fromkeys(s.astype(str))))


def reduced_budget(kinds: pd.Series) -> pd.Series:
    """Whether comma-joined deviation kinds (a cell's or an entry's ``deviations``) hold ``budget``: runs made with
    another budget than the task's own, which neither compete for best-in-column nor are ranked."""
    # bool even when empty (an empty object Series used as a mask would select columns: a campaign without a score)
    return kinds.fillna("").astype(str).str.split(",").apply(lambda k: protocol.BUDGET in k).astype(bool)


def supersede(table: pd.DataFrame) -> pd.DataFrame:
    """Mark cells and whole entries that a larger sample of the same agent supersedes (Sections 3.1 and 6).

    Cells (``superseded_by``): for the same agent (dispatch name + model) and task, the cell evaluated over more
    runs supersedes the one with fewer, whatever the scores; the fewer-runs cell keeps its numbers but does not
    compete for bold.

    Entries (``entry_superseded_by``): "more runs" for an entry is its sample over the tasks it has. Entry A
    supersedes entry B of the same agent when A has every task B has and more runs than B on those tasks (A's
    runs on B's tasks against all of B's runs; failed runs count, the sample is what was evaluated). So a larger
    campaign on the same tasks replaces a smaller one, while a campaign that repeated one task of a seven-task
    entry supersedes only that cell: one task cannot stand in for the entry's Agg over seven. A superseded entry
    is listed and keeps its numbers (a published row still reproduces the paper) but is not ranked and never
    bold. Equal run counts supersede nothing; a non-standard sample never supersedes a standard one.
    """
    table = table.copy()
    table["superseded_by"] = table["entry_superseded_by"] = ""
    table["nonstandard"] = table["nonstandard"].eq(True)  # NaN (published, calibration): standard
    agents = table[table["kind"] == AGENT]
    if agents.empty:
        return table
    ident = [identity(a, m) for a, m in zip(agents["agent"].fillna(""), agents["model"].fillna(""), strict=True)]
    a = agents[["task", "source", "entry", "n_runs", "nonstandard"]].assign(ident=ident).reset_index()
    pairs = a.merge(a, on=["ident", "task"], suffixes=("", "_w"))  # every cell against the same agent's on its task
    cell_won = _winners(pairs[pairs["index"] != pairs["index_w"]], ["index"], "n_runs")
    table.loc[agents.index, "superseded_by"] = cell_won.reindex(agents.index, fill_value="")
    keys = ["source", "entry"]
    per = pairs.groupby(keys + ["source_w", "entry_w"], sort=False).agg(
        shared=("task", "size"), n_w=("n_runs_w", "sum"), nonstandard_w=("nonstandard_w", "any")
    )
    size = a.groupby(keys).agg(n_tasks=("task", "size"), n=("n_runs", "sum"), nonstandard=("nonstandard", "any"))
    per = per.reset_index().merge(size.reset_index(), on=keys)
    rival = (per["source"] != per["source_w"]) | (per["entry"] != per["entry_w"])
    entry_won = _winners(per[rival & (per["shared"] == per["n_tasks"])], keys, "n")  # rivals that cover the entry
    won = agents[keys].merge(entry_won.rename("won").reset_index(), on=keys, how="left")["won"]
    table.loc[agents.index, "entry_superseded_by"] = won.fillna("").to_numpy()
    return table


def with_baselines(table: pd.DataFrame, tasks: pd.DataFrame) -> pd.DataFrame:
    """Add the task's baseline and direction, and the Eq. 1 terms of the mean and of the best run."""
    table = table.copy()
    table["baseline"] = table["task"].map(tasks["baseline"]).astype(float)
    paper = table["task"].map(tasks["paper_baseline"]).astype(float)
    table["baseline"] = table["baseline"].where(table["source"] != pub.PUBLISHED, paper)  # the paper's Agg: Table 2
    table["higher_is_better"] = table["task"].map(tasks["higher_is_better"]).fillna(True).astype(bool)
    table["rel_mean"] = relative(table["mean"], table["baseline"], table["higher_is_better"])
    table["rel_best"] = relative(table["best"], table["baseline"], table["higher_is_better"])
    return table


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """One row per entry: Agg, Agg-max, runs, success, scripts, utilisation, tokens, cost; ranked by Agg."""
    if table.empty:
        return pd.DataFrame()
    keys = ["source", "entry"]
    g = table.groupby(keys, sort=False)
    out = g.agg(
        kind=("kind", "first"),
        group=("group", "first"),
        agent=("agent", "first"),
        model=("model", "first"),
        family=("family", "first"),
        tasks=("task", "size"),
        agg_tasks=("rel_mean", "count"),
        runs=("n_runs", "sum"),
        successes=("n_success", "sum"),
        agg=("rel_mean", "mean"),
        agg_max=("rel_best", "mean"),
        mean_scripts=("mean_scripts", "mean"),
        utilisation=("utilisation", "mean"),
        wall_min=("wall_min", "mean"),
        tokens_input=("tokens_input", "mean"),
        tokens_output=("tokens_output", "mean"),
        cost_usd=("cost_usd", "mean"),
        superseded=("superseded_by", lambda s: int((s != "").sum())),
        superseded_by=("entry_superseded_by", "first"),
        synthetic=("synthetic", "any"),
        nonstandard=("nonstandard", "any"),
        deviations=("deviations", deviations.join_kinds),
        too_short=("too_short", lambda s: bool(s.astype(object).where(s.notna(), "").astype(str).ne("").any())),
        harness=("harness", "first"),
    ).reset_index()
    out["success_rate"] = out["successes"] / out["runs"]
    out["of_tasks"] = table.loc[table["baseline"].notna(), "task"].nunique()  # tasks where Eq. 1 is defined
    out["complete"] = out["agg_tasks"] == out["of_tasks"]  # Eq. 1 averages over all T tasks: only then ranked
    ranked = (out["kind"] == AGENT) & out["complete"] & out["superseded_by"].eq("")  # superseded: listed, unranked
    ranked &= ~reduced_budget(out["deviations"])  # another budget than the task's: listed (§), unranked
    ranked &= ~out["too_short"].astype(bool)  # a cell the budget cut before its training ended: listed, unranked
    out["rank"] = out["agg"].where(ranked).rank(ascending=False, method="min").astype("Int64")
    out = out.sort_values("agg", ascending=False, na_position="last", kind="stable")
    return out.sort_values("rank", na_position="last", kind="stable").reset_index(drop=True)


class EntryError(InputError, KeyError):
    """An entry named (``--compare``) that the leaderboard does not hold, or holds twice; the message lists them."""


@dataclass
class Leaderboard:
    """Everything the tables and figures are drawn from."""

    tasks: pd.DataFrame  # metadata of the tasks present (index: t1 ...)
    cells: pd.DataFrame  # one row per entry and task, with baselines, Eq. 1 terms and superseded_by
    summary: pd.DataFrame  # one row per entry
    runs: RunSet | None = None  # the MLflow runs behind the new entries (None: published only)
    excluded: pd.DataFrame = field(default_factory=pd.DataFrame)  # non-standard agent runs left out (see build)
    _cells: dict = field(default_factory=dict, init=False, repr=False)  # (source, entry, task) -> row
    _scores: dict = field(default_factory=dict, init=False, repr=False)  # (source, entry, task) -> successful scores

    def entries(self, kind: str | None = AGENT) -> pd.DataFrame:
        """The entries in display order (published in paper order, calibration, then MLflow by experiment)."""
        first = self.cells.drop_duplicates(["source", "entry"])
        return first[first["kind"] == kind] if kind else first

    def cell(self, source: str, entry: str, task: str) -> pd.Series | None:
        """The cell of an entry on a task (None when the entry did not run it)."""
        if not self._cells:
            self._cells.update({(r["source"], r["entry"], r["task"]): r for _, r in self.cells.iterrows()})
        return self._cells.get((source, entry, task))

    def run_scores(self, source: str, entry: str, task: str) -> np.ndarray | None:
        """The successful runs' scores of an MLflow entry on a task (None for published and calibration rows)."""
        if not self._scores and self.runs is not None and not self.runs.agents.empty:
            ok = self.runs.agents[(self.runs.agents["status"] == "success") & self.runs.agents["score"].notna()]
            for key, g in ok.groupby(["experiment", "entry", "task"]):
                self._scores[key] = g["score"].to_numpy(dtype=float)
        return self._scores.get((source, entry, task))

    def find(self, name: str) -> tuple[str, str]:
        """An entry by its label, ``source:label``, or ``label [source]``; raises EntryError if unknown or ambiguous."""
        e = self.entries(None)[["source", "entry"]].drop_duplicates()
        for source, entry in e.itertuples(index=False):
            if name in (f"{source}:{entry}", f"{entry} [{source}]"):
                return source, entry
        hits = e[e["entry"] == name]
        if len(hits) != 1:
            known = ", ".join(f"{s}:{n}" for s, n in e.itertuples(index=False))
            raise EntryError(f"{'ambiguous' if len(hits) else 'unknown'} entry {name!r}; entries: {known}")
        return tuple(hits.iloc[0])


def _standard_only(runs: RunSet | pd.DataFrame) -> tuple[RunSet | pd.DataFrame, pd.DataFrame]:
    """The runs without the non-standard agent runs (and their child runs), and the agent runs taken out."""
    agents = runs.agents if isinstance(runs, RunSet) else runs
    out = deviations.flags(agents)
    excluded, kept = agents[out].copy(), agents[~out].reset_index(drop=True)
    if not isinstance(runs, RunSet):
        return kept, excluded
    keep = lambda df: df[~df["parent_run_id"].isin(excluded["run_id"])].reset_index(drop=True)  # noqa: E731
    return RunSet(kept, keep(runs.scripts), keep(runs.evals)), excluded


def build(
    runs: RunSet | pd.DataFrame | None = None,
    *,
    published: bool = False,
    calibration: bool = False,
    calibration_dir=None,
    registry: bool = True,
    include_nonstandard: bool = False,
) -> Leaderboard:
    """The leaderboard of MLflow runs, with the published rows and the Optuna-tuned row when asked.

    ``published``: add the paper's rows. Runs outside the paper's protocol (:mod:`analysis.deviations`) are then
    left out of the comparison (``Leaderboard.excluded`` lists them) unless ``include_nonstandard``; without
    published rows they are always shown, marked. ``calibration``: add the Optuna-tuned row from
    ``calibration_dir`` (default ``baselines/results/``): opt-in, as it was tuned on whatever machine ran
    ``bench baselines tune`` (its label says where and with how many trials). ``registry``: task metadata from
    the installed ``task.toml`` files over the paper's.
    """
    tasks = pub.tasks(registry=registry)
    excluded = pd.DataFrame()
    if runs is not None and published and not include_nonstandard:
        agents = runs.agents if isinstance(runs, RunSet) else runs
        if not agents.empty:
            agents = agents.assign(entry=entry_labels(agents))  # the note names the entries left out
            labelled = RunSet(agents, runs.scripts, runs.evals) if isinstance(runs, RunSet) else agents
            runs, excluded = _standard_only(labelled)
    runset = runs if isinstance(runs, RunSet) else None
    agents = runs.agents if isinstance(runs, RunSet) else runs
    if runset is not None:
        runset.agents["entry"] = (
            entry_labels(runset.agents) if not runset.agents.empty else pd.Series(dtype=object)
        )  # curves and the bootstrap group runs by entry
    parts = []
    if published:
        parts.append(pub.published_cells())
    tuned = pub.calibration_cells(calibration_dir) if calibration else pd.DataFrame()
    if not tuned.empty:
        parts.append(tuned)
    if agents is not None and not agents.empty:
        parts.append(cells(agents, tasks))
        extra = agents.loc[~agents["task"].isin(tasks.index)].drop_duplicates("task")
        for r in extra.itertuples():  # a task the registry and the paper do not know: no baseline, no Agg term
            tasks.loc[r.task] = {
                "label": r.task.upper(),
                "title": r.task,
                "metric": r.metric,
                "baseline": np.nan,
                "higher_is_better": bool(r.higher_is_better),
                "reference": np.nan,
                "reference_source": "",
                "budget_min": r.budget_min,
                "paper_baseline": np.nan,
            }
    parts = [p.reindex(columns=CELL_COLUMNS) for p in parts if not p.empty]
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=CELL_COLUMNS)
    for col in ("deviations", "deviation_notes", "hardware", "harness", "detail"):
        table[col] = table[col].astype(object).where(table[col].notna(), "").astype(str)  # published: none
    table = gap.with_gap(with_baselines(supersede(table), tasks), tasks)  # Eq. 1's terms, then MLRC-Bench's
    on_board = table.loc[table["kind"] == AGENT, "task"] if (table["kind"] == AGENT).any() else table["task"]
    present = [t for t in tasks.index if t in set(on_board)]  # the agents' tasks (the tuned row gives context only)
    table = table[table["task"].isin(present)].reset_index(drop=True)
    board = gap.summarize(summary(table), table)  # Agg, Agg-max, ... and the gap closed beside them
    return Leaderboard(tasks=tasks.loc[present], cells=table, summary=board, runs=runset, excluded=excluded)


def top_two(lb: Leaderboard) -> tuple[str, str] | None:
    """The default paired comparison: the two best entries of *different* agents (dispatch name and model), as
    ``source:entry``, ranked ones first (unranked ones, best Agg first, only when fewer than two are ranked).

    None when there are not two different agents: the same agent in two campaigns compared with itself says
    nothing about agents."""
    agents = lb.summary[(lb.summary["kind"] == AGENT) & lb.summary["agg"].notna()]
    ranked = agents[agents["rank"].notna()].sort_values("rank", kind="stable")
    rest = agents[agents["rank"].isna()].sort_values("agg", ascending=False, kind="stable")
    picked: dict[str, str] = {}  # identity -> source:entry, the first (best) of each agent
    for r in pd.concat([ranked, rest]).itertuples():
        ident = identity(r.agent if isinstance(r.agent, str) else "", r.model if isinstance(r.model, str) else "")
        picked.setdefault(ident, f"{r.source}:{r.entry}")
        if len(picked) == 2:
            return tuple(picked.values())
    return None


def short_text(runs: pd.DataFrame, baselines: dict[str, float] | None = None) -> str:
    """:func:`short_table` as ``bench demo`` prints it: four decimals, "–" where a statistic is undefined (the std
    of a single run), and § after an agent whose runs on the task are outside the paper's protocol, with a line
    saying which deviations (the demo's 8-minute CPU run of T1 is not comparable with the paper's results)."""
    table = short_table(runs, baselines)
    if table.empty:
        return "(no runs)"
    cell = cells(runs).set_index(["task", "entry"])
    marked = [bool(cell["nonstandard"].get((t, a), False)) for t, a in zip(table["task"], table["agent"], strict=True)]
    notes = [
        f"{t} {a}: {cell['deviations'].get((t, a), '').replace(',', ', ') or 'see the run'}"
        for t, a, m in zip(table["task"], table["agent"], marked, strict=True)
        if m
    ]
    short = [str(cell["too_short"].get((t, a), "")) for t, a in zip(table["task"], table["agent"], strict=True)]
    table["agent"] = [
        a + (f" {deviations.MARK}" if m else "") + (" (too short)" if s else "")
        for a, m, s in zip(table["agent"], marked, short, strict=True)
    ]
    text = table.to_string(index=False, na_rep="–", float_format=lambda v: f"{v:.4f}")
    if notes:
        text += f"\n{deviations.MARK} outside the paper's protocol, not comparable with its results: {'; '.join(notes)}"
    for t, s in zip(table["task"], short, strict=True):
        if s:
            text += f"\n(too short) {t}: too short to compare: {s}"
    return text
