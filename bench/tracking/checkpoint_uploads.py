"""Which checkpoint files the relay uploads, and how.

Through :mod:`bench.untrusted`, from a harness-owned copy.

A spool's checkpoint event names a path, and the spool is the agent's. Before issue 29 the relay
resolved the path (following links) and uploaded it by name, so links, a sparse 1 GiB file and hard
links of one file named by forged events (800 MB into the store from 1.3 MB on disk) all went to the
store. Now a file is uploaded only if it lies in ``checkpoints/`` by name and opens through the
boundary (no link followed on the way, a regular file, never blocking, not sparse, at most
:data:`MAX_CHECKPOINT_BYTES`); it is copied from that open file into a folder of the run directory
and uploaded from the copy, so what is uploaded is what was checked. A file already uploaded (the
same inode, size and modification time: a hard link of it, or the same file named again) is not
uploaded twice.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from bench import untrusted
from bench.tracking.writer import MlflowWriter

MAX_CHECKPOINT_BYTES = 8 << 30  # a checkpoint larger than this is not uploaded (T3's backbone is ~0.1 GB)
LIMITS = untrusted.Limits(max_bytes=MAX_CHECKPOINT_BYTES)
NOT_UPLOADED = {  # the boundary's findings as the relay's reasons for not uploading a checkpoint
    untrusted.MISSING: "no-such-file",
    untrusted.OUTSIDE: "outside-checkpoints",
    untrusted.TOO_BIG: "too-large",
}


class Uploads:
    """The checkpoint uploads of one run's relay.

    Where from, the staging folder, what was uploaded already.
    """

    def __init__(self, checkpoints_dir: Path, staging_parent: Path, uploaded: list[str] | None = None) -> None:
        # opened from the folder above with no link followed (a checkpoints/ swapped for a link to a
        # host folder is refused), so the folder is kept as named, not resolved
        self.checkpoints_dir = Path(os.path.abspath(checkpoints_dir))
        self.staging_parent = Path(staging_parent)
        self.uploaded: list[str] = list(uploaded or [])  # "dev:ino:size:mtime_ns" of every file uploaded

    def path_of(self, raw: object) -> tuple[Path | None, str]:
        """The checkpoint a spool event names, if it lies in ``checkpoints/`` by name; else why not.

        Nothing is resolved here: whether it is a regular file reached with no link is
        :meth:`upload`'s check.
        """
        try:
            path = Path(os.path.abspath(str(raw)))
        except (OSError, ValueError):
            return None, "no-such-file"
        if not path.is_relative_to(self.checkpoints_dir) or path == self.checkpoints_dir:
            return None, "outside-checkpoints"
        return path, ""

    def upload(self, writer: MlflowWriter, run_id: str | None, path: Path) -> str:
        """Upload one checkpoint to ``run_id``'s ``checkpoints/``.

        "" when uploaded, else why not (raises TrackingError as the writer does).
        """
        opened = untrusted.open_regular(path, self.checkpoints_dir.parent, LIMITS)
        if isinstance(opened, untrusted.Finding):
            return NOT_UPLOADED.get(opened.what, opened.what)
        with opened as f, tempfile.TemporaryDirectory(prefix=".bench-staged-", dir=self.staging_parent) as tmp:
            st = os.fstat(f.fileno())
            key = f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"
            if key in self.uploaded:
                return "same-file"
            staged = Path(tmp) / path.name
            with open(staged, "wb") as out:
                left = MAX_CHECKPOINT_BYTES
                while left > 0 and (chunk := f.read(min(left, 1 << 20))):
                    out.write(chunk)
                    left -= len(chunk)
            writer.log_artifact(run_id, staged, "checkpoints")
        self.uploaded.append(key)
        return ""
