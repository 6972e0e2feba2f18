"""``relay.json``: the relay's progress, in its one format, kept in the run directory.

It says which spool file maps to which MLflow run and how far each was read, so that a run
interrupted by a tracking outage or a killed harness is completed later by ``bench record`` without
losing or duplicating events (:mod:`bench.tracking.relay`). It belongs to the harness and is kept
out of the agent's reach.

One format (:data:`VERSION`, since 0.1's format reset): a file of another version, or of none, is
refused with one line naming what wrote it and what to do, and so is a run whose relay kept its
progress beside the spool (``<workspace>/.bench/relay.json``), as toolkits before the reset did:
relaying that spool again from its start would log every value twice.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.errors import BenchError
from bench.markup import one_line

VERSION = 1  # relay.json's one format (0.1's format reset)
REDO = "finish the run with the toolkit version that wrote it, or run it again with this one"


class RelayStateError(BenchError, RuntimeError):
    """relay.json cannot be read, or is of another format; the message says what to do."""


def read(state_file: Path) -> dict:
    """The saved progress, of this format (:data:`VERSION`).

    :class:`RelayStateError` in one line otherwise.
    """
    try:
        saved = json.loads(state_file.read_text())
    except (OSError, ValueError, RecursionError) as e:
        raise RelayStateError(f"{state_file} cannot be read ({one_line(e, 200)}); the spool beside it is kept") from e
    if not isinstance(saved, dict):
        raise RelayStateError(f"{state_file} holds a JSON {type(saved).__name__}, not the relay's progress")
    version = saved.get("version")
    if version == VERSION and type(version) is int:
        return saved
    if version is None:
        raise RelayStateError(f"{state_file} has no version: written before 0.1's format reset; {REDO}")
    if isinstance(version, int) and not isinstance(version, bool) and version > VERSION:
        raise RelayStateError(f"{state_file} has version {version}, newer than this toolkit's {VERSION}: upgrade it")
    raise RelayStateError(f"{state_file} has version {version!r}: written by an older toolkit; {REDO}")


def write(state_file: Path, progress: dict) -> None:
    """Write the progress atomically (tmp + rename), at :data:`VERSION`."""
    tmp = state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps({"version": VERSION, **progress}))
    tmp.replace(state_file)


def refuse_beside_the_spool(spool_dir: Path, state_file: Path) -> None:
    """Refuse a run whose relay kept its progress beside the spool (in the workspace).

    Such a run was relayed by a toolkit before 0.1's format reset: relaying its spool again from the
    start would log every value twice.
    """
    old = spool_dir.parent / "relay.json"
    if old.exists() and old != state_file:
        raise RelayStateError(
            f"{old}: the relay's progress kept beside the spool, written before 0.1's format reset (this toolkit keeps "
            f"it in the run directory, {state_file}); {REDO}"
        )


def check(spool_dir: Path, state_file: Path) -> None:
    """Refuse, before anything is recorded, a relay state this toolkit would refuse to read.

    ``bench record`` asks this before it opens the agent's MLflow run, so a run relayed by an older
    toolkit is refused without leaving an empty run in the store.
    """
    if state_file.exists():
        read(state_file)
    else:
        refuse_beside_the_spool(spool_dir, state_file)
