"""A bundle imported into the MLflow server on PostgreSQL (tests/pg.py) reads as the SQLite store it came from.

Slow tier with the other PostgreSQL tests: the cluster and the server are shared with them (xdist group "postgres");
skipped with the reason where PostgreSQL's programs or the psycopg driver are missing.
"""

from __future__ import annotations

import pytest

from bench.cli import main
from bench.tracking import whole_runs
from tests.bench import bundle_support as support
from tests.bench.bundle_support import _tree, assert_same, report_frames

pytestmark = pytest.mark.slow  # a PostgreSQL cluster and an MLflow server
empty, source = support.empty, support.source  # module fixtures: an empty store, the exported campaign


def test_a_bundle_imported_into_the_postgres_server_reads_as_the_original_and_twice_adds_nothing(
    source, mlflow_server, monkeypatch, tmp_path
):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)
    runs_dir = tmp_path / "runs"
    assert main(["import", str(source.archive), "--quiet", "--runs-dir", str(runs_dir)]) == 0
    assert _tree(source.campaign) == source.tree
    assert_same(report_frames(source.campaign), source.frames)
    _, first = whole_runs.campaign_runs(source.campaign)
    assert main(["import", str(source.archive), "--quiet", "--tracking-uri", mlflow_server.url]) == 0
    _, again = whole_runs.campaign_runs(source.campaign)
    assert sorted(r.info.run_id for r in again) == sorted(r.info.run_id for r in first)
