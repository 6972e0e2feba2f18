"""The audit (paper §3.4): rule checks made after the run, from files the agent cannot rewrite.

Each check returns the violations it found; any violation disqualifies the run. This
module holds the checks that the filesystem alone can answer; checks over the agent's
tool calls (internet, package installs, leaving the workspace) read the normalised event
stream and are added beside them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from bench.workspace import Workspace, sha256


@dataclass(frozen=True)
class Violation:
    rule: int
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


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


def audit(ws: Workspace, locked_sha256: dict[str, str]) -> list[Violation]:
    """All filesystem checks, in rule order; ``locked_sha256`` maps each locked file to its hash at the start."""
    return [*locked_files_unchanged(ws, locked_sha256), *no_links_out_of_workspace(ws)]
