"""The store through MLflow's public API: the default reader, and what every reader shares.

:class:`ApiReader` answers the :class:`~bench.tracking.reader.Reader` interface with MLflow's public
API only (``MlflowClient.search_runs``, ``get_metric_history``), so its results are right on any
MLflow release. The fast paths (:mod:`bench.tracking.sql_reader`,
:mod:`bench.tracking.server_reader`) derive from it and fall back to it, so it also holds what they
all return and say: the tables' columns (:data:`RUN_COLUMNS`, :data:`HISTORY_COLUMNS`), the sorted
history table (:func:`history_frame`), a store not made yet (:func:`missing`) and the line printed
when a fast path gives way (:func:`note`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from bench.tracking import schema, store

if TYPE_CHECKING:
    import pandas as pd

RUN_COLUMNS = ["run_id", "experiment_id", "status", "start_time", "end_time"]
HISTORY_COLUMNS = ["run_id", "step", "value", "time"]


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
