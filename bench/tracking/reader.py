"""The reading side of the tracking store.

One interface for every reader, its public-API default, the fast paths.

Why one interface: the readers (``analysis.runs`` for reports, leaderboards and notebooks; ``bench
ui``'s views) need three things from MLflow: the experiments, the runs of one kind with their tags,
metrics and params, and metric histories. :class:`Reader` is those three operations.
:class:`ApiReader`, the default, uses only MLflow's public API (``MlflowClient.search_runs``,
``get_metric_history``), so its results are right on any MLflow release.

Faster paths are other implementations of the same interface, chosen by :func:`open_reader` only
when the store supports them, each falling back to :class:`ApiReader` when it does not, with the
same results:

- :class:`SqlReader` reads MLflow's tables straight from a database store (SQLite, PostgreSQL,
  MySQL), ~4x faster on 200 runs (``tests/benchmarks/reader_speed.py``), only when the database's
  schema revision is one whose tables it was checked against (the tables are MLflow's private
  schema, free to change in any release);
- :class:`ServerReader` reads metric histories from a tracking server in bulk (100 runs a request,
  an endpoint of MLflow's UI), and the rest through the public API; a server without that endpoint
  (404) or one that refuses it is read one run at a time.

``tests/bench/tracking/test_reader.py`` checks that each fast path equals the public API's values,
and that the fallback is taken when a fast path's preconditions fail.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from bench.tracking import schema, store

if TYPE_CHECKING:
    import pandas as pd

RUN_COLUMNS = ["run_id", "experiment_id", "status", "start_time", "end_time"]
HISTORY_COLUMNS = ["run_id", "step", "value", "time"]
DB_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")


class Reader(Protocol):
    """What a reader of the tracking store may ask.

    Every implementation gives the same values for the same store.

    ``runs`` returns one row per active run of ``schema.KIND`` ``kind`` in the experiments: the
    columns :data:`RUN_COLUMNS` (``experiment_id`` a string, start and end in ms since the epoch),
    then ``t:<tag>`` (every tag but the run's description, ``schema.RUN_NOTE``), ``m:<metric>`` (its
    latest value, NaN for NaN) and, with ``params``, ``p:<param>``; a run without a key has NaN
    there. Rows and extra columns come in no set order.
    """

    #: which path answers ("api", "sql", "server"): for the notes a report prints and for the tests
    name: str

    def experiments(self, names: Sequence[str] | None = None) -> dict[str, str]:
        """Active experiments, id -> name, the latest updated first.

        Only the named ones when ``names`` is given.
        """
        ...

    def runs(self, experiment_ids: Sequence[str], kind: str, params: bool = False) -> pd.DataFrame:
        """The active runs of ``kind`` in the experiments, one row each.

        The columns: the class's docstring.
        """
        ...

    def metric_history(self, run_ids: Sequence[str], key: str) -> pd.DataFrame:
        """Every logged value of metric ``key`` for the runs.

        :data:`HISTORY_COLUMNS` (time in unix seconds), sorted by run, time, step.
        """
        ...


def missing() -> bool:
    """True when the store is an SQLite file that does not exist yet.

    Nothing to read, and nothing to create (MLflow would spend seconds creating its schema for a
    reader that then finds no runs).
    """
    uri = store.tracking_uri()
    return uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :]).exists()


def history_frame(rows: list[tuple]) -> pd.DataFrame:
    """(run_id, step, value, time) rows as the sorted history table every reader returns."""
    import pandas as pd

    df = pd.DataFrame(rows, columns=HISTORY_COLUMNS)
    df["value"] = pd.to_numeric(df["value"], errors="coerce").astype(float)  # a server answers NaN as "NaN"
    df["time"] = df["time"].astype(float)
    return df.sort_values(["run_id", "time", "step"], kind="stable").reset_index(drop=True)


class ApiReader:
    """The store through MLflow's public API only.

    Right on every release; ~4x slower than the tables on 200 runs, more with histories (one request
    per run).
    """

    name = "api"

    def experiments(self, names: Sequence[str] | None = None) -> dict[str, str]:
        """See :meth:`Reader.experiments`."""
        if missing():
            return {}
        c = store.client()
        found = c.search_experiments(order_by=["last_update_time DESC"], max_results=50000)
        if names is not None:
            wanted = set(names)
            found = [e for e in found if e.name in wanted]
        return {str(e.experiment_id): e.name for e in found}

    def runs(self, experiment_ids: Sequence[str], kind: str, params: bool = False) -> pd.DataFrame:
        """See :meth:`Reader.runs`."""
        import pandas as pd

        ids = [str(i) for i in experiment_ids]
        if not ids:
            return pd.DataFrame(columns=RUN_COLUMNS)
        c, rows, token = store.client(), [], None
        while True:
            page = c.search_runs(ids, f"tags.`{schema.KIND}` = '{kind}'", max_results=10000, page_token=token)
            for run in page:
                row = {
                    "run_id": run.info.run_id,
                    "experiment_id": str(run.info.experiment_id),
                    "status": run.info.status,
                    "start_time": run.info.start_time,
                    "end_time": run.info.end_time,
                }
                row.update({f"t:{k}": v for k, v in run.data.tags.items() if k != schema.RUN_NOTE})
                row.update({f"m:{k}": v for k, v in run.data.metrics.items()})
                if params:
                    row.update({f"p:{k}": v for k, v in run.data.params.items()})
                rows.append(row)
            token = page.token
            if not token:
                return pd.DataFrame(rows, columns=None if rows else RUN_COLUMNS)

    def metric_history(self, run_ids: Sequence[str], key: str) -> pd.DataFrame:
        """See :meth:`Reader.metric_history`; one request per run."""
        ids = list(dict.fromkeys(run_ids))
        if not ids or missing():
            return history_frame([])
        c = store.client()
        return history_frame(
            [(rid, m.step, m.value, m.timestamp / 1000.0) for rid in ids for m in c.get_metric_history(rid, key)]
        )


def note(message: str) -> None:
    """Why a fast path was not taken, on stderr: the results are the same, only slower."""
    print(f"bench: {message}; reading through MLflow's public API", file=sys.stderr)


# --- the tables: MLflow's private schema, read only at a revision checked against the public API
# The schema revisions (alembic heads) whose tables read here are known to hold what the public API
# returns. Add a release's head only after running tests/bench/tracking/test_reader.py with that
# release installed.
KNOWN_REVISIONS = {
    "dc11669786a5": "MLflow 3.17.x: test_reader.py passes",
    # 3.18.0's three migrations (skill registry, issues, MCP versions) touch none of the tables read
    # here, and test_reader.py passed with its wheel installed over the 3.17.2 companions (its own
    # were not published: 2026-11-26)
    "f4a9b2c7d1e6": "MLflow 3.18.0: test_reader.py passes",
}
TABLES = ("experiments", "runs", "tags", "params", "latest_metrics", "metrics")
DEFAULT_WORKSPACE = "default"


@cache
def _engine(uri: str):
    import sqlalchemy

    return sqlalchemy.create_engine(uri)


def _query(eng, sql: str, **params) -> pd.DataFrame:
    import pandas as pd
    import sqlalchemy

    stmt = sqlalchemy.text(sql)
    for name, value in params.items():
        if isinstance(value, list | tuple):
            stmt = stmt.bindparams(sqlalchemy.bindparam(name, expanding=True))
    with eng.connect() as conn:
        return pd.read_sql(stmt, conn, params=params)


def unusable(uri: str) -> str | None:
    """Why the tables of the database ``uri`` are not read directly (None when they are).

    A missing table, a schema revision not in :data:`KNOWN_REVISIONS`, experiments in other
    workspaces (the API shows one workspace), or a database that does not answer.
    """
    import sqlalchemy

    try:
        eng = _engine(uri)
        present = set(sqlalchemy.inspect(eng).get_table_names())
        lacking = [t for t in ("alembic_version", *TABLES) if t not in present]
        if lacking:
            return f"no table {', '.join(lacking)}"
        revision = _query(eng, "SELECT version_num FROM alembic_version")["version_num"].tolist()
        if len(revision) != 1 or revision[0] not in KNOWN_REVISIONS:
            return f"schema revision {', '.join(map(str, revision)) or 'none'} is not one this reader was checked on"
        others = _query(eng, "SELECT COUNT(*) AS n FROM experiments WHERE workspace <> :w", w=DEFAULT_WORKSPACE)
        if int(others["n"].iloc[0]):
            return "experiments in workspaces other than the default one"
    except Exception as e:  # a database that cannot be reached or read: the public API may still work (a server)
        return f"the database did not answer ({type(e).__name__}: {e})"
    return None


_KIND_JOIN = """
    FROM runs r JOIN tags k ON k.run_uuid = r.run_uuid
    WHERE k.key = :kind_key AND k.value = :kind AND r.lifecycle_stage = 'active' AND r.experiment_id IN :ids
"""


class SqlReader(ApiReader):
    """MLflow's tables read with one query each (why: the module's docstring).

    A query that fails anyway is answered by the public API (the base class), unless ``strict`` (a
    test or benchmark that must measure this path).
    """

    name = "sql"

    def __init__(self, uri: str, strict: bool = False) -> None:
        self.engine = _engine(uri)
        self.strict = strict

    def _or_api(self, method: str, *args):
        try:
            return getattr(self, "_sql_" + method)(*args)
        except Exception as e:
            if self.strict:
                raise
            note(f"reading the tracking database directly failed ({type(e).__name__}: {e})")
            return getattr(ApiReader, method)(self, *args)

    def experiments(self, names: Sequence[str] | None = None) -> dict[str, str]:
        """See :meth:`Reader.experiments`; from the tables, or the public API when a query fails."""
        return self._or_api("experiments", names)

    def runs(self, experiment_ids: Sequence[str], kind: str, params: bool = False) -> pd.DataFrame:
        """See :meth:`Reader.runs`; from the tables, or the public API when a query fails."""
        return self._or_api("runs", experiment_ids, kind, params)

    def metric_history(self, run_ids: Sequence[str], key: str) -> pd.DataFrame:
        """See :meth:`Reader.metric_history`; from the tables, else through the public API."""
        return self._or_api("metric_history", list(dict.fromkeys(run_ids)), key)

    def _sql_experiments(self, names: Sequence[str] | None) -> dict[str, str]:
        df = _query(
            self.engine,
            "SELECT experiment_id, name FROM experiments WHERE lifecycle_stage = 'active' "
            "ORDER BY last_update_time DESC, experiment_id DESC",  # the public API's order and tie-breaker
        )
        if names is not None:
            df = df[df["name"].isin(list(names))]
        return dict(zip(df["experiment_id"].astype(str), df["name"], strict=True))

    def _sql_runs(self, experiment_ids: Sequence[str], kind: str, params: bool) -> pd.DataFrame:
        import numpy as np
        import pandas as pd

        if not experiment_ids:
            return pd.DataFrame(columns=RUN_COLUMNS)
        ids = [int(i) if str(i).isdigit() else i for i in experiment_ids]
        args = {"kind_key": schema.KIND, "kind": kind, "ids": ids}
        select = "SELECT r.run_uuid AS run_id, r.experiment_id, r.status, r.start_time, r.end_time"
        runs = _query(self.engine, select + _KIND_JOIN, **args)
        runs["experiment_id"] = runs["experiment_id"].astype(str)
        if runs.empty:
            return runs
        of_kind = f"(SELECT r.run_uuid {_KIND_JOIN})"
        tags = _query(
            self.engine,
            f"SELECT t.run_uuid AS run_id, t.key, t.value FROM tags t WHERE t.key <> :note AND t.run_uuid IN {of_kind}",
            note=schema.RUN_NOTE,
            **args,
        )
        metrics = _query(
            self.engine,
            "SELECT m.run_uuid AS run_id, m.key, m.value, m.is_nan FROM latest_metrics m "
            f"WHERE m.run_uuid IN {of_kind}",
            **args,
        )
        metrics["value"] = metrics["value"].astype(float).where(~metrics["is_nan"].astype(bool), np.nan)
        parts = [_pivot(tags, "t:"), _pivot(metrics, "m:")]
        if params:
            sql = f"SELECT p.run_uuid AS run_id, p.key, p.value FROM params p WHERE p.run_uuid IN {of_kind}"
            parts.append(_pivot(_query(self.engine, sql, **args), "p:"))
        return runs.set_index("run_id").join(parts, how="left").reset_index()

    def _sql_metric_history(self, run_ids: list[str], key: str) -> pd.DataFrame:
        import numpy as np
        import pandas as pd

        parts = [
            _query(
                self.engine,
                "SELECT m.run_uuid AS run_id, m.step, m.value, m.timestamp, m.is_nan FROM metrics m "
                "WHERE m.key = :key AND m.run_uuid IN :ids",  # qualified: `key` is reserved in MySQL
                key=key,
                ids=run_ids[i : i + 900],  # below SQLite's and MSSQL's bound-parameter limits
            )
            for i in range(0, len(run_ids), 900)
        ]
        if not parts:
            return history_frame([])
        df = pd.concat(parts, ignore_index=True)
        value = df["value"].astype(float).where(~df["is_nan"].astype(bool), np.nan)
        time = df["timestamp"].astype(float) / 1000.0
        return history_frame(list(zip(df["run_id"], df["step"], value, time, strict=True)))


def _pivot(long: pd.DataFrame, prefix: str) -> pd.DataFrame:
    import pandas as pd

    if long.empty:
        return pd.DataFrame()
    out = long.pivot(index="run_id", columns="key", values="value")
    out.columns = [prefix + str(c) for c in out.columns]
    return out


# --- a tracking server: histories in bulk through an endpoint of MLflow's UI ----------------------
BULK = "/ajax-api/2.0/mlflow/metrics/get-history-bulk"
RUNS_PER_REQUEST = 100  # the server's limit
VALUES_PER_REQUEST = 25_000  # the server's limit: an answer this long may have been cut


def is_server(uri: str | None = None) -> bool:
    """Whether ``uri`` (default: the store in force) is a tracking server's HTTP address."""
    return (uri or store.tracking_uri()).startswith(("http://", "https://"))


class ServerReader(ApiReader):
    """Runs through the public API; metric histories in bulk requests.

    A request asks one metric of up to 100 runs, up to 25,000 values, at the endpoint MLflow's UI
    draws its charts from.

    Why: the public API reads a history one run at a time, one HTTP request each: 2,940 requests and
    160 s for a campaign of the paper's size through a server (issue #16). A batch that comes back
    full may have been cut, so it is asked again in halves, down to one run, whose history then
    comes through the public API. The endpoint is not public API: a server that does not answer it
    (404, a refusal, another shape) is read one run at a time from then on (unless ``strict``).
    """

    name = "server"

    def __init__(self, strict: bool = False) -> None:
        self.strict = strict
        self.bulk = True

    def metric_history(self, run_ids: Sequence[str], key: str) -> pd.DataFrame:
        """See :meth:`Reader.metric_history`; in bulk requests while the server answers them."""
        ids = list(dict.fromkeys(run_ids))
        if self.bulk and ids:
            try:
                return self._bulk(ids, key)
            except Exception as e:
                if self.strict:
                    raise
                self.bulk = False
                note(f"the server did not answer bulk histories ({type(e).__name__}: {e}); one request per run")
        return ApiReader.metric_history(self, ids, key)

    def _bulk(self, run_ids: list[str], key: str) -> pd.DataFrame:
        from mlflow.utils.rest_utils import http_request, verify_rest_response

        client = store.client()
        creds = client._tracking_client.store.get_host_creds()  # the server's URL and the user's credentials
        rows: list[tuple] = []

        def fetch(ids: list[str]) -> None:
            params = {"run_id": ids, "metric_key": key, "max_results": VALUES_PER_REQUEST}
            answer = verify_rest_response(http_request(creds, BULK, "GET", params=params), BULK).json()
            metrics = answer.get("metrics", [])
            if len(metrics) < VALUES_PER_REQUEST:
                rows.extend((m["run_id"], m["step"], m["value"], m["timestamp"] / 1000.0) for m in metrics)
            elif len(ids) > 1:
                fetch(ids[: len(ids) // 2])
                fetch(ids[len(ids) // 2 :])
            else:  # one run with 25,000 values or more: the paged API has them all
                rows.extend(
                    (ids[0], m.step, m.value, m.timestamp / 1000.0) for m in client.get_metric_history(ids[0], key)
                )

        for i in range(0, len(run_ids), RUNS_PER_REQUEST):
            fetch(run_ids[i : i + RUNS_PER_REQUEST])
        return history_frame(rows)


def open_reader(fast: bool | None = None) -> Reader:
    """The reader for the store in force.

    The fastest one it supports (``fast`` None), the public API only (``fast`` False), or a fast
    path or an error saying why there is none (``fast`` True: for tests and benchmarks).

    A database store (or a server's database named by ``$BENCH_TRACKING_DB``) that :func:`unusable`
    accepts: :class:`SqlReader`; else a server: :class:`ServerReader`; else :class:`ApiReader`.
    """
    if fast is False:
        return ApiReader()
    uri = store.database_uri()
    if uri.split(":", 1)[0].split("+", 1)[0] in DB_SCHEMES and not missing():
        why = unusable(uri)
        if why is None:
            return SqlReader(uri, strict=bool(fast))
        if fast:
            raise store.StoreError(f"no fast path for {uri}: {why}")
        note(f"not reading the tracking database's tables ({why})")
    elif fast and not is_server():
        raise store.StoreError(f"no fast path for {store.tracking_uri()}: no database and no server")
    if is_server():
        return ServerReader(strict=bool(fast))
    return ApiReader()


# --- a campaign whole, as MLflow holds it: for bench export (bench/bundle_export.py) --------------
def campaign_runs(campaign: str) -> tuple[object, list]:
    """The campaign's experiment and every active run in it (any kind), oldest first.

    Read through the public API.
    """
    if missing():  # no store yet: no campaign, and no schema made for nothing
        return None, []
    c = store.client()
    exp = c.get_experiment_by_name(campaign)
    if exp is None or exp.lifecycle_stage != "active":
        return None, []
    runs, token = [], None
    while True:
        page = c.search_runs([exp.experiment_id], "", max_results=10000, page_token=token, order_by=["start_time ASC"])
        runs += list(page)
        if not (token := page.token):
            return exp, runs


def full_histories(run_id: str, keys: Sequence[str]) -> dict[str, list]:
    """Every logged value of each metric of a run.

    As MLflow ``Metric`` objects: value, step, timestamp in ms.
    """
    c = store.client()
    return {key: list(c.get_metric_history(run_id, key)) for key in keys}


def download_artifacts(run_id: str, dest: Path) -> None:
    """All of a run's artifacts copied into ``dest`` (as MLflow holds them, folders kept)."""
    Path(dest).mkdir(parents=True, exist_ok=True)
    store.client().download_artifacts(run_id, "", str(dest))


def run_traces(experiment_id: str, run_id: str) -> list:
    """The MLflow traces linked to a run (``mlflow.entities.Trace``, spans included)."""
    return list(store.client().search_traces(locations=[experiment_id], run_id=run_id))


def artifact_paths(run_id: str) -> list[str]:
    """Every artifact file of a run, as paths relative to its artifact root (folders walked).

    Read through the public API: ``bench verify`` names an artifact the record step logged that the
    store no longer holds.
    """
    c, out, todo = store.client(), [], [""]
    while todo:
        for f in c.list_artifacts(run_id, todo.pop() or None):
            (todo if f.is_dir else out).append(f.path)
    return sorted(out)
