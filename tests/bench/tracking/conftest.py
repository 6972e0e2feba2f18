"""The PostgreSQL cluster and MLflow server fixtures (tests/pg.py) for the tracking tests."""

import pytest

from tests.pg import mlflow_server, pg_cluster  # noqa: F401 (session fixtures, found by pytest here)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist adds the group to the node id
def pytest_collection_modifyitems(config, items):
    """The tests of the cluster on one pytest-xdist worker (``--dist loadgroup``): each worker would otherwise start
    its own cluster and server (~40 s on 2 cores)."""
    for item in items:
        if {"pg_cluster", "mlflow_server"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("postgres"))
