"""Session fixtures: a private PostgreSQL cluster on 127.0.0.1 and an MLflow server on it (lean flags).

Reuse them by importing them into a ``conftest.py`` (pytest then finds them for that folder's tests), as
``tests/bench/tracking/conftest.py`` does::

    from tests.pg import mlflow_server, pg_cluster  # noqa: F401

``pg_cluster`` is a :class:`bench.tracking.postgres.Cluster` (``pg_cluster.uri("db")`` gives an SQLAlchemy URL,
the database made by :func:`fresh_database`); ``mlflow_server`` a :class:`bench.tracking.server.Server` on the
cluster's ``mlflow`` database (``mlflow_server.url`` for ``MLFLOW_TRACKING_URI``). Both skip the test with the
reason when PostgreSQL's programs or the psycopg driver (the ``postgres`` extra) are missing, and stop at the end
of the session. Nothing is shared with another session: free ports, folders of their own.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.tracking import postgres, server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def skip_without_postgres() -> None:
    if postgres.bin_dir() is None:
        pytest.skip("PostgreSQL's programs are missing (Debian: apt-get install postgresql; .ci/run does it)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("no PostgreSQL driver: pip install -e '.[postgres]' (psycopg)")


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[postgres.Cluster]:
    """A private PostgreSQL cluster (initdb + pg_ctl, as the postgres user when root), trust auth, 127.0.0.1 only."""
    skip_without_postgres()
    root = Path(tempfile.mkdtemp(prefix="bench-pg-"))
    os.chmod(root, 0o755)
    cluster = postgres.Cluster(root / "cluster", port=free_port())
    try:
        cluster.start()
    except RuntimeError as e:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"could not start a private PostgreSQL cluster: {e}")
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def fresh_database(cluster: postgres.Cluster, prefix: str = "t") -> str:
    """The URL of a new, empty database on the cluster (a fresh store for one test)."""
    uri = cluster.uri(f"{prefix}_{uuid.uuid4().hex[:10]}")
    assert postgres.create_database(uri)
    return uri


@pytest.fixture(scope="session")
def mlflow_server(pg_cluster: postgres.Cluster) -> Iterator[server.Server]:
    """MLflow's server on the cluster's ``mlflow`` database, artifacts in a folder of its own, one worker."""
    artifacts = Path(tempfile.mkdtemp(prefix="bench-pg-artifacts-"))
    running = server.start(
        pg_cluster.uri("mlflow"), artifacts, port=free_port(), log=pg_cluster.root.parent / "mlflow-server.log"
    )
    try:
        yield running
    finally:
        running.stop()
        shutil.rmtree(artifacts, ignore_errors=True)
