"""The tracking store: which MLflow backend, created once, and one experiment per campaign.

Default: an embedded store under ``mlruns/`` (SQLite database + local artifacts), addressed
by an absolute URI so that child processes and later sessions find the same files whatever
their working directory. ``MLFLOW_TRACKING_URI`` overrides it (a server, PostgreSQL, ...).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from functools import cache
from pathlib import Path

from bench import settings
from bench.errors import BenchError
from bench.paths import mlruns_dir
from bench.tracking import schema

# the database behind a tracking server, for readers that may read it directly (bench report):
# `bench server` prints it; a server does not say its backend, and reading the tables is ~20x faster
# than a request per run (issue #16)
DATABASE_ENV = settings.TRACKING_DB.name


class StoreError(BenchError, RuntimeError):
    """The tracking store (its server, its database) could not be started or reached as asked."""


def default_uri() -> str:
    """The embedded store: an SQLite file in the mlruns folder."""
    return f"sqlite:///{mlruns_dir() / 'mlflow.db'}"


def tracking_uri() -> str:
    """The URI in force: ``MLFLOW_TRACKING_URI`` if set, else the embedded store."""
    return os.environ.get("MLFLOW_TRACKING_URI") or default_uri()


def database_uri() -> str:
    """The URI of the tracking database (the store's own, or a server's).

    The store itself if it is one, else ``$BENCH_TRACKING_DB`` for a server ("" if unset).
    """
    uri = tracking_uri()
    if uri.startswith(("http://", "https://")):
        return settings.TRACKING_DB.get()
    return uri


def is_embedded() -> bool:
    """Whether the store in force is the embedded SQLite file (no server, no other database)."""
    return tracking_uri() == default_uri()


def artifact_root() -> Path:
    """The folder where the embedded store keeps its artifacts."""
    return mlruns_dir() / "artifacts"


def client():
    """An MlflowClient on the store in force (one per URI, created once).

    MLflow's module-level API follows it.

    The fluent API (``mlflow.search_runs``, what notebooks and tests use) keeps the last URI it was
    given, so it is pointed again at the store in force on every call: a process that used another
    store meanwhile (a campaign in a folder of its own, then the default one) must not go on reading
    the other one.
    """
    import mlflow

    uri = tracking_uri()
    c = _client(uri)
    if mlflow.get_tracking_uri() != uri:
        follow(uri)
    return c


def follow(uri: str) -> None:
    """Point MLflow's module-level API at ``uri`` without touching the environment.

    ``mlflow.set_tracking_uri`` also writes ``MLFLOW_TRACKING_URI`` into ``os.environ`` (for
    subprocesses, its comment says), and :func:`tracking_uri` reads that variable first: the first
    store a process used would then stay in force for it and every process it starts, whatever
    ``BENCH_MLRUNS_DIR`` says later (a test suite's later tests, once, wrote into an earlier test's
    store). A user's own ``MLFLOW_TRACKING_URI`` is kept as it was.
    """
    import mlflow

    before = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    if before is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = before


@cache
def _client(uri: str):
    """An MlflowClient on ``uri``, with its schema created before any other process uses it.

    Several processes creating a new SQLite/PostgreSQL schema at once fail (duplicate tables on
    SQLite, a UniqueViolation on PostgreSQL; measured with MLflow 3.17: 4 processes on a fresh
    SQLite store, most fail), so the harness does it here, before it starts an agent, under a lock:
    a file lock beside an SQLite database (harness processes on one machine take turns), a
    PostgreSQL advisory lock for a PostgreSQL database (harness processes on any node take turns:
    :mod:`bench.tracking.postgres`); and a database is retried a few times, since a process that
    lost a race finds the schema made. A server (http, https) makes its own schema and is asked
    once: MLflow already retries each request to it a few seconds.
    """
    import logging

    from mlflow.tracking import MlflowClient

    # "Creating initial MLflow database tables..." on a fresh store: MLflow's INFO, which reached a
    # user's console (and the stderr that a refused command's one line is read from) only for the
    # first command of a store
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
    if uri == default_uri():
        mlruns_dir().mkdir(parents=True, exist_ok=True)
    follow(uri)
    # more tries of a server would only make an unreachable one cost half a minute at a run's start
    # and again at its record (MLflow's retries: writer.py)
    tries = 1 if uri.split(":", 1)[0] in ("http", "https") else SCHEMA_TRIES
    with schema_lock(uri):
        for attempt in range(tries):
            c = MlflowClient(tracking_uri=uri)
            try:
                c.search_experiments(max_results=1)  # creates the schema on first use
                return c
            except Exception:
                if attempt == tries - 1:
                    raise
                time.sleep(0.5 * (attempt + 1))  # another process is creating it: look again once it is done
    raise AssertionError("unreachable")


SCHEMA_TRIES = 5


def schema_lock(uri: str) -> contextlib.AbstractContextManager:
    """The lock under which the schema of the database ``uri`` is created.

    A no-op for a server or another store.
    """
    scheme = uri.split(":", 1)[0].split("+", 1)[0]
    if scheme == "sqlite" and uri.startswith("sqlite:///") and uri != "sqlite:///:memory:":
        return _file_lock(Path(uri[len("sqlite:///") :]).parent / ".schema.lock")  # the embedded store: mlruns/
    if scheme in ("postgresql", "postgres"):
        from bench.tracking import postgres

        return postgres.advisory_lock(uri, postgres.SCHEMA_LOCK)
    return contextlib.nullcontext()


@contextlib.contextmanager
def _file_lock(path: Path):
    """An exclusive lock on ``path``, released when the block ends."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def experiment_id(campaign: str) -> str:
    """The experiment of a campaign, created on first use (artifacts under ``mlruns/artifacts``)."""
    c = client()
    exp = c.get_experiment_by_name(campaign)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            c.restore_experiment(exp.experiment_id)
        if schema.EXPERIMENT_KIND not in exp.tags:  # made by an older version, or by hand: training, not GenAI
            c.set_experiment_tag(exp.experiment_id, schema.EXPERIMENT_KIND, schema.EXPERIMENT_KIND_TRAINING)
        return exp.experiment_id
    location = (artifact_root() / campaign).as_uri() if is_embedded() else None
    try:
        # model training, not GenAI: MLflow 3's UI otherwise opens on traces and judges
        tags = {schema.EXPERIMENT_KIND: schema.EXPERIMENT_KIND_TRAINING}
        return c.create_experiment(campaign, artifact_location=location, tags=tags)
    except Exception:  # created meanwhile by another harness process
        exp = c.get_experiment_by_name(campaign)
        if exp is None:
            raise
        return exp.experiment_id
