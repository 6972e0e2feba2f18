"""Where things live: the project root, the task folders, the cache and the tracking store.

Every location can be moved with an environment variable (:mod:`bench.settings`:
``BENCH_TASKS_DIR``, ``BENCH_CACHE_DIR``, ``BENCH_MLRUNS_DIR``, ``BENCH_WORKSPACES_DIR``), so that a
cluster user can put caches on scratch space and point several machines at one tracking server.
"""

from __future__ import annotations

from pathlib import Path

from bench import settings

ROOT = settings.ROOT


def tasks_dir() -> Path:
    """The folder holding one sub-folder per task (``BENCH_TASKS_DIR`` overrides)."""
    return settings.TASKS_DIR.get().resolve()


def cache_dir() -> Path:
    """Downloaded and prepared data, and agent workspaces (``BENCH_CACHE_DIR`` overrides)."""
    return settings.CACHE_DIR.get().resolve()


def mlruns_dir() -> Path:
    """The embedded tracking store: SQLite database plus artifacts.

    ``BENCH_MLRUNS_DIR`` overrides.
    """
    return settings.MLRUNS_DIR.get().resolve()


def workspaces_dir() -> Path:
    """Where agent workspaces are created (``BENCH_WORKSPACES_DIR`` overrides)."""
    return settings.WORKSPACES_DIR.get().resolve()


def clis_dir() -> Path:
    """Where the agents' CLIs are installed, one folder per name and version.

    ``BENCH_CLI_DIR`` overrides.
    """
    return settings.CLI_DIR.get().resolve()
