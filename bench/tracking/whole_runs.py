"""A campaign's runs read whole, as MLflow holds them: for bench export, import and verify.

Not the :class:`~bench.tracking.reader.Reader` interface's tables: MLflow's own objects (the
experiment, its runs, every value of each metric, the artifacts and the traces), so that a bundle
carries a run as the store holds it. Read through MLflow's public API only.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bench.tracking import store
from bench.tracking.api_reader import missing


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
