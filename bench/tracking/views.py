"""Saved views of the MLflow UI for a campaign.

The runs table with the benchmark's columns, and agents compared.

MLflow 3.17's experiment page keeps its search facets (``searchFilter``, ``orderByKey``,
``orderByAsc``, ``startTime``, ``lifecycleFilter``, ``modelVersionFilter``, ``datasetsFilter``) in
the URL's query, but the table's columns and grouping (``selectedColumns``, ``groupBy``, ...) only
in the browser's local storage, which a link cannot set. Read from the installed UI bundle
(``mlflow/server/js/build/static/js``), two ways in:

- a **saved view**: the experiment tag ``mlflow.sharedViewState.<view id>``, listed under "Views"
  (the envelope ``{"name", "createdAt", "updatedAt", "state"}`` where ``state`` is the JSON of the
  search facets and the UI state together, at most 20,000 characters). ``?viewStateShareKey=<view
  id>`` opens one, but always as "a shared view" with a banner ("Your changes won't be saved unless
  you override your own saved view") a newcomer cannot act on;
- the browser's **own state** of the experiment: local storage
  ``MLflowLocalStorage-1.1-ExperimentPage-["<id>"]- ReactComponentState`` (:data:`STATE_KEY`), the
  same JSON, read when the page opens without search facets in its URL; no banner, and the person's
  later changes are kept.

So the views are saved as tags (the "Views" menu), and the links ``bench ui`` prints carry
``?benchView=<view id>`` (:data:`VIEW_PARAM`), which the page the bench-ui app serves turns into the
browser's own state of that experiment before MLflow's UI starts (:mod:`bench.tracking.uiapp`); the
same page gives every campaign the runs view as its state the first time a browser opens it (however
it is reached: MLflow's experiment list, a bare address), so the benchmark's columns are there
without a click.

Three views per campaign, rewritten with the same ids (idempotent) by the campaign summary and by
``bench ui``; none averages a raw score over tasks (an MSE with an accuracy is a number without
meaning):

- ``bench-runs``: every run, newest first, with :func:`selected_columns` (script and eval runs
  nested under their agent run, the summary runs under the campaign run);
- ``bench-tasks``: agent runs only, grouped by ``bench.group`` ("t6 · claude-code
  (claude-opus-4-7)": the task, then the entry, in one value, so that the group row reads "Group: t6
  · claude-code (...)" at the default width; two grouping keys would print both names and cut the
  agent's off): per task, each agent's mean score, rel_improvement, scripts and time over its runs
  (a group row averages the runs of one agent on one task);
- ``bench-compare``: the campaign's summary runs (:mod:`analysis.summary`), one per agent, best Agg
  first: Agg, Agg-max and success rate, the paper's Eq. 1 over the tasks.

Links open the UI in its model-training mode (``workflowType=machine_learning``:
:mod:`bench.tracking.uiapp` says why the page MLflow serves makes it the default too). MLflow 3.17's
runs table prints a metric's stored value unrounded (it has no precision setting): the page bench ui
serves rounds what the table shows to 4 decimals (:data:`bench.tracking.uiapp.ROUND_SCRIPT`), so the
value columns are narrow. The runs and per-task views open their charts (``compareRunsMode=CHART``)
on ``score``, ``rel_improvement`` and ``budget_utilisation`` (:func:`charts`), and their tables on
each run's status and reason, then entry and task, then the metrics.

The column order and widths are applied by the UI after the table is drawn; on a slow first load it
can keep its default order (metrics alphabetically), the columns themselves are always the view's
(tests/bench/test_ui_browser.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from urllib.parse import quote

from bench.errors import InputError
from bench.tracking import reader, schema, store


class UnknownExperiment(InputError, LookupError):
    """An experiment named for the views that the store does not hold.

    The message lists those it does.
    """


# the runs table's columns, in order; the README's "Comparing agents in the MLflow UI" lists them
AGENT_METRICS = (  # an agent run's (offline agents log no tokens or cost: the UI leaves out a metric no run has)
    schema.SCORE,
    schema.REL_IMPROVEMENT,
    schema.BUDGET_UTILISATION,
    schema.SCRIPTS_LAUNCHED,
    schema.WALL_TIME,
    schema.TOKENS_INPUT,
    schema.TOKENS_OUTPUT,
    schema.COST_USD,
)
SUMMARY_METRICS = (schema.SUMMARY_AGG, schema.SUMMARY_AGG_MAX, schema.SUMMARY_SUCCESS_RATE, schema.SUMMARY_GAP)
# before the metrics: how each run ended and why, and whose run on which task (a campaign whose runs
# all failed has no score column at all: its status and reason must not sit past the metrics' width)
FRONT_TAGS = (schema.STATUS, schema.REASON, schema.ENTRY, schema.TASK)
TAG_COLUMNS = (
    *FRONT_TAGS,
    schema.REPEAT,
    schema.KIND,
    schema.PROTOCOL,
    schema.DEVIATIONS,
    schema.BUDGET_MINUTES,
    schema.AUDIT_DISQUALIFIED,
)
# column widths (px): a value the bench-ui page rounds to 4 decimals (bench.tracking.uiapp) fits in
# 130, with a group row's " (average)" in 190; the run name column holds an eval run's "eval
# train_step320_mse0.6653_17959...pt" and a grouped view's "Group: t6 · claude-code
# (claude-opus-4-7)" whole; the comparison's entry column a whole entry, its model column a whole
# model ("openrouter/moonshotai/kimi-k2.6"); the reason a sentence's start
METRIC_PX, GROUPED_METRIC_PX, TAG_PX, NAME_PX, GROUPED_NAME_PX, ENTRY_PX = 130, 160, 130, 420, 380, 280
MODEL_PX, REASON_PX, COMPARE_NAME_PX = 240, 260, 220  # the comparison's names: "summary: <entry>"
# the charts (compareRunsMode=CHART) of the runs and per-task views: these first, then the UI adds
# every other metric
CHART_METRICS = (schema.SCORE, schema.REL_IMPROVEMENT, schema.BUDGET_UTILISATION)
CHART_SECTION = "Model metrics"  # the UI's section of a metric without a "system/" prefix
RUN_NAME = "attributes.`Run Name`"
VIEW_PARAM = "benchView"  # the URL parameter naming the view (bench.tracking.uiapp applies it)
STATE_KEY = "MLflowLocalStorage-1.1-ExperimentPage-{ids}-ReactComponentState"  # ids: JSON of the sorted id list
MODE_PARAM, TRAINING = "workflowType", "machine_learning"  # the UI's mode: "Model training", not "GenAI"
RUNS_VIEW, TASKS_VIEW, COMPARE_VIEW = "bench-runs", "bench-tasks", "bench-compare"
COMPARE_METRICS = (
    schema.SUMMARY_AGG,
    schema.SUMMARY_AGG_MAX,
    schema.SUMMARY_SUCCESS_RATE,
    schema.SUMMARY_RUNS,
    schema.SUMMARY_TASKS,
    schema.SUMMARY_GAP,  # MLRC-Bench's gap closed beside Eq. 1 (analysis.gap)
    schema.SUMMARY_GAP_MAX,
)
COMPARE_TAGS = (schema.ENTRY, schema.AGENT, schema.MODEL)


def column_key(kind: str, name: str) -> str:
    """The UI's canonical column key.

    ``metrics.`score```, ``tags.`bench.entry```, ``attributes.`Duration```.
    """
    return f"{kind}.`{name}`"


def selected_columns(summaries: bool = True, status_first: bool = True) -> list[str]:
    """A view's columns in their order.

    Status, reason, entry and task, then the metrics, then the other tags; ``summaries``: with the
    summary runs' Agg, Agg-max, success rate and gap closed; ``status_first`` False (the per-task
    view, whose group rows show means and no tag): the metrics first, then every tag.
    """
    metrics = [column_key("metrics", m) for m in AGENT_METRICS + (SUMMARY_METRICS if summaries else ())]
    tags = TAG_COLUMNS if summaries else tuple(t for t in TAG_COLUMNS if t != schema.KIND)
    if not status_first:
        return metrics + [column_key("tags", t) for t in tags]
    front = [column_key("tags", t) for t in FRONT_TAGS]
    return front + metrics + [column_key("tags", t) for t in tags if t not in FRONT_TAGS]


def charts() -> tuple[list[dict], list[dict]]:
    """The charts' configuration of a view, with the metrics of :data:`CHART_METRICS` first.

    It is MLflow's ``compareRunCharts`` and ``compareRunSections``, as its RunsChartsCardConfig
    writes them: a bar chart of :data:`CHART_METRICS` first, in that order, in a section marked
    reordered, so that the UI appends each other metric after them instead of opening on an
    alphabetical list (``anytime_score`` first, ``score`` far down).
    """
    section = {"uuid": "bench-model-metrics", "name": CHART_SECTION, "display": True, "isReordered": True,
               "deleted": False, "isGenerated": True}  # fmt: skip
    cards = [
        {"uuid": f"bench-chart-{m}", "type": "BAR", "runsCountToCompare": 10, "metricSectionId": section["uuid"],
         "deleted": False, "isGenerated": True, "displayName": m, "metricKey": m}
        for m in CHART_METRICS
    ]  # fmt: skip
    return cards, [section]


def compare_columns() -> list[str]:
    """The overall comparison's columns.

    A summary run's Agg, Agg-max, success rate, runs, tasks and gap closed (mean, best run), its
    entry.
    """
    # who first (entry, agent, model), then the numbers: on a laptop-wide window the grid draws only
    # the columns in view, and seven numbers would push the names out
    return [column_key("tags", t) for t in COMPARE_TAGS] + [column_key("metrics", m) for m in COMPARE_METRICS]


@dataclass(frozen=True)
class View:
    """A saved view of the runs table, as the UI's "Views" menu keeps it."""

    id: str
    name: str  # as the UI's "Views" menu lists it
    state: dict
    label: str  # what bench ui prints before its link

    def envelope(self, now_ms: int) -> str:
        """The experiment tag's value, as the UI's "Save view" writes it.

        Its ``state`` is a JSON string.
        """
        return json.dumps(
            {"name": self.name, "createdAt": now_ms, "updatedAt": now_ms, "state": json.dumps(self.state)}
        )


def _widths(columns: list[str], grouped: bool, name_px: int | None = None) -> dict[str, int]:
    metric_px, default_name = (GROUPED_METRIC_PX, GROUPED_NAME_PX) if grouped else (METRIC_PX, NAME_PX)
    name_px = name_px or default_name
    widths = {c: metric_px if c.startswith("metrics.") else TAG_PX for c in columns}
    if column_key("tags", schema.ENTRY) in widths:  # "claude-code (claude-opus-4-7)" whole
        widths[column_key("tags", schema.ENTRY)] = ENTRY_PX
    if column_key("tags", schema.MODEL) in widths:  # "claude-sonnet-4-6", not "claude-sonnet-…"
        widths[column_key("tags", schema.MODEL)] = MODEL_PX
    if column_key("tags", schema.REASON) in widths:
        widths[column_key("tags", schema.REASON)] = REASON_PX
    return {RUN_NAME: name_px} | widths


def _state(
    search_filter: str,
    order_by: str,
    ascending: bool,
    columns: list[str],
    group_by: tuple[str, ...],
    with_charts: bool = True,
    name_px: int | None = None,
) -> dict:
    """A view's state: the search facets and the UI state the saved-view loader picks from it."""
    cards, sections = charts() if with_charts else (None, None)
    return {
        "searchFilter": search_filter,
        "orderByKey": order_by,
        "orderByAsc": ascending,
        "startTime": "ALL",
        "lifecycleFilter": "Active",
        "modelVersionFilter": "All Runs",
        "datasetsFilter": [],
        "selectedColumns": columns,
        "columnOrder": [RUN_NAME, *columns],  # else metrics come alphabetically, tags in the order the runs list them
        "columnWidths": _widths(columns, grouped=bool(group_by), name_px=name_px),
        "runsHiddenMode": "SHOW_ALL",  # the charts show every run, not the UI's default first ten
        "groupBy": (  # several keys: one group per combination (task t6 and agent baseline), sorted by the first
            {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": k} for k in group_by]}
            if group_by
            else None
        ),
        "groupsExpanded": {},
        **({"compareRunCharts": cards, "compareRunSections": sections} if with_charts else {}),
    }


def all_views() -> tuple[View, ...]:
    """The campaign's views, in the order bench ui prints their links."""
    agents_only = f"tags.`{schema.KIND}` = '{schema.KIND_AGENT}'"
    summaries_only = f"tags.`{schema.KIND}` = '{schema.KIND_SUMMARY}'"
    return (
        View(RUNS_VIEW, "1GC-7RC: runs", _state("", "attributes.start_time", False, selected_columns(), ()), "runs"),
        View(
            TASKS_VIEW,
            "1GC-7RC: per task",
            _state(
                agents_only,
                column_key("tags", schema.GROUP),
                True,
                selected_columns(summaries=False, status_first=False),
                (schema.GROUP,),
            ),
            "per task",
        ),
        View(
            COMPARE_VIEW,
            "1GC-7RC: compare agents (Agg)",
            _state(
                summaries_only,
                column_key("metrics", schema.SUMMARY_AGG),
                False,
                compare_columns(),
                (),
                with_charts=False,
                name_px=COMPARE_NAME_PX,
            ),
            "compare agents",
        ),
    )


def save(writer) -> None:
    """Write (or rewrite) the views as tags of the experiment of ``writer`` (an MlflowWriter)."""
    now = int(time.time() * 1000)
    for view in all_views():
        writer.set_experiment_tag(schema.SHARED_VIEW_PREFIX + view.id, view.envelope(now))


def url(base: str, experiment_id: str, view: str | None = RUNS_VIEW, mode: str | None = None) -> str:
    """The link to an experiment's runs tab opening ``view`` as the browser's own state of it.

    No shared-view banner (:mod:`bench.tracking.uiapp`); in the UI's model-training mode. ``mode``
    ``CHART`` opens the charts beside the table.
    """
    query = [f"{VIEW_PARAM}={quote(view)}"] if view else []
    if mode:
        query.append(f"compareRunsMode={quote(mode)}")
    query.append(f"{MODE_PARAM}={TRAINING}")
    return f"{base.rstrip('/')}/#/experiments/{quote(str(experiment_id))}/runs?" + "&".join(query)


def experiments(names: list[str] | None = None) -> list[tuple[str, str]]:
    """(name, id) of the named experiments, or of every active one holding agent runs.

    The latest updated come first.

    Raises :class:`UnknownExperiment` (a LookupError) for a name that is no active experiment
    (``bench ui --experiment`` creates nothing).
    """
    source = reader.open_reader()
    if names:
        ids = {name: eid for eid, name in source.experiments(names).items()}
        missing = [n for n in names if n not in ids]
        if missing:  # with the names that could be meant (bench report and bench ui say the same)
            known = [n for n, _ in experiments()]
            more = ", ..." if len(known) > 10 else ""
            hint = f"experiments with agent runs: {', '.join(known[:10])}{more}" if known else "it has no agent runs"
            raise UnknownExperiment(f"no experiment {', '.join(map(repr, missing))} in {store.tracking_uri()} ({hint})")
        return [(n, ids[n]) for n in names]
    found = source.experiments()
    holding = set(source.runs(list(found), schema.KIND_AGENT)["experiment_id"])
    return [(name, eid) for eid, name in found.items() if eid in holding]


def states() -> dict[str, str]:
    """View id -> its state as JSON, as the UI keeps it for an experiment (:data:`STATE_KEY`)."""
    return {view.id: json.dumps(view.state) for view in all_views()}


def state_key(experiment_id: str) -> str:
    """The browser's local-storage key of one experiment's own state."""
    return STATE_KEY.format(ids=json.dumps([str(experiment_id)]))


def campaign_ids(tracking_uri: str) -> list[str]:
    """The ids of the experiments that hold the views, on the store at ``tracking_uri``.

    They are the campaigns, written by their summary and by ``bench ui``. This is what the bench-ui
    app asks on each page it serves (one query, ~0.1 s).
    """
    from mlflow import MlflowClient

    found = MlflowClient(tracking_uri=tracking_uri).search_experiments(
        filter_string=f"tags.`{schema.SHARED_VIEW_PREFIX}{RUNS_VIEW}` LIKE '%'", max_results=50000
    )
    return [str(e.experiment_id) for e in found]


def backfill_groups(writer, experiment_id: str) -> int:
    """Set :data:`schema.GROUP` on the experiment's agent runs recorded before it existed.

    The per-task view groups by it. Returns the number of runs tagged (``writer``: an MlflowWriter).
    """
    runs = reader.open_reader().runs([experiment_id], schema.KIND_AGENT)
    column = f"t:{schema.GROUP}"
    todo, done = runs if column not in runs else runs[runs[column].isna()], 0
    for values in todo.to_dict("records"):
        task = values.get(f"t:{schema.TASK}")
        if not isinstance(task, str) or not task:  # not a run the harness recorded: left as it is
            continue
        entry = values.get(f"t:{schema.ENTRY}")
        if not isinstance(entry, str) or not entry:  # a run older than the entry tag
            model = values.get(f"t:{schema.MODEL}")
            entry = schema.entry_label(str(values.get(f"t:{schema.AGENT}")), model if isinstance(model, str) else None)
        writer.set_tags(values["run_id"], {schema.GROUP: schema.group_label(task, entry)})
        done += 1
    return done
