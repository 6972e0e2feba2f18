"""The relay: spool files written by traced scripts -> nested MLflow runs, in batches.

One spool file per traced process (``<workspace>/.bench/spool/<ns>-<pid>.jsonl``). The relay runs in
the harness: every couple of seconds it reads the complete new lines of each file, creates the
script's child run on its ``start`` event, and logs metrics, params and checkpoints. Progress (which
file maps to which run, how far it was read) is saved in ``relay.json`` beside the spool, so a run
interrupted by a tracking outage or a killed harness is completed later by ``bench record`` without
losing or duplicating events.

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

import difflib
import threading
import time
from dataclasses import asdict
from pathlib import Path

from bench import untrusted
from bench.markup import one_line
from bench.tracking import accounting, relay_limits, relay_state, schema, spool_files, sysmetrics
from bench.tracking.checkpoint_uploads import Uploads
from bench.tracking.hook._bench_once import Seen
from bench.tracking.relay_limits import Tally
from bench.tracking.script_state import COUNTED, ScriptState, _int, _text, _time, metric_rows, safe_name
from bench.tracking.sysmetrics import INTERVAL_S, SystemMetrics, Target
from bench.tracking.writer import MlflowWriter, TrackingError, TrackingRefused, flatten

BATCH = 1000  # values per store call (MLflow's MAX_METRICS_PER_BATCH); also what the relay holds in memory per script
MAX_RECORDED = 200  # checkpoint events kept in relay.json per script (the counts cover the rest)
MAX_DEFERRED = 1000  # paths of checkpoints not uploaded for the cap, kept to upload those the evaluation scores
MAX_READ = 16 << 20  # bytes of one spool file read per poll (a runaway spool must not fill the harness's memory)
MAX_SOURCE = 1 << 20  # characters of a script's source kept as its artifact
# (key, step) pairs whose values the relay keeps (in relay.json): the output tee already drops
# printed copies of traced values however late it reads them (hook/_bench_once.py); what is left for
# the relay is a line printed just before the helper traces the same value, which reaches the spool
# within microseconds of the traced event
RECENT_PAIRS = 512


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
        self.base_tags, self.baseline_source, self.interval = base_tags, baseline_source, interval
        self.state_file = Path(state_file)
        self.workspace = self.spool_dir.parents[1]  # the tree every agent-made file is read under (no link out)
        self.scripts: dict[str, ScriptState] = {}
        self.uploads = Uploads(checkpoints_dir or self.spool_dir.parents[1] / "checkpoints", self.state_file.parent)
        self.checkpoints_dir = self.uploads.checkpoints_dir
        self.refused = spool_files.Refused()  # spool and tail files never read (a FIFO, a link, ...), by name
        self._others = 0  # values the other scripts relayed, while one is read (the cap per run)
        self._recent: dict[str, Seen] = {}  # file -> the values last logged for it (saved as ScriptState.recent)
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
        self._others = sum(o.metrics for o in self.scripts.values() if o is not state)  # for the run's cap
        rows: list[tuple] = []  # consecutive metric events go to MLflow in batches
        pending = 0  # bytes of those events, counted as read once the batch is recorded
        recorded = self._memo(state)  # what the bookkeeping was after the last event recorded
        try:
            for line in data[:end].splitlines(keepends=True):
                event = spool_files.parse_line(line, state.lines_dropped, MAX_READ)  # a bad line: counted, skipped
                if isinstance(event, dict) and event.get("ev") == "metrics" and state.run_id is not None:
                    rows += self._metric_rows(state, event, len(rows))
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
                    self._apply(state, event)  # a metrics event before the run exists is logged here, at once
                    recorded = self._memo(state)
                state.offset += len(line)  # advanced only once the event is recorded
            self._flush(state, rows, pending)
        except TrackingError:  # these lines are read again next time: forget what was counted from them
            seen, counted = recorded
            self._seen(state).values = seen
            for name, value in counted.items():
                setattr(state, name, value)
            raise

    def _memo(self, s: ScriptState) -> tuple:
        seen = {k: list(v) for k, v in self._seen(s).values.items()}
        return seen, {name: _copy(getattr(s, name)) for name in COUNTED}

    def _flush(self, s: ScriptState, rows: list[tuple], pending: int) -> int:
        if rows:
            self._log(s, rows)
            rows.clear()
            s.offset += pending
            self._save()  # at least once: a harness killed now replays at most this batch (the store dedupes it)
            return 0
        s.offset += pending
        return 0

    def _log(self, s: ScriptState, rows: list[tuple]) -> None:
        """Log checked rows.

        The ones the store refuses anyway are dropped with its message, never retried.
        """
        refused = self.writer.log_values(s.run_id, rows)
        tally = Tally(s.dropped, s.examples)
        for (key, *_), why in refused:
            tally.drop("store-refused", f"{key[:100]}: {why}")
        s.metrics += len(rows) - len(refused)

    def _metric_rows(self, s: ScriptState, ev: dict, queued: int = 0) -> list[tuple]:
        return metric_rows(s, ev, self._seen(s), queued, self._others)

    def _apply(self, s: ScriptState, ev: dict) -> None:
        kind = ev.get("ev")
        if kind == "start":
            s.script, s.pid, s.started = safe_name(ev.get("script")), _int(ev.get("pid")), _time(ev.get("t"))
            self._ensure_run(s)
            rec, run = self.writer, s.run_id
            argv = ev.get("argv") if isinstance(ev.get("argv"), list) else []
            self._params(s, {"argv": " ".join(map(str, argv)), "pid": s.pid})
            source = str(ev.get("source", ""))[:MAX_SOURCE]
            rec.log_text(run, source, f"source/{s.script}")
            if self.baseline_source and s.script != "train.py":
                diff = difflib.unified_diff(
                    self.baseline_source.splitlines(True), source.splitlines(True), "train.py", s.script
                )
                rec.log_text(run, "".join(diff), f"source/{s.script}.diff")
            return
        self._ensure_run(s)
        if kind == "metrics":  # only before the run exists (the batched path in _read covers the rest)
            self._log(s, self._metric_rows(s, ev))
        elif kind == "checkpoint":
            self._checkpoint(s, ev)
        elif kind == "end":
            status = ev.get("status") if ev.get("status") in ("FINISHED", "FAILED", "KILLED") else "FAILED"
            s.ended, s.status, s.error = _time(ev.get("t")), status, _text(ev.get("error"))
            self._close(s)

    def _params(self, s: ScriptState, params: dict) -> None:
        """Params whose keys MLflow takes (the others counted).

        A set the store refuses anyway is dropped whole.
        """
        flat = flatten(params)
        good = {k: v for k, v in flat.items() if relay_limits.key_problem(k) is None}
        s.params_dropped += len(flat) - len(good)
        try:
            self.writer.log_params(s.run_id, good)
        except TrackingRefused:
            s.params_dropped += len(good)

    def _checkpoint(self, s: ScriptState, ev: dict) -> None:
        if not s.params_logged and isinstance(ev.get("config"), dict):
            extra = {k: ev[k] for k in ("n_params", "device") if ev.get(k) is not None}
            self._params(s, {"config": ev["config"], **extra})
            s.params_logged = True
        # on the training-step axis of the script's other metrics: the step it says, else the last
        # one it logged
        step = ev.get("step") if ev.get("step") is not None else s.last_step
        score = {
            "ev": "metrics",
            "step": step,
            "t": _time(ev.get("t")),
            "metrics": {schema.CHECKPOINT_SCORE: ev.get("val_score")},
        }
        self._log(s, self._metric_rows(s, score))
        s.checkpoint_events += 1
        entry = {k: ev.get(k) for k in ("path", "val_score", "metric", "step", "t")}
        ckpt, why = self.uploads.path_of(ev.get("path"))
        if ckpt is not None and s.uploaded >= relay_limits.MAX_CHECKPOINT_UPLOADS:
            if len(s.deferred) < MAX_DEFERRED and str(ckpt) not in s.deferred:
                s.deferred.append(str(ckpt))
            ckpt, why = None, "over-cap"
        if ckpt is not None:
            why = self.uploads.upload(self.writer, s.run_id, ckpt)
        if not why:
            s.uploaded += 1
        else:
            entry["not_uploaded"] = why
            s.not_uploaded[why] = s.not_uploaded.get(why, 0) + 1
        if len(s.checkpoints) < MAX_RECORDED:
            s.checkpoints.append(entry)

    def keep(self, checkpoints: list[tuple[str, str]]) -> None:
        """Upload the checkpoints the evaluation scored that the upload cap left out.

        ``checkpoints``: ``(path, script)`` pairs. The selection's files are on their script's run
        whatever the script flooded.
        """
        with self._lock:
            for raw, script in checkpoints:
                path, _ = self.uploads.path_of(raw)
                owners = [s for s in self.scripts.values() if path and s.run_id and str(path) in s.deferred]
                # past MAX_DEFERRED paths: the latest run of its script that left checkpoints out
                # for the cap
                owners = owners or [
                    s for s in self.scripts.values() if path and s.script == script and s.not_uploaded.get("over-cap")
                ]
                if not owners or path is None:
                    continue
                s = owners[-1]
                try:
                    if self.uploads.upload(self.writer, s.run_id, path):
                        continue
                except TrackingError:
                    continue
                if str(path) in s.deferred:
                    s.deferred.remove(str(path))
                s.uploaded += 1
                s.not_uploaded["over-cap"] -= 1
            self._save()

    def _ensure_run(self, s: ScriptState) -> None:
        if s.run_id is None and self.parent_run is None:
            raise TrackingError("the agent run does not exist yet; script events stay spooled")
        if s.run_id is None:
            name = s.script or s.file
            tags = {**self.base_tags, schema.KIND: schema.KIND_SCRIPT, schema.SCRIPT: name, schema.PID: s.pid}
            s.run_id = self.writer.create_run(name, tags, parent=self.parent_run, start_time=s.started or None)
            self._save()  # a harness killed from here on resumes into this run, never a second copy of it

    def _close(self, s: ScriptState) -> None:
        tags = {schema.EXIT: s.status}
        if s.error:  # the agent's text: one plain line in the tag (no raw newlines or Markdown structure)
            tags[schema.REASON] = one_line(s.error, 500)
        self.writer.set_tags(s.run_id, tags)
        self.writer.end_run(s.run_id, s.status, s.ended)
        s.closed = True
        self._publish()

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
                        self._close(s)
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

    def _seen(self, s: ScriptState) -> Seen:
        if s.file not in self._recent:
            self._recent[s.file] = Seen.of(RECENT_PAIRS, s.recent)
        return self._recent[s.file]

    def _save(self) -> None:
        for name, seen in self._recent.items():
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
