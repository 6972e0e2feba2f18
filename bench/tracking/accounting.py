"""What the relay did with a run's spool, in numbers.

Relayed + dropped (by reason) + left unrelayed = written.

``result.json`` carries :func:`summary` (as ``scripts``), and the agent run its lines
(:func:`lines`: the tag ``bench.relay.dropped``, the description). The counts come from
:class:`~bench.tracking.script_state.ScriptState`, which the relay keeps in ``relay.json``; the
values left in the spool are counted by reading what was not relayed.
"""

from __future__ import annotations

import os
from pathlib import Path

from bench import untrusted
from bench.tracking import relay_limits, schema
from bench.tracking.script_state import ScriptState

# a spool file may be as large as the relay's byte cap (bytes past it are counted from its size,
# never read)
SPOOL_LIMITS = untrusted.Limits(max_bytes=1 << 62)


def left(path: Path, offset: int, chunk: int) -> tuple[int, int]:
    """Values in the bytes of a spool file past ``offset``, and the bytes past the cap, never read.

    The values are what the relay did not relay, read ``chunk`` bytes at a time up to the byte cap.

    The spool file is the agent's: it is opened through :mod:`bench.untrusted` (no link followed, a
    FIFO or a folder named like it refused at once instead of blocking or raising, a sparse file
    refused), and each line is parsed with a bounded depth and length (a line of 100,000 ``[``
    counts as no value, never a ``RecursionError``). A refused file counts as nothing left to read.
    """
    path = Path(path)
    fh = untrusted.open_regular(path.name, path.parent, SPOOL_LIMITS)
    if isinstance(fh, untrusted.Finding):
        return 0, 0
    with fh:
        size = os.fstat(fh.fileno()).st_size
        end, at, values = min(size, relay_limits.MAX_SPOOL_BYTES), offset, 0
        if at < end:
            fh.seek(at)
            while at < end and (data := fh.read(min(chunk, end - at))):
                at += len(data)
                values += sum(_values(line) for line in data.splitlines())
    return values, max(0, size - max(offset, relay_limits.MAX_SPOOL_BYTES))


def _values(line: bytes) -> int:
    ev = untrusted.loads_json(line, max_depth=32, max_len=relay_limits.MAX_SPOOL_BYTES)
    if isinstance(ev, untrusted.Finding):
        return 0
    if isinstance(ev, dict) and ev.get("ev") == "metrics" and isinstance(ev.get("metrics"), dict):
        return len(ev["metrics"])
    return int(isinstance(ev, dict) and ev.get("ev") == "checkpoint")  # its self-reported score


def _add(into: dict[str, int], counts: dict[str, int]) -> None:
    for k, n in counts.items():
        into[k] = into.get(k, 0) + n


def _split(counts: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """Counts by reason -> (dropped, merged).

    A copy of a value relayed once is no loss, so it is not a drop.
    """
    dropped = {k: n for k, n in sorted(counts.items()) if n and k not in relay_limits.MERGED}
    return dropped, {k: n for k, n in sorted(counts.items()) if n and k in relay_limits.MERGED}


def summary(states: list[ScriptState]) -> dict:
    """The relay's part of ``result.json``.

    Launches, statuses, and per script and in all what became of each value and checkpoint event
    (``unrelayed``: scripts with something left in their spool or a run left open). Every value read
    is counted once: relayed + dropped + merged (copies) + unrelayed = the values the spool holds.
    """
    scripts = [s for s in states if s.script]
    statuses = [s.status or "RUNNING" for s in scripts]
    counts: dict[str, int] = {}
    not_uploaded: dict[str, int] = {}
    for s in states:
        _add(counts, s.dropped)
        _add(not_uploaded, s.not_uploaded)
    dropped, merged = _split(counts)
    return {
        "launched": len(scripts),
        "statuses": {k: statuses.count(k) for k in sorted(set(statuses))},
        "unrelayed": sum(1 for s in scripts if not s.closed or s.unrelayed or s.unread_bytes),
        "relay": {
            "values": {
                "relayed": sum(s.metrics for s in states),
                "dropped": dropped,
                "merged": merged,
                "unrelayed": sum(s.unrelayed for s in states),
            },
            "checkpoints": {
                "events": sum(s.checkpoint_count for s in states),
                "uploaded": sum(s.uploaded for s in states),
                "not_uploaded": {k: n for k, n in sorted(not_uploaded.items()) if n},
            },
            "params_dropped": sum(s.params_dropped for s in states),
            "unread_bytes": sum(s.unread_bytes for s in states),
            "store_errors": sorted({s.store_error for s in states if s.store_error}),
            "caps": {
                "values_per_script": relay_limits.MAX_VALUES_PER_SCRIPT,
                "values_per_run": relay_limits.MAX_VALUES_PER_RUN,
                "checkpoint_uploads_per_script": relay_limits.MAX_CHECKPOINT_UPLOADS,
                "spool_bytes_per_script": relay_limits.MAX_SPOOL_BYTES,
            },
        },
        "scripts": [
            {
                "script": s.script,
                "pid": s.pid,
                "status": s.status,
                "run_id": s.run_id,
                "started": s.started,
                "ended": s.ended,
                "checkpoints": s.checkpoint_count,
                "checkpoints_uploaded": s.uploaded,
                "error": s.error,
                "values": s.metrics,
                "dropped": _split(s.dropped)[0],
                "merged": _split(s.dropped)[1],
                "examples": {k: v for k, v in s.examples.items() if s.dropped.get(k)},  # agent text: not Markdown
                "unrelayed": s.unrelayed,
                "unread_bytes": s.unread_bytes,
                "lines_dropped": dict(sorted(s.lines_dropped.items())),  # lines that were no event (issue 29)
            }
            for s in scripts
        ],
    }


def lines(scripts: dict) -> list[str]:
    """What was dropped or left, one line per reason; empty when everything was relayed.

    No agent-chosen text: these go into tags and Markdown. ``scripts``: a :func:`summary`.
    """
    relay = scripts.get("relay")
    if not relay:
        return []
    out = [f"dropped {line}" for line in relay_limits.describe(relay["values"]["dropped"])]
    if relay["values"]["unrelayed"]:
        n = relay["values"]["unrelayed"]
        out.append(f"left unrelayed: {n:,} values (the store did not take them; its message is in result.json)")
    not_uploaded = relay["checkpoints"]["not_uploaded"]
    out += [f"not uploaded {line}" for line in relay_limits.describe(not_uploaded, "checkpoints")]
    if relay["unread_bytes"]:
        cap = relay["caps"]["spool_bytes_per_script"]
        out.append(f"left unread: {relay['unread_bytes']:,} spool bytes (past the cap of {cap:,} bytes per script)")
    if relay.get("params_dropped"):
        out.append(f"dropped {relay['params_dropped']:,} params (names MLflow refuses)")
    return out


def metrics(scripts: dict) -> dict[str, float]:
    """The agent run's metrics of the relay's accounting (none if ``scripts`` has no relay part)."""
    relay = scripts.get("relay")
    if not relay:
        return {}
    return {
        schema.RELAY_VALUES: relay["values"]["relayed"],
        schema.RELAY_VALUES_DROPPED: sum(relay["values"]["dropped"].values()),
        schema.RELAY_VALUES_UNRELAYED: relay["values"]["unrelayed"],
        schema.RELAY_CHECKPOINTS_NOT_UPLOADED: sum(relay["checkpoints"]["not_uploaded"].values()),
        schema.RELAY_UNREAD_BYTES: relay["unread_bytes"],
    }
