"""The disk a run uses: its workspace's size, measured by the watch against ``--workspace-limit``
(:mod:`bench.sandbox.resource_limits`, :class:`bench.pipeline.watch.WorkspaceGuard`).

Why a walk of the tree and not the file system's counters: the workspace shares its file system with every other
run, so only the files under it say what this run holds; each file is counted once (hard links) and links are not
followed (a link to the data cache is not the run's disk).
"""

from __future__ import annotations

import os
from pathlib import Path


def tree_bytes(root: Path, stop_at: int | None = None) -> int:
    """The bytes under ``root``: each regular file's size once (hard links counted once), not following links;
    stops counting once past ``stop_at`` (a workspace of a million files must not stall the watch)."""
    total, seen, stack = 0, set(), [str(root)]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        if (st.st_dev, st.st_ino) not in seen:
                            seen.add((st.st_dev, st.st_ino))
                            total += max(st.st_size, st.st_blocks * 512)
                except OSError:
                    continue
        if stop_at is not None and total > stop_at:
            break
    return total
