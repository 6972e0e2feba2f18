"""The agent's environment: an allow-list, because a deny-list forgets the next secret.

The harness's own environment holds what an agent must not have: the tracking store's address and
credentials (``MLFLOW_*``), the harness's paths (``BENCH_CACHE_DIR``, ``BENCH_DATA_MIRROR``), other
vendors' keys, cloud credentials, whatever the user exported. An agent gets only what a shell and a
training script need (locale, terminal, the GPU selection, thread counts), the names its adapter
declares (its own key and base URL, ``passthrough``), and what the harness sets for it (``extra``:
the private HOME, the tracer's few ``BENCH_`` variables). Nothing from the base is taken on trust
because of its name alone: ``MLFLOW_*``, ``BENCH_*``, ``PYTHONPATH`` and ``VIRTUAL_ENV`` are refused
even when a passthrough pattern would match them.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping

ALLOWED = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TERM",
    "TZ",
    "USER",
    "LOGNAME",
    "SHELL",
    "COLUMNS",
    "LINES",
    "NO_COLOR",
    "FORCE_COLOR",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
)
NEVER = ("MLFLOW_*", "BENCH_*", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def agent_environment(
    base: Mapping[str, str], passthrough: Iterable[str] = (), extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The allowed and passed-through variables of ``base``, then ``extra`` on top.

    ``base``: names or glob patterns, case-sensitive; ``extra``: the harness's own settings, which
    may use any name.
    """
    allowed = (*ALLOWED, *passthrough)
    env = {k: v for k, v in base.items() if _matches(k, allowed) and not _matches(k, NEVER)}
    env.update(extra or {})
    return env
