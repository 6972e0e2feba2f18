"""The relay: spool files written by traced scripts -> nested MLflow runs, in batches.

One spool file per traced process (``<workspace>/.bench/spool/<ns>-<pid>.jsonl``). The relay runs in
the harness: every couple of seconds it reads the complete new lines of each file, creates the
script's child run on its ``start`` event, and logs metrics, params and checkpoints. Progress (which
file maps to which run, how far it was read) is saved in ``relay.json`` beside the spool, so a run
interrupted by a tracking outage or a killed harness is completed later by ``bench record`` without
losing or duplicating events.

This module holds the loop: which file is read, how far, in what batches, and what is saved when.
What each kind of event does to its script's run (``start``, ``metrics``, ``checkpoint``, ``end``)
is :mod:`bench.tracking.script_events`.

Spool files are written by the agent's processes, so every event is untrusted input: a script name
becomes a plain file name, a checkpoint is uploaded only from inside the workspace's
``checkpoints/`` and up to a size, sources and lines are bounded, and a run the spool leaves open (a
forged ``start`` without its ``end``) is closed as KILLED when the agent's run is over.
``relay.json`` belongs to the harness and is kept in the run directory, out of the agent's reach.

Nothing in a spool can stop the relay (issue 21): each value is checked against the store's limits
first (:mod:`bench.tracking.relay_limits`) and dropped, counted by reason, when it breaks one; a
batch the store refuses anyway is split until the refused values are alone; a script is cut at the
caps (values, checkpoint uploads, spool bytes) with a count; system metrics are sampled in a thread
of their own (:class:`~bench.tracking.sysmetrics.SystemMetrics`). At the end :meth:`Relay.summary`
accounts for every value: relayed + dropped + left unrelayed = written.

Nor can the files themselves (issue 29): the spool folder is listed without following a link (a
bounded number of names), and every spool, tail and checkpoint file is opened through
:mod:`bench.untrusted` (no link followed, regular files only, never blocking, bounded by apparent
and allocated size). A FIFO, a directory, a socket or a link named like a spool or tail file is
never read: it is a named finding in ``result.json`` (``scripts.relay.refused_files``) and the
audit. Each line is parsed with its nesting depth bounded first, so a line of 100,000 ``[`` is
dropped and counted (``lines_dropped``) like a torn or foreign line, and the script's later events
are relayed. Checkpoints are copied through the boundary into a harness-owned folder and uploaded
from there, one upload per file (hard links of one file named by forged events are one file).
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict
from pathlib import Path

from bench import untrusted
from bench.tracking import accounting, relay_limits, relay_state, spool_files, sysmetrics
from bench.tracking.checkpoint_uploads import Uploads
from bench.tracking.script_events import ScriptEvents
from bench.tracking.script_state import COUNTED, ScriptState
from bench.tracking.sysmetrics import INTERVAL_S, SystemMetrics, Target
from bench.tracking.writer import MlflowWriter, TrackingError

BATCH = 1000  # values per store call (MLflow's MAX_METRICS_PER_BATCH); also what the relay holds in memory per script
MAX_READ = 16 << 20  # bytes of one spool file read per poll (a runaway spool must not fill the harness's memory)


class Relay:
    """Relay the spool of one agent run into child runs of ``parent_run``."""

    def __init__(
        self,
        writer: MlflowWriter,
        parent_run: str | None,
        spool_dir: Path,
        base_tags: dict[str, str],
        baseline_source: str = "",
        interval: float = 2.0,
        *,
        checkpoints_dir: Path | None = None,
        state_file: Path,
    ):
        """``checkpoints_dir``.

        The only folder checkpoint artifacts are uploaded from (default: the workspace's
        ``checkpoints/``, the spool being ``<workspace>/.bench/spool``); ``state_file``: where the
        relay keeps its progress (the runner passes the run directory's ``relay.json``, out of the
        agent's reach).
        """
        self.writer, self.parent_run, self.spool_dir = writer, parent_run, Path(spool_dir)
        self.interval = interval
        self.state_file = Path(state_file)
        self.workspace = self.spool_dir.parents[1]  # the tree every agent-made file is read under (no link out)
        self.scripts: dict[str, ScriptState] = {}
        self.uploads = Uploads(checkpoints_dir or self.spool_dir.parents[1] / "checkpoints", self.state_file.parent)
        self.checkpoints_dir = self.uploads.checkpoints_dir
        self.refused = spool_files.Refused()  # spool and tail files never read (a FIFO, a link, ...), by name
        self.events = ScriptEvents(
            writer,
            self.uploads,
            base_tags,
            baseline_source,
            parent_run=lambda: self.parent_run,
            save=self._save,
            closed=self._publish,
        )
        self.warned = False
        self._running: list[Target] = []  # replaced whole, read by the system-metrics thread without the lock
        self.system = SystemMetrics(lambda: self._running, writer.log_metrics, INTERVAL_S)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        if self.state_file.exists():
            saved = relay_state.read(self.state_file)
            try:
                self.scripts = {k: ScriptState(**v) for k, v in saved["scripts"].items()}
                self.system.totals.update(saved["system"])  # the agent tree's GPU figures so far
                self.refused = spool_files.Refused(saved["refused"], int(saved["refused_more"]))
                self.uploads.uploaded = list(saved["uploaded_inodes"])
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                why = f"{self.state_file} lacks or mistypes a field ({type(e).__name__}: {e})"
                raise relay_state.RelayStateError(why) from e
        else:  # a new run: the state file exists from now on, so a relay.json the agent plants is never read
            relay_state.refuse_beside_the_spool(self.spool_dir, self.state_file)
            self._save()

    # --- threads -----------------------------------------------------------------------------
    def start(self) -> None:
        """Relay every ``interval`` seconds in a thread of its own; sample the system metrics."""
        self._thread = threading.Thread(target=self._loop, name="bench-relay", daemon=True)
        self._thread.start()
        self.system.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except Exception as e:  # relay.json unwritable (a full disk), or a bug: the spool keeps everything
                if not self.warned:
                    print(f"[bench] the relay could not go on ({e}); retried, nothing is lost", flush=True)
                    self.warned = True

    def attach(self, parent_run: str | None) -> None:
        """Relay into ``parent_run``, and start relaying.

        ``parent_run``: the agent run, opened while the agent started.
        """
        with self._lock:
            self.parent_run = parent_run
            self._save()
        self.start()

    def follow(self, root_pid: int, token: str | None) -> None:
        """Sample the scripts by their host processes, and the agent's whole tree on the agent run.

        The host processes are found among the agent's: the tree of ``root_pid`` on the host and the
        processes carrying the run ``token`` (:mod:`.sysmetrics`).
        """
        self.system.follow(root_pid, token, lambda: self.parent_run)

    def stop(self) -> None:
        """Stop the relay's thread and the system metrics (:meth:`finalize` relays the rest)."""
        self._stop.set()
        self.system.stop()
        if self._thread is not None:
            self._thread.join(timeout=60)

    # --- reading -----------------------------------------------------------------------------
    @property
    def launches(self) -> int:
        """Traced script launches seen so far (spool files with a start event)."""
        return sum(1 for s in self.scripts.values() if s.script)

    def poll(self) -> bool:
        """Relay every complete new line.

        Returns False if the tracking store failed (retried next time).

        Each script on its own: one whose events the store does not take waits, the others go on.
        """
        with self._lock:
            ok = True
            for path in spool_files.listing(self.workspace, self.spool_dir, set(self.scripts), self.refused):
                state = self.scripts.setdefault(path.name, ScriptState(file=path.name))
                try:
                    self._read(path, state)
                    state.store_error = None
                except TrackingError as e:
                    ok = False
                    state.store_error = str(e)[:500]
                    if not self.warned:
                        print(f"[bench] tracking degraded, events stay spooled and are retried: {e}", flush=True)
                        self.warned = True
            self._publish()
            self._save()
            return ok

    def _publish(self) -> None:
        """What the system-metrics thread samples.

        The scripts whose run is open (a new list, never changed).
        """
        running = [s for s in self.scripts.values() if s.run_id and not s.closed]
        self._running = [(s.run_id, s.pid, s.started, s.last_step, s.script) for s in running]
        for s in running:  # the host process each script was bound to (relay.json), for a person to check
            s.host_pid = self.system.host_pid(s.run_id) or s.host_pid

    def _read(self, path: Path, state: ScriptState) -> None:
        left = relay_limits.MAX_SPOOL_BYTES - state.offset
        if left <= 0:  # past the cap: nothing more of this file is read (the summary counts its bytes)
            return
        data = spool_files.read_chunk(path, self.workspace, state.offset, min(MAX_READ, left))
        if isinstance(data, untrusted.Finding):  # swapped for a FIFO or a link since the listing: never read
            self.refused.add(data)
            return
        if state.in_long_line:  # the rest of a line longer than a whole read: passed over to its end
            nl = data.find(b"\n")
            skip = len(data) if nl < 0 else nl + 1
            state.offset += skip
            state.in_long_line = nl < 0
            data = data[skip:]
        end = data.rfind(b"\n") + 1  # only complete lines: the writer may be mid-line
        if end == 0 and len(data) == MAX_READ:  # one "line" longer than a whole read: not an event, pass over it
            state.offset += len(data)
            state.in_long_line = True
            state.lines_dropped[untrusted.TOO_LONG] = state.lines_dropped.get(untrusted.TOO_LONG, 0) + 1
            return
        self.events.others = sum(o.metrics for o in self.scripts.values() if o is not state)  # for the run's cap
        rows: list[tuple] = []  # consecutive metric events go to MLflow in batches
        pending = 0  # bytes of those events, counted as read once the batch is recorded
        recorded = self._memo(state)  # what the bookkeeping was after the last event recorded
        try:
            for line in data[:end].splitlines(keepends=True):
                event = spool_files.parse_line(line, state.lines_dropped, MAX_READ)  # a bad line: counted, skipped
                if isinstance(event, dict) and event.get("ev") == "metrics" and state.run_id is not None:
                    rows += self.events.metric_rows(state, event, len(rows))
                    pending += len(line)
                    if len(rows) >= BATCH:
                        pending = self._flush(state, rows, pending)
                        recorded = self._memo(state)
                    continue
                logged = bool(rows)
                pending = self._flush(state, rows, pending)
                if logged:
                    recorded = self._memo(state)
                if isinstance(event, dict):
                    self.events.apply(state, event)  # a metrics event before the run exists is logged here, at once
                    recorded = self._memo(state)
                state.offset += len(line)  # advanced only once the event is recorded
            self._flush(state, rows, pending)
        except TrackingError:  # these lines are read again next time: forget what was counted from them
            seen, counted = recorded
            self.events.seen(state).values = seen
            for name, value in counted.items():
                setattr(state, name, value)
            raise

    def _memo(self, s: ScriptState) -> tuple:
        seen = {k: list(v) for k, v in self.events.seen(s).values.items()}
        return seen, {name: _copy(getattr(s, name)) for name in COUNTED}

    def _flush(self, s: ScriptState, rows: list[tuple], pending: int) -> int:
        if rows:
            self.events.log(s, rows)
            rows.clear()
            s.offset += pending
            self._save()  # at least once: a harness killed now replays at most this batch (the store dedupes it)
            return 0
        s.offset += pending
        return 0

    def keep(self, checkpoints: list[tuple[str, str]]) -> None:
        """Upload the checkpoints the evaluation scored that the upload cap left out.

        ``checkpoints``: ``(path, script)`` pairs (:meth:`ScriptEvents.keep`).
        """
        with self._lock:
            self.events.keep(list(self.scripts.values()), checkpoints)
            self._save()

    # --- the end -----------------------------------------------------------------------------
    def finalize(self) -> dict:
        """Relay all that is left, then close as KILLED every run without an end event.

        Called once the run is over; what could not be relayed is counted, with why, in
        :meth:`summary`.
        """
        self.stop()
        while True:  # a flood is more than one read: go on while the spool is read further
            before = sum(s.offset for s in self.scripts.values())
            self.poll()  # a script the store does not take waits; the others are read to their end
            if sum(s.offset for s in self.scripts.values()) == before:
                break
        with self._lock:
            for s in self.scripts.values():  # the agent's tree has ended: whatever is still open was killed
                if s.run_id and not s.closed:
                    s.status, s.ended = "KILLED", time.time()
                    try:
                        self.events.close(s)
                    except TrackingError:
                        pass
            for s in self.scripts.values():  # tails are final only now: the output tee drains after its script
                if not s.run_id:
                    continue
                tail = spool_files.read_tail(self.spool_dir / (s.file + ".tail"), self.workspace)
                if isinstance(tail, untrusted.Finding):  # a FIFO, a link to a host file, a sparse giant: not read
                    self.refused.add(tail)
                    continue
                try:
                    self.writer.log_text(s.run_id, tail, "stdout_tail.txt")
                except TrackingError:
                    break
            for s in self.scripts.values():
                left = spool_files.left(self.spool_dir / s.file, self.workspace, s.offset, MAX_READ)
                if isinstance(left, untrusted.Finding):
                    self.refused.add(left)
                    left = (0, 0)
                s.unrelayed, s.unread_bytes = left
            self._save()
        return self.summary()

    def summary(self) -> dict:
        """Per script and in all.

        The runs, and what became of every value and checkpoint the spool holds; the spool and tail
        files refused (``refused_files``: never read) and the lines dropped unparsed.
        """
        out = {**accounting.summary(list(self.scripts.values())), "system": sysmetrics.summary(self.system.totals)}
        out["relay"]["refused_files"] = self.refused.to_dict(self.spool_dir)
        lines: dict[str, int] = {}
        for s in self.scripts.values():
            for why, n in s.lines_dropped.items():
                lines[why] = lines.get(why, 0) + n
        out["relay"]["lines_dropped"] = dict(sorted(lines.items()))
        return out

    def _save(self) -> None:
        for name, seen in self.events.recent.items():
            self.scripts[name].recent = seen.rows()
        relay_state.write(
            self.state_file,
            {
                "parent_run": self.parent_run,
                "scripts": {k: asdict(v) for k, v in self.scripts.items()},
                "system": dict(self.system.totals),
                "refused": self.refused.names,
                "refused_more": self.refused.more,
                "uploaded_inodes": self.uploads.uploaded,
            },
        )


def _copy(value: object) -> object:
    """A copy of a counter field deep enough to restore it.

    Entries of its lists and dicts are never changed.
    """
    return list(value) if isinstance(value, list) else dict(value) if isinstance(value, dict) else value
