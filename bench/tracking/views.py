"""Saved views of the MLflow UI for a campaign: the runs table with the benchmark's columns, and agents compared.

MLflow 3.17's experiment page keeps its search facets (``searchFilter``, ``orderByKey``, ``orderByAsc``,
``startTime``, ``lifecycleFilter``, ``modelVersionFilter``, ``datasetsFilter``) in the URL's query, but the table's
columns and grouping (``selectedColumns``, ``groupBy``, ...) only in the browser's local storage, which a link cannot
set. What a link *can* do is open a **saved view**: ``#/experiments/<id>/runs?viewStateShareKey=<view id>`` makes the
UI read the experiment tag ``mlflow.sharedViewState.<view id>`` and apply it (and list it under "Views"). Read from
the installed UI bundle (``mlflow/server/js/build/static/js``): the envelope ``{"name", "createdAt", "updatedAt",
"state"}`` where ``state`` is the JSON of the search facets and the UI state together (plain JSON is accepted, a
compressed one too), at most 20,000 characters; the UI ignores the view when the URL also carries a search facet.

Two views per campaign, rewritten with the same ids (idempotent) by the campaign summary and by ``bench ui``:

- ``bench-runs``: every run, newest first, with :func:`selected_columns` (script and eval runs nested under their
  agent run, the summary runs under the campaign run);
- ``bench-compare``: agent runs only, grouped by ``bench.entry`` with the groups' means (the mean
  ``rel_improvement`` of an entry over its runs is Agg when every task has the same number of successful runs).

The column order and widths are applied by the UI after the table is drawn; on a slow first load it can keep its
default order (metrics alphabetically), the columns themselves are always the view's (tests/bench/test_ui_browser.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from urllib.parse import quote

from bench.tracking import schema, store

# the runs table's columns, in order; the README's "Comparing agents in the MLflow UI" lists them
AGENT_METRICS = (  # an agent run's (offline agents log no tokens or cost: the UI leaves out a metric no run has)
    schema.SCORE,
    schema.REL_IMPROVEMENT,
    schema.SCRIPTS_LAUNCHED,
    schema.BUDGET_UTILISATION,
    schema.WALL_TIME,
    schema.TOKENS_INPUT,
    schema.TOKENS_OUTPUT,
    schema.COST_USD,
)
SUMMARY_METRICS = (schema.SUMMARY_AGG, schema.SUMMARY_AGG_MAX, schema.SUMMARY_SUCCESS_RATE)  # a summary run's
TAG_COLUMNS = (
    schema.STATUS,
    schema.ENTRY,
    schema.TASK,
    schema.REPEAT,
    schema.KIND,
    schema.PROTOCOL,
    schema.DEVIATIONS,
    schema.BUDGET_MINUTES,
    schema.AUDIT_DISQUALIFIED,
)
WIDE = (schema.SCORE, schema.REL_IMPROVEMENT, schema.SUMMARY_AGG)  # wide enough for six decimals
SHARE_PARAM = "viewStateShareKey"  # the URL parameter naming the saved view
RUNS_VIEW, COMPARE_VIEW = "bench-runs", "bench-compare"


def column_key(kind: str, name: str) -> str:
    """The UI's canonical column key: ``metrics.`score```, ``tags.`bench.entry```, ``attributes.`Duration```."""
    return f"{kind}.`{name}`"


def selected_columns(summaries: bool = True) -> list[str]:
    """A view's columns in their order; ``summaries``: with the summary runs' Agg, Agg-max and success rate."""
    metrics = AGENT_METRICS + (SUMMARY_METRICS if summaries else ())
    tags = TAG_COLUMNS if summaries else tuple(t for t in TAG_COLUMNS if t != schema.KIND)
    return [column_key("metrics", m) for m in metrics] + [column_key("tags", t) for t in tags]


@dataclass(frozen=True)
class View:
    id: str
    name: str
    state: dict

    def envelope(self, now_ms: int) -> str:
        """The experiment tag's value, as the UI's "Save view" writes it (its ``state`` is a JSON string)."""
        return json.dumps(
            {"name": self.name, "createdAt": now_ms, "updatedAt": now_ms, "state": json.dumps(self.state)}
        )


def _state(search_filter: str, order_by: str, ascending: bool, group_by: str | None) -> dict:
    """A view's state: the search facets and the UI state the saved-view loader picks from it."""
    columns = selected_columns(summaries=group_by is None)  # grouped: agent runs only, no summary columns
    return {
        "searchFilter": search_filter,
        "orderByKey": order_by,
        "orderByAsc": ascending,
        "startTime": "ALL",
        "lifecycleFilter": "Active",
        "modelVersionFilter": "All Runs",
        "datasetsFilter": [],
        "selectedColumns": columns,
        "columnOrder": columns,  # else metrics come alphabetically, tags in the order the runs list them
        "columnWidths": {column_key("metrics", m): 150 for m in WIDE if column_key("metrics", m) in columns},
        "runsHiddenMode": "SHOW_ALL",  # the charts show every run, not the UI's default first ten
        "groupBy": (
            {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": group_by}]}
            if group_by
            else None
        ),
        "groupsExpanded": {},
    }


def all_views() -> tuple[View, ...]:
    agents_only = f"tags.`{schema.KIND}` = '{schema.KIND_AGENT}'"
    return (
        View(RUNS_VIEW, "1GC-7RC: runs", _state("", "attributes.start_time", False, None)),
        View(
            COMPARE_VIEW,
            "1GC-7RC: compare agents",
            _state(agents_only, column_key("metrics", schema.REL_IMPROVEMENT), False, schema.ENTRY),
        ),
    )


def save(writer) -> None:
    """Write (or rewrite) the views as tags of the writer's experiment (``writer``: an MlflowWriter)."""
    now = int(time.time() * 1000)
    for view in all_views():
        writer.set_experiment_tag(schema.SHARED_VIEW_PREFIX + view.id, view.envelope(now))


def url(base: str, experiment_id: str, view: str | None = RUNS_VIEW, mode: str | None = None) -> str:
    """The link to an experiment's runs tab opening ``view``; ``mode`` ``CHART`` opens the charts beside the table."""
    query = [f"{SHARE_PARAM}={quote(view)}"] if view else []
    if mode:
        query.append(f"compareRunsMode={quote(mode)}")
    return f"{base.rstrip('/')}/#/experiments/{quote(str(experiment_id))}/runs" + (
        "?" + "&".join(query) if query else ""
    )


def experiments(names: list[str] | None = None) -> list[tuple[str, str]]:
    """(name, id) of the named experiments, or of every active one holding agent runs, the latest updated first.

    Raises LookupError for a name that is no active experiment (``bench ui --experiment`` creates nothing).
    """
    c = store.client()
    if names:
        found = [c.get_experiment_by_name(n) for n in names]
        missing = [n for n, e in zip(names, found, strict=True) if e is None or e.lifecycle_stage != "active"]
        if missing:
            raise LookupError(f"no experiment {', '.join(map(repr, missing))} in {store.tracking_uri()}")
    else:
        agents = f"tags.`{schema.KIND}` = '{schema.KIND_AGENT}'"
        found = [
            e
            for e in c.search_experiments(order_by=["last_update_time DESC"], max_results=1000)
            if c.search_runs([e.experiment_id], agents, max_results=1)
        ]
    return [(e.name, e.experiment_id) for e in found]
