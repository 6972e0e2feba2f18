"""Where things live: the project root, the task folders, the cache and the tracking store.

Every location can be moved with an environment variable, so that a cluster user can
put caches on scratch space and point several machines at one tracking server.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tasks_dir() -> Path:
    """The folder holding one sub-folder per task (``BENCH_TASKS_DIR`` overrides)."""
    return Path(os.environ.get("BENCH_TASKS_DIR", ROOT / "tasks")).resolve()


def cache_dir() -> Path:
    """Downloaded and prepared data, and agent workspaces (``BENCH_CACHE_DIR`` overrides)."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "1gc-7rc"
    return Path(os.environ.get("BENCH_CACHE_DIR", default)).resolve()


def mlruns_dir() -> Path:
    """The embedded tracking store: SQLite database plus artifacts (``BENCH_MLRUNS_DIR`` overrides)."""
    return Path(os.environ.get("BENCH_MLRUNS_DIR", ROOT / "mlruns")).resolve()


def workspaces_dir() -> Path:
    """Where agent workspaces are created (``BENCH_WORKSPACES_DIR`` overrides)."""
    return Path(os.environ.get("BENCH_WORKSPACES_DIR", cache_dir() / "workspaces")).resolve()
