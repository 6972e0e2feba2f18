"""The bounds on what one read of agent-made input may take: bytes, entries, depth, lines, time."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Bounds on what one read may take.

    Defaults suit a script source or a checkpoint list, not a model.
    """

    max_bytes: int = 4 * 1024 * 1024
    max_entries: int = 20_000
    max_depth: int = 64
    max_line: int = 64 * 1024
    #: a search (``walk(..., match=)``) keeps only matching files, so ``max_entries`` bounds what it
    #: keeps; these bound what it looks at: entries (None: ``max_entries``) and seconds (None: no
    #: clock)
    max_seen: int | None = None
    max_seconds: float | None = None
    #: a file counts as sparse when its apparent size passes twice its allocated size plus this
    #: slack (tiny files may be inline, with st_blocks 0; a compressing filesystem may halve what a
    #: file allocates)
    sparse_slack: int = 64 * 1024


DEFAULT = Limits()
