"""The PostgreSQL cluster and MLflow server fixtures (tests/pg.py) for the tracking tests."""

from tests.pg import mlflow_server, pg_cluster  # noqa: F401 (session fixtures, found by pytest here)
