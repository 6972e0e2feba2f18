"""The reading side of the tracking store: one interface for every reader, and the choice of one.

Why one interface: the readers (``analysis.runs`` for reports, leaderboards and notebooks; ``bench
ui``'s views) need three things from MLflow: the experiments, the runs of one kind with their tags,
metrics and params, and metric histories. :class:`Reader` is those three operations.
:class:`~bench.tracking.api_reader.ApiReader`, the default, uses only MLflow's public API
(``MlflowClient.search_runs``, ``get_metric_history``), so its results are right on any MLflow
release.

Faster paths are other implementations of the same interface, chosen by :func:`open_reader` only
when the store supports them, each falling back to the public API when it does not, with the same
results:

- :class:`~bench.tracking.sql_reader.SqlReader` reads MLflow's tables straight from a database store
  (SQLite, PostgreSQL, MySQL), ~4x faster on 200 runs (``tests/benchmarks/reader_speed.py``), only
  when the database's schema revision is one whose tables it was checked against (the tables are
  MLflow's private schema, free to change in any release);
- :class:`~bench.tracking.server_reader.ServerReader` reads metric histories from a tracking server
  in bulk (100 runs a request, an endpoint of MLflow's UI), and the rest through the public API; a
  server without that endpoint (404) or one that refuses it is read one run at a time.

``tests/bench/tracking/test_reader.py`` checks that each fast path equals the public API's values,
and that the fallback is taken when a fast path's preconditions fail.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from bench.tracking import sql_reader, store
from bench.tracking.api_reader import ApiReader, missing, note
from bench.tracking.server_reader import ServerReader, is_server

if TYPE_CHECKING:
    import pandas as pd

DB_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")


class Reader(Protocol):
    """What a reader of the tracking store may ask.

    Every implementation gives the same values for the same store.

    ``runs`` returns one row per active run of ``schema.KIND`` ``kind`` in the experiments: the
    columns :data:`~bench.tracking.api_reader.RUN_COLUMNS` (``experiment_id`` a string, start and
    end in ms since the epoch), then ``t:<tag>`` (every tag but the run's description,
    ``schema.RUN_NOTE``), ``m:<metric>`` (its latest value, NaN for NaN) and, with ``params``,
    ``p:<param>``; a run without a key has NaN there. Rows and extra columns come in no set order.
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

        :data:`~bench.tracking.api_reader.HISTORY_COLUMNS` (time in unix seconds), sorted by run,
        time, step.
        """
        ...


def open_reader(fast: bool | None = None) -> Reader:
    """The reader for the store in force.

    The fastest one it supports (``fast`` None), the public API only (``fast`` False), or a fast
    path or an error saying why there is none (``fast`` True: for tests and benchmarks).

    A database store (or a server's database named by ``$BENCH_TRACKING_DB``) that
    :func:`~bench.tracking.sql_reader.unusable` accepts:
    :class:`~bench.tracking.sql_reader.SqlReader`; else a server: :class:`ServerReader`; else
    :class:`ApiReader`.
    """
    if fast is False:
        return ApiReader()
    uri = store.database_uri()
    if uri.split(":", 1)[0].split("+", 1)[0] in DB_SCHEMES and not missing():
        why = sql_reader.unusable(uri)
        if why is None:
            return sql_reader.SqlReader(uri, strict=bool(fast))
        if fast:
            raise store.StoreError(f"no fast path for {uri}: {why}")
        note(f"not reading the tracking database's tables ({why})")
    elif fast and not is_server():
        raise store.StoreError(f"no fast path for {store.tracking_uri()}: no database and no server")
    if is_server():
        return ServerReader(strict=bool(fast))
    return ApiReader()
