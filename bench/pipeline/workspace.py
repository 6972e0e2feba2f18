"""Workspace (pipeline step 1; paper §3.3 step 1): a fresh, isolated directory per agent run.

Layout of one run directory::

    <workspaces>/<campaign>/<task>-<agent>-r<repeat>-<time>/
        workspace/            the agent's working directory (and nothing above it is its business)
            program.md train.py prepare.py (read-only) data/ checkpoints/
            .bench/spool/     events of traced scripts (written by the tracer, read by the relay)
            .bench/artifacts/ what an adapter leaves for its MLflow run (optuna: its study summary)
            .bench/optuna/    the optuna agent's default study journal
        agent.log             everything the agent printed (harness-side: the agent cannot rewrite)
        events.jsonl          its output parsed into normalised events (agents with a stream parser)
        eval/                 isolated evaluation folders
        result.json           the run's outcome
        relay.json            how far the relay got (spool -> MLflow), for ``bench record``
        run.json              what ``bench run --resume`` needs to finish a run whose harness died
        evidence/             what the harness observed, for the audit (:mod:`bench.evidence`)
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from bench import untrusted
from bench.paths import workspaces_dir
from bench.tasks import Task

# Paths inside the workspace that the harness, the tracer and the optuna agent agree on (the optuna
# agent runs inside the workspace and imports these names rather than spelling them again).
SPOOL = Path(".bench") / "spool"
ARTIFACTS = Path(".bench") / "artifacts"
OPTUNA_JOURNAL = Path(".bench") / "optuna" / "study.journal"

COPIED = ("program.md", "train.py")  # plus the task's locked files (prepare.py, ...), made read-only
LOCKED_LIMITS = untrusted.Limits(max_bytes=256 * 1024 * 1024)  # a locked file is source code, never this big
READ_ONLY = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH


@dataclass(frozen=True)
class Workspace:
    """One run directory.

    The agent's ``workspace/`` and, beside it, the files only the harness writes.
    """

    run_dir: Path
    task: Task

    @property
    def path(self) -> Path:
        """The agent's working directory."""
        return self.run_dir / "workspace"

    @property
    def spool_dir(self) -> Path:
        """Where traced scripts append their events (read by the relay)."""
        return self.path / SPOOL

    @property
    def artifacts_dir(self) -> Path:
        """Where an agent adapter leaves files for its MLflow run."""
        return self.path / ARTIFACTS

    @property
    def checkpoints(self) -> Path:
        """The workspace's ``checkpoints/``, where scored checkpoints are saved."""
        return self.path / "checkpoints"

    @property
    def log(self) -> Path:
        """``agent.log``: everything the agent printed (harness-side)."""
        return self.run_dir / "agent.log"

    @property
    def events(self) -> Path:
        """``events.jsonl``: the agent's output parsed into normalised events."""
        return self.run_dir / "events.jsonl"

    @property
    def result_file(self) -> Path:
        """``result.json``: the run's outcome."""
        return self.run_dir / "result.json"

    @property
    def relay_state(self) -> Path:
        """The relay's progress (which spool line went to which MLflow run).

        Harness-side, beside result.json.
        """
        return self.run_dir / "relay.json"

    @property
    def eval_dir(self) -> Path:
        """The isolated evaluation folders' parent."""
        return self.run_dir / "eval"

    def scripts(self) -> list[Path]:
        """The agent's top-level Python files (the locked files excluded).

        Regular files only, so that a script that is a link (to ``/proc/self/environ``, the raw
        data, a host file) or a FIFO is never read as one; the audit names those
        (:func:`bench.rules.files.hostile_files`).
        """
        return sorted(
            p for p in self.path.glob("*.py") if p.name not in self.task.locked_files and untrusted.is_regular(p)
        )

    def locked_hashes(self) -> dict[str, str]:
        """The sha256 of each locked file as it is in the workspace now.

        Rule 1 compares them after the run; a locked file replaced by a link, a FIFO or a sparse
        file has none (read through :mod:`bench.untrusted`).
        """
        out = {}
        for name in self.task.locked_files:
            digest = untrusted.sha256_of(name, self.path, LOCKED_LIMITS)
            if not isinstance(digest, untrusted.Finding):
                out[name] = digest
        return out


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "x"


def campaign_dir(campaign: str, root: Path | None = None) -> Path:
    """The folder holding a campaign's run directories.

    ``bench run --resume CAMPAIGN`` looks there.
    """
    return (root or workspaces_dir()) / _slug(campaign)


def repeat_of(name: str, task_id: str, agent: str) -> int | None:
    """The repeat a run directory's name gives for ``task_id`` and ``agent``.

    The name is ``t6-baseline-r2-20260101-120000``, as :func:`create` names it, or a campaign's
    ``t6-baseline-r2-1a2b3c4d``; None for another task's or agent's.
    """
    m = re.fullmatch(rf"{re.escape(task_id)}-{re.escape(_slug(agent))}-r(\d+)-.+", name)
    return int(m.group(1)) if m else None


def create(
    task: Task,
    data_dir: Path,
    *,
    campaign: str,
    agent: str,
    repeat: int,
    root: Path | None = None,
    weights: list[Path] | None = None,
    run_id: str | None = None,
) -> Workspace:
    """Create the run directory: the task files, the prepared data and any weights.

    Copies of the task files, the prepared data (less what the task holds out) and any pretrained
    weights.

    ``run_id`` names the run directory (a campaign's stable id, :mod:`bench.campaign.spec`, so that
    a re-run of the campaign finds it); it must not exist yet (FileExistsError). Without it the name
    carries the time, as for ``bench run``. Everything is copied, not linked: the agent may write
    into its copy without touching the originals that the official evaluation reads, and no link
    points out of the workspace (rule 5).
    """
    base = campaign_dir(campaign, root)
    if run_id is not None:
        run_dir = base / _slug(run_id)
        run_dir.mkdir(parents=True)  # FileExistsError: never two runs in one directory
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_dir = base / f"{task.id}-{_slug(agent)}-r{repeat}-{stamp}"
        n = 1
        while run_dir.exists():
            n += 1
            run_dir = base / f"{task.id}-{_slug(agent)}-r{repeat}-{stamp}-{n}"
    ws = Workspace(run_dir, task)
    ws.path.mkdir(parents=True)
    for name in COPIED:
        shutil.copy2(task.file(name), ws.path / name)
    for name in task.locked_files:
        shutil.copy2(task.file(name), ws.path / name)
        os.chmod(ws.path / name, READ_ONLY)
    if weights:
        (ws.path / "weights").mkdir()
        for path in weights:
            shutil.copy2(path, ws.path / "weights" / path.name)
            os.chmod(ws.path / "weights" / path.name, READ_ONLY)
    # the prepared data without the held-out labels (rule 9): the agent gets train and val, the
    # scorer the rest
    held_out = {data_dir / name for name in task.held_out}
    shutil.copytree(
        data_dir,
        ws.path / "data",
        ignore=lambda folder, names: [n for n in names if n == ".complete" or Path(folder) / n in held_out],
    )
    ws.checkpoints.mkdir()
    ws.spool_dir.mkdir(parents=True)
    return ws
