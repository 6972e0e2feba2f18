"""Audit (pipeline step 6; paper §3.4): rule checks made after the run, from files the agent cannot rewrite.

Each check returns the violations it found; any violation disqualifies the run. Today the checks are
rule 1 (the locked files are unchanged), rule 5 (no link leads out of the workspace) and rule 7's forward
contract (the scorer's probes, recorded with each evaluation). The other rules are not audited yet; the
event stream (``events.jsonl``) that would answer some of them is recorded with every run.
"""

from __future__ import annotations

from pathlib import Path

from bench.checksums import sha256
from bench.pipeline.workspace import Workspace
from bench.result import Audit, Evaluation, Violation


def locked_files_unchanged(ws: Workspace, expected: dict[str, str]) -> list[Violation]:
    """Rule 1: prepare.py (and any other locked file) is locked. A changed, replaced or deleted copy is a violation."""
    out = []
    for name, want in expected.items():
        locked = ws.path / name
        if not locked.is_file():
            out.append(Violation(1, f"the locked {name} was deleted from the workspace"))
        elif (actual := sha256(locked)) != want:
            out.append(Violation(1, f"the locked {name} was modified (sha256 {actual[:12]}, expected {want[:12]})"))
    return out


def no_links_out_of_workspace(ws: Workspace) -> list[Violation]:
    """Rule 5: symbolic links in the workspace that point outside it (a way to read or write elsewhere)."""
    root = ws.path.resolve()
    out = []
    for p in ws.path.rglob("*"):
        if p.is_symlink():
            target = p.resolve()
            if root != target and root not in target.parents:
                out.append(Violation(5, f"{p.relative_to(ws.path)} links outside the workspace to {target}"))
    return out


def forward_contract_kept(evaluations: list[Evaluation]) -> list[Violation]:
    """Rule 7: the scorer's probes found a model that reads other samples of its batch or later positions, or is
    not deterministic (:mod:`bench.scoring.checks`). Evidence from outputs the scorer compared, not from the agent."""
    seen: set[str] = set()
    out = []
    for e in evaluations:
        why = e.official.raw.get("violation")
        if why and e.path not in seen:
            seen.add(e.path)
            out.append(Violation(7, f"{Path(e.path).name}: {why}"))
    return out


def audit(ws: Workspace, locked_sha256: dict[str, str], evaluations: list[Evaluation] = ()) -> Audit:
    """All checks, in rule order; ``locked_sha256`` maps each locked file to its hash at the start."""
    violations = [
        *locked_files_unchanged(ws, locked_sha256),
        *no_links_out_of_workspace(ws),
        *forward_contract_kept(list(evaluations)),
    ]
    return Audit(locked_sha256=dict(locked_sha256), violations=tuple(violations))
