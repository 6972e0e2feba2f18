"""The store in force follows BENCH_MLRUNS_DIR for the whole life of a process, whatever it used before."""

from __future__ import annotations

import os
import subprocess
import sys

from bench.tracking import store
from tests.lazy import lazy

mlflow = lazy("mlflow")  # imported at its first use (tests/lazy.py)


def test_using_one_store_does_not_pin_it_for_the_process_or_its_children(tmp_path, monkeypatch):
    """mlflow.set_tracking_uri writes MLFLOW_TRACKING_URI into the environment, and tracking_uri() reads that first:
    once, the first store a process opened stayed in force after BENCH_MLRUNS_DIR moved, for it and for every bench
    process it started (the suite's later tests wrote into an earlier test's store)."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("BENCH_MLRUNS_DIR", str(tmp_path / "first"))
    store.client()
    assert mlflow.get_tracking_uri() == f"sqlite:///{tmp_path / 'first' / 'mlflow.db'}"
    assert "MLFLOW_TRACKING_URI" not in os.environ

    monkeypatch.setenv("BENCH_MLRUNS_DIR", str(tmp_path / "second"))
    second = f"sqlite:///{tmp_path / 'second' / 'mlflow.db'}"
    assert store.tracking_uri() == second
    store.client()
    assert mlflow.get_tracking_uri() == second  # the fluent API (notebooks, search_runs) follows too
    child = [sys.executable, "-c", "from bench.tracking import store; print(store.tracking_uri())"]
    assert subprocess.run(child, capture_output=True, text=True, check=True).stdout.strip() == second


def test_a_users_own_tracking_uri_is_kept(tmp_path, monkeypatch):
    server = "http://127.0.0.1:5999"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server)
    store.follow(f"sqlite:///{tmp_path / 'x.db'}")
    assert os.environ["MLFLOW_TRACKING_URI"] == server and store.tracking_uri() == server
