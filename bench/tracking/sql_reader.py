"""MLflow's tables read straight from a database store: the fastest reader, where it is safe.

:class:`SqlReader` answers the :class:`~bench.tracking.reader.Reader` interface with one query per
operation on a database store (SQLite, PostgreSQL, MySQL), ~4x faster than the public API on 200
runs (``tests/benchmarks/reader_speed.py``). The tables are MLflow's private schema, free to change
in any release, so they are read only when :func:`unusable` finds the database at a schema revision
whose tables were checked against the public API (:data:`KNOWN_REVISIONS`); a query that fails
anyway is answered by the public API (:class:`~bench.tracking.api_reader.ApiReader`), with the same
values. ``tests/bench/tracking/test_reader.py`` checks both.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING

from bench.tracking import schema
from bench.tracking.api_reader import RUN_COLUMNS, ApiReader, history_frame, note

if TYPE_CHECKING:
    import pandas as pd

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
