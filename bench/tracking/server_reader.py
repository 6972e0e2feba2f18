"""A tracking server's metric histories read in bulk: the reader of a store behind a server.

:class:`ServerReader` answers the :class:`~bench.tracking.reader.Reader` interface through the
public API, except metric histories: those come 100 runs a request from an endpoint of MLflow's UI.
A server without that endpoint (404) or one that refuses it is read one run at a time, with the same
values (``tests/bench/tracking/test_reader.py`` checks both).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from bench.tracking import store
from bench.tracking.api_reader import ApiReader, history_frame, note

if TYPE_CHECKING:
    import pandas as pd

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
