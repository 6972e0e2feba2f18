"""The optuna agent's view of the workspace it runs in (not ``bench.pipeline.workspace.Workspace``, the harness's
run directory around it): the baseline's ``train.py`` and its ``CONFIG``, prepare.py's constants, data/meta.json,
and the ``.bench/`` paths that the harness, the tracer and this agent agree on.
"""

from __future__ import annotations

import json
from pathlib import Path

from baselines.rewrite import module_constants, read_config
from bench.pipeline.workspace import ARTIFACTS, OPTUNA_JOURNAL, SPOOL
from bench.protocol import SPOOL_DIR_VAR, WORKSPACE_VAR, from_harness
from bench.tasks import Direction


class TrialWorkspace:
    """The workspace at ``path``, read once: the trials' source, the task's metric and direction, the shared paths."""

    def __init__(self, path: Path):
        self.path = path.resolve()
        self.train_source = (self.path / "train.py").read_text(encoding="utf-8")
        self.prepare_constants = module_constants((self.path / "prepare.py").read_text(encoding="utf-8"))
        self.base_config = read_config(self.train_source, self.prepare_constants)
        meta = self.path / "data" / "meta.json"
        try:
            self.meta = json.loads(meta.read_text()) if meta.is_file() else {}
        except (OSError, ValueError):
            self.meta = {}
        self.artifacts = self.path / ARTIFACTS  # the study's summary: the harness logs it on the agent run
        self.journal = self.path / OPTUNA_JOURNAL  # the default study storage
        # where the tracer writes the trials' traces: the harness says so in BENCH_SPOOL_DIR
        self.spool = Path(from_harness(SPOOL_DIR_VAR) or self.path / SPOOL)

    @property
    def traced(self) -> bool:
        """Whether the trials will be traced (the harness's tracer needs both variables); no scores otherwise."""
        return bool(from_harness(SPOOL_DIR_VAR) and from_harness(WORKSPACE_VAR))

    @property
    def metric(self) -> str:
        return str(self.prepare_constants.get("METRIC", "score"))

    @property
    def direction(self) -> Direction:
        return Direction(str(self.prepare_constants.get("DIRECTION", "min")))

    def next_script(self) -> Path:
        k = 1
        while (self.path / f"run_{k}.py").exists():
            k += 1
        return self.path / f"run_{k}.py"
