"""Fast read path for a tracking server: the metric histories of many runs in a few requests.

Why: a report draws each script run's checkpoint scores (:mod:`analysis.curves`), and MLflow's public API reads a
history one run at a time, one HTTP request each: 2,940 requests and 160 s for a campaign of the paper's size
through a server (issue #16) against 7.5 s for the whole report straight on the database. MLflow's server also
answers ``GET /ajax-api/2.0/mlflow/metrics/get-history-bulk`` (what its UI's charts use): one metric of up to
100 runs, up to 25,000 values, per request. A batch that comes back full may have been cut, so it is asked again
in halves, down to one run, whose history then comes through the paged public API.

Used only when the store is a server (``http(s)://``); anything unexpected raises and the caller
(:func:`analysis.runs.metric_history`) falls back to the public API. ``tests/bench/tracking/test_postgres.py``
checks that both give the same table.
"""

from __future__ import annotations

import pandas as pd

from bench.tracking import store

BULK = "/ajax-api/2.0/mlflow/metrics/get-history-bulk"
RUNS_PER_REQUEST = 100  # the server's limit
VALUES_PER_REQUEST = 25_000  # the server's limit: an answer this long may have been cut


def is_server(uri: str | None = None) -> bool:
    return (uri or store.tracking_uri()).startswith(("http://", "https://"))


def history(run_ids: list[str], key: str) -> pd.DataFrame:
    """Every logged value of metric ``key`` for the runs: run_id, step, value, time (unix seconds)."""
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
            rows.extend((ids[0], m.step, m.value, m.timestamp / 1000.0) for m in client.get_metric_history(ids[0], key))

    for i in range(0, len(run_ids), RUNS_PER_REQUEST):
        fetch(run_ids[i : i + RUNS_PER_REQUEST])
    df = pd.DataFrame(rows, columns=["run_id", "step", "value", "time"])
    df["value"] = pd.to_numeric(df["value"], errors="coerce").astype(float)  # NaN comes back as the string "NaN"
    return df.sort_values(["run_id", "time", "step"], kind="stable").reset_index(drop=True)
