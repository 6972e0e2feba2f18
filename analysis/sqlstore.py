"""Fast read path for database-backed tracking stores (the embedded SQLite store, PostgreSQL, MySQL).

Why: ``MlflowClient.search_runs`` builds an ORM object per run, tag, param and metric. A campaign of the
paper's size (245 agent runs, ~3,000 script runs, ~700 eval runs) is ~56,000 objects and 4-5 s on a
small CPU, and importing MLflow costs another 2-3 s: more than the whole report may take. The tracking
database has had the same five tables since MLflow 1.x (``experiments``, ``runs``, ``tags``,
``params``, ``latest_metrics``, ``metrics``), so a report reads them with one SQL query each.

Read-only, and used only when :func:`engine` finds such a database; anything unexpected (another
scheme, a missing table, a schema change in a future MLflow) makes the caller fall back to the public
API (:mod:`analysis.runs`), and ``tests/analysis`` checks that both paths give the same tables.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from bench.tracking import schema, store

DB_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")


def missing() -> bool:
    """True when the store is an SQLite file that does not exist yet: nothing to read, and nothing to create."""
    uri = store.tracking_uri()
    return uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :]).exists()


def engine():
    """A SQLAlchemy engine on the tracking database (for a server: the one ``$BENCH_TRACKING_DB`` names, which
    ``bench server`` prints), or None when there is none to read."""
    uri = store.database_uri()
    if uri.split(":", 1)[0].split("+", 1)[0] not in DB_SCHEMES:
        return None
    if missing():
        return None
    return _engine(uri)


@cache
def _engine(uri: str):
    import sqlalchemy

    return sqlalchemy.create_engine(uri)


def _read(eng, sql: str, **params) -> pd.DataFrame:
    import sqlalchemy

    stmt = sqlalchemy.text(sql)
    for name, value in params.items():
        if isinstance(value, list | tuple):
            stmt = stmt.bindparams(sqlalchemy.bindparam(name, expanding=True))
    with eng.connect() as conn:
        return pd.read_sql(stmt, conn, params=params)


def experiments(eng, names: list[str] | None) -> dict[str, str]:
    """Active experiments, id -> name (only the named ones when ``names`` is given)."""
    df = _read(eng, "SELECT experiment_id, name FROM experiments WHERE lifecycle_stage = 'active'")
    if names is not None:
        df = df[df["name"].isin(names)]
    return dict(zip(df["experiment_id"].astype(str), df["name"], strict=True))


_KIND_JOIN = """
    FROM runs r JOIN tags k ON k.run_uuid = r.run_uuid
    WHERE k.key = :kind_key AND k.value = :kind AND r.lifecycle_stage = 'active' AND r.experiment_id IN :ids
"""


def wide(eng, experiment_ids: list[str], kind: str, params: bool = False) -> pd.DataFrame:
    """Runs of one ``schema.KIND``: run_id, experiment_id, status, start/end (ms), then ``t:``/``m:``/``p:`` columns."""
    ids = [int(i) if str(i).isdigit() else i for i in experiment_ids]
    args = {"kind_key": schema.KIND, "kind": kind, "ids": ids}
    runs = _read(
        eng, "SELECT r.run_uuid AS run_id, r.experiment_id, r.status, r.start_time, r.end_time" + _KIND_JOIN, **args
    )
    runs["experiment_id"] = runs["experiment_id"].astype(str)
    if runs.empty:
        return runs
    parts = [runs.set_index("run_id")]
    tags = _read(
        eng,
        f"SELECT t.run_uuid AS run_id, t.key, t.value FROM tags t WHERE t.key <> :note AND t.run_uuid IN "
        f"(SELECT r.run_uuid {_KIND_JOIN})",
        note=schema.RUN_NOTE,
        **args,
    )
    parts.append(_pivot(tags, "t:"))
    metrics = _read(
        eng,
        f"SELECT m.run_uuid AS run_id, m.key, m.value, m.is_nan FROM latest_metrics m WHERE m.run_uuid "
        f"IN (SELECT r.run_uuid {_KIND_JOIN})",
        **args,
    )
    metrics["value"] = metrics["value"].astype(float).where(~metrics["is_nan"].astype(bool), np.nan)
    parts.append(_pivot(metrics, "m:"))
    if params:
        p = _read(
            eng,
            f"SELECT p.run_uuid AS run_id, p.key, p.value FROM params p WHERE p.run_uuid IN "
            f"(SELECT r.run_uuid {_KIND_JOIN})",
            **args,
        )
        parts.append(_pivot(p, "p:"))
    return parts[0].join(parts[1:], how="left").reset_index()


def _pivot(long: pd.DataFrame, prefix: str) -> pd.DataFrame:
    if long.empty:
        return pd.DataFrame()
    out = long.pivot(index="run_id", columns="key", values="value")
    out.columns = [prefix + str(c) for c in out.columns]
    return out


def history(eng, run_ids: list[str], key: str) -> pd.DataFrame:
    """Every logged value of one metric for the runs: run_id, step, value, time (unix seconds)."""
    parts = []
    for i in range(0, len(run_ids), 900):
        parts.append(
            _read(
                eng,
                "SELECT m.run_uuid AS run_id, m.step, m.value, m.timestamp, m.is_nan FROM metrics m "
                "WHERE m.key = :key AND m.run_uuid IN :ids",  # qualified: `key` is reserved in MySQL
                key=key,
                ids=run_ids[i : i + 900],
            )
        )
    df = (
        pd.concat(parts, ignore_index=True)
        if parts
        else pd.DataFrame(columns=["run_id", "step", "value", "timestamp", "is_nan"])
    )
    df["value"] = df["value"].astype(float).where(~df["is_nan"].astype(bool), np.nan)
    df["time"] = df["timestamp"].astype(float) / 1000.0
    return df.sort_values(["run_id", "time", "step"], kind="stable")[["run_id", "step", "value", "time"]].reset_index(
        drop=True
    )
