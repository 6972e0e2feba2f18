"""What of the agent's own files goes to the tracking store.

Copied through the hostile-input boundary first.

The record step uploads the agent's top-level scripts and the files an agent adapter leaves in
``.bench/artifacts/``. Both places are agent-writable: a "script" may be a link to
``/proc/self/environ`` (the harness's environment, with its database password), to the data cache's
raw CSV (every test label) or to a host file; a FIFO; a 1 GiB sparse file; one of 150,000 files. So
nothing is uploaded from the workspace itself: each file is copied by
:func:`bench.untrusted.copy_into` (no link followed, regular files only, never blocking, bounded by
its apparent and its allocated size, one copy per inode, a total cap) into a harness-owned staging
folder, redacted there of the run's secrets, and the staging folder is what the writer uploads.
Every refusal is a named, counted finding (:class:`bench.untrusted.Tally`) that ``result.json``
records as ``hostile_inputs``.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from bench import untrusted
from bench.pipeline.workspace import ARTIFACTS, Workspace

SCRIPT_LIMITS = untrusted.Limits(max_bytes=2 * 1024 * 1024, max_entries=2_000)  # one source file; top-level entries
ARTIFACT_LIMITS = untrusted.Limits(max_bytes=16 * 1024 * 1024, max_entries=1_000, max_depth=8)
TOTAL_BYTES = 64 * 1024 * 1024  # everything one run uploads from its workspace, together
MAX_SCRIPTS = 200  # top-level scripts uploaded (a run that writes more keeps the rest in its run directory)


@dataclass
class Staged:
    """The harness-owned copies to upload.

    ``scripts`` (files) and ``artifacts`` (file, its folder below ``agent/``), and the findings of
    everything refused.
    """

    scripts: list[Path] = field(default_factory=list)
    artifacts: list[tuple[Path, str]] = field(default_factory=list)
    tally: untrusted.Tally = field(default_factory=untrusted.Tally)


def top_level_scripts(ws: Workspace, tally: untrusted.Tally) -> list[str]:
    """The names of the workspace's top-level ``*.py`` entries, the locked files left out.

    An entry that is not a regular file (a link, a FIFO, a folder named ``x.py``) is a finding, not
    a script. Bounded by ``SCRIPT_LIMITS.max_entries`` entries read, whatever the agent made.
    """
    names: list[str] = []
    try:
        with os.scandir(ws.path) as it:
            for n, entry in enumerate(it):
                if n >= SCRIPT_LIMITS.max_entries:
                    tally.add(untrusted.Finding("workspace/", untrusted.TOO_MANY, f"over {n} top-level entries"))
                    break
                if not entry.name.endswith(".py") or entry.name in ws.task.locked_files:
                    continue
                try:
                    mode = entry.stat(follow_symlinks=False).st_mode
                except OSError:
                    continue
                if stat.S_ISLNK(mode):
                    target = _readlink(Path(entry.path))
                    tally.add(untrusted.Finding(entry.name, untrusted.LINK, target))
                elif not stat.S_ISREG(mode):
                    tally.add(untrusted.Finding(entry.name, untrusted.NOT_REGULAR, untrusted.describe_mode(mode)))
                else:
                    names.append(entry.name)
    except OSError as exc:
        tally.add(untrusted.Finding("workspace/", untrusted.UNREADABLE, exc.strerror or str(exc)))
    return sorted(names)


def _readlink(path: Path) -> str:
    try:
        return "-> " + os.readlink(path)[:200]
    except OSError:
        return ""


def stage(ws: Workspace, dest: Path) -> Staged:
    """Copy what the record step uploads of the agent's into ``dest``, through the boundary.

    ``dest`` is harness-owned and empty.
    """
    out = Staged()
    budget = untrusted.CopyBudget(TOTAL_BYTES)
    names = top_level_scripts(ws, out.tally)
    if len(names) > MAX_SCRIPTS:
        out.tally.add(
            untrusted.Finding("workspace/*.py", untrusted.TOO_MANY, f"{len(names)} scripts, {MAX_SCRIPTS} kept")
        )
        names = names[:MAX_SCRIPTS]
    for name in names:
        copied = untrusted.copy_into(name, ws.path, dest / "scripts" / name, SCRIPT_LIMITS, budget)
        _keep(copied, out.tally, out.scripts.append)
    files, findings = untrusted.walk(ws.path, ARTIFACT_LIMITS, sub=ARTIFACTS)
    out.tally.extend(findings)
    root = ws.path / ARTIFACTS
    for f in files:
        rel = f.relative_to(root)
        copied = untrusted.copy_into(f.relative_to(ws.path), ws.path, dest / "agent" / rel, ARTIFACT_LIMITS, budget)
        folder = str(Path("agent") / rel.parent).rstrip("/.")
        _keep(copied, out.tally, lambda p, folder=folder: out.artifacts.append((p, folder)))
    return out


def _keep(copied: Path | untrusted.Finding, tally: untrusted.Tally, keep) -> None:
    if isinstance(copied, untrusted.Finding):
        tally.add(copied)
    else:
        keep(copied)
