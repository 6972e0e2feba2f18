"""The relay: spool files written by traced scripts -> nested MLflow runs, in batches.

One spool file per traced process (``<workspace>/.bench/spool/<ns>-<pid>.jsonl``). The relay
runs in the harness: every couple of seconds it reads the complete new lines of each file,
creates the script's child run on its ``start`` event, and logs metrics, params and
checkpoints. Progress (which file maps to which run, how far it was read) is saved in
``relay.json`` beside the spool, so a run interrupted by a tracking outage or a killed
harness is completed later by ``bench record`` without losing or duplicating events.

Spool files are written by the agent's processes, so every event is untrusted input: a script name
becomes a plain file name, a checkpoint is uploaded only from inside the workspace's ``checkpoints/``
and up to a size, sources and lines are bounded, and a run the spool leaves open (a forged ``start``
without its ``end``) is closed as KILLED when the agent's run is over. ``relay.json`` belongs to the
harness and is kept in the run directory, out of the agent's reach.
"""

from __future__ import annotations

import difflib
import json
import re
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import psutil

from bench.tracking import schema
from bench.tracking.hook._bench_once import Seen, event_values
from bench.tracking.sysmetrics import Sampler
from bench.tracking.writer import MlflowWriter, TrackingError

SYSTEM_EVERY = 5  # polls between system-metric samples (x 2 s: one sample every ~10 s)
MAX_READ = 16 << 20  # bytes of one spool file read per poll (a runaway spool must not fill the harness's memory)
MAX_SOURCE = 1 << 20  # characters of a script's source kept as its artifact
MAX_CHECKPOINT_BYTES = 8 << 30  # a checkpoint larger than this is not uploaded (T3's backbone is ~0.1 GB)
# (key, step) pairs whose values the relay keeps (in relay.json): the output tee already drops printed copies of
# traced values however late it reads them (hook/_bench_once.py); what is left for the relay is a line printed
# just before the helper traces the same value, which reaches the spool within microseconds of the traced event
RECENT_PAIRS = 512


@dataclass
class ScriptState:
    """What the relay knows about one traced process."""

    file: str
    offset: int = 0
    run_id: str | None = None
    script: str = ""
    pid: int = 0
    started: float = 0.0
    ended: float | None = None
    status: str | None = None  # FINISHED | FAILED | KILLED once closed
    error: str | None = None
    params_logged: bool = False
    metrics: int = 0
    recent: list[list] = field(default_factory=list)  # [key, step, value, traced] of the last pairs logged (Seen)
    last_step: int = 0  # the latest training step the script logged: the step axis of checkpoints and system metrics
    seconds_step: int | None = None  # the step of the last wall-seconds value kept (one per step)
    checkpoints: list[dict] = field(default_factory=list)
    closed: bool = False


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
        state_file: Path | None = None,
    ):
        """``checkpoints_dir``: the only folder checkpoint artifacts are uploaded from (default: the workspace's
        ``checkpoints/``, the spool being ``<workspace>/.bench/spool``); ``state_file``: where the relay keeps its
        progress (the runner passes the run directory's ``relay.json``; by default beside the spool, as runs
        recorded before this version have it)."""
        self.writer, self.parent_run, self.spool_dir = writer, parent_run, Path(spool_dir)
        self.base_tags, self.baseline_source, self.interval = base_tags, baseline_source, interval
        self.checkpoints_dir = Path(checkpoints_dir or self.spool_dir.parents[1] / "checkpoints").resolve()
        legacy = self.spool_dir.parent / "relay.json"
        self.state_file = Path(state_file) if state_file else legacy
        self.scripts: dict[str, ScriptState] = {}
        self._recent: dict[str, Seen] = {}  # file -> the values last logged for it (saved as ScriptState.recent)
        self.warned = False
        self.sampler = Sampler()
        self._polls = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        saved_at = self.state_file if self.state_file.exists() else legacy if legacy.exists() else None
        if saved_at is not None:
            saved = json.loads(saved_at.read_text())
            known = {f.name for f in fields(ScriptState)}  # relay.json of an older version: its other fields dropped
            scripts = saved.get("scripts", {}).items()
            self.scripts = {k: ScriptState(**{n: x for n, x in v.items() if n in known}) for k, v in scripts}
        else:  # a new run: the state file exists from now on, so a relay.json the agent plants is never read
            self._save()

    # --- thread ------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="bench-relay", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except OSError as e:  # relay.json unwritable (a full disk): the spool keeps everything, retried later
                if not self.warned:
                    print(f"[bench] the relay cannot save its progress ({e}); retried, nothing is lost", flush=True)
                    self.warned = True

    def attach(self, parent_run: str | None) -> None:
        """Relay into ``parent_run`` (the agent run, opened while the agent started), and start relaying."""
        with self._lock:
            self.parent_run = parent_run
            self._save()
        self.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    # --- reading -----------------------------------------------------------------------------
    @property
    def launches(self) -> int:
        """Traced script launches seen so far (spool files with a start event)."""
        return sum(1 for s in self.scripts.values() if s.script)

    def poll(self) -> bool:
        """Relay every complete new line; returns False if the tracking store failed (retried next time)."""
        with self._lock:
            ok = True
            for path in sorted(self.spool_dir.glob("*.jsonl")):
                state = self.scripts.setdefault(path.name, ScriptState(file=path.name))
                try:
                    self._read(path, state)
                except TrackingError as e:
                    ok = False
                    if not self.warned:
                        print(f"[bench] tracking degraded, events stay spooled and are retried: {e}", flush=True)
                        self.warned = True
            self._polls += 1
            if ok and self._polls % SYSTEM_EVERY == 0:
                self._sample_system()
            self._save()
            return ok

    def _sample_system(self) -> None:
        """CPU, memory (and GPU) of every running traced script, on its run; best effort."""
        for s in self.scripts.values():
            if s.run_id and not s.closed and _alive(s.pid, s.started):
                values = self.sampler.sample(s.pid)
                try:  # on the training-step axis too; their timestamps give the wall-clock view
                    self.writer.log_metrics(s.run_id, [(k, v, s.last_step, None) for k, v in values.items()])
                except TrackingError:
                    return

    def _read(self, path: Path, state: ScriptState) -> None:
        with open(path, "rb") as f:
            f.seek(state.offset)
            data = f.read(MAX_READ)
        end = data.rfind(b"\n") + 1  # only complete lines: the writer may be mid-line
        if end == 0 and len(data) == MAX_READ:  # one "line" longer than a whole read: not an event, pass over it
            state.offset += len(data)
            return
        rows: list[tuple] = []  # consecutive metric events go to MLflow as one batch
        pending = 0  # bytes of those events, counted as read once the batch is recorded
        recorded = self._memo(state)  # what the step bookkeeping was after the last event recorded
        try:
            for line in data[:end].splitlines(keepends=True):
                try:
                    event = json.loads(line)
                except ValueError:
                    event = None  # a torn or foreign line: skip it, never stop relaying
                if isinstance(event, dict) and event.get("ev") == "metrics" and state.run_id is not None:
                    rows += self._metric_rows(state, event)
                    pending += len(line)
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
        except TrackingError:  # these lines are read again next time: forget that their values were logged
            self._seen(state).values, state.seconds_step, state.last_step = recorded
            raise

    def _memo(self, s: ScriptState) -> tuple:
        return {k: list(v) for k, v in self._seen(s).values.items()}, s.seconds_step, s.last_step

    def _flush(self, s: ScriptState, rows: list[tuple], pending: int) -> int:
        if rows:
            s.metrics += self.writer.log_metrics(s.run_id, rows)
            rows.clear()
            s.offset += pending
            self._save()  # at least once: a harness killed now replays at most this batch (the store dedupes it)
            return 0
        s.offset += pending
        return 0

    def _metric_rows(self, s: ScriptState, ev: dict) -> list[tuple]:
        found = event_values({**ev, "step": _int(ev.get("step"))})
        if found is None:
            return []
        step, values = found
        # one value, traced or printed: a printed value that copies one logged at its key and step is dropped, and a
        # traced one that a line printed just before it copies (the output tee drops the copies it reads later)
        traced, recent = ev.get("src") != "stdout", self._seen(s)
        values = {k: v for k, v in values.items() if not recent.copy_of(k, step, v, traced)}
        for k, v in values.items():
            recent.add(k, step, v, traced)
        # wall seconds are a series of their own, one value per training step (the first logged at that step), so
        # that a step logging a loss line and a validation line does not draw two points at one x
        if schema.SCRIPT_SECONDS in values:
            if s.seconds_step == step:
                del values[schema.SCRIPT_SECONDS]
            else:
                s.seconds_step = step
        s.last_step = max(s.last_step, step)
        return [(k, v, step, ev.get("t")) for k, v in values.items()]

    def _apply(self, s: ScriptState, ev: dict) -> None:
        kind = ev.get("ev")
        if kind == "start":
            s.script, s.pid, s.started = safe_name(ev.get("script")), _int(ev.get("pid")), _time(ev.get("t"))
            self._ensure_run(s)
            rec, run = self.writer, s.run_id
            argv = ev.get("argv") if isinstance(ev.get("argv"), list) else []
            rec.log_params(run, {"argv": " ".join(map(str, argv)), "pid": s.pid})
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
            s.metrics += self.writer.log_metrics(s.run_id, self._metric_rows(s, ev))
        elif kind == "checkpoint":
            if not s.params_logged and isinstance(ev.get("config"), dict):
                extra = {k: ev[k] for k in ("n_params", "device") if ev.get(k) is not None}
                self.writer.log_params(s.run_id, {"config": ev["config"], **extra})
                s.params_logged = True
            # on the training-step axis of the script's other metrics: the step it says, else the last one it logged
            step = _int(ev.get("step")) if ev.get("step") is not None else s.last_step
            score = ev.get("val_score") if isinstance(ev.get("val_score"), int | float) else None
            self.writer.log_metrics(s.run_id, [(schema.CHECKPOINT_SCORE, score, step, _time(ev.get("t")))])
            entry = {k: ev.get(k) for k in ("path", "val_score", "metric", "step", "t")}
            ckpt, why = self._checkpoint_file(ev.get("path"))
            if ckpt is not None:
                self.writer.log_artifact(s.run_id, ckpt, "checkpoints")
            else:
                entry["not_uploaded"] = why
            s.checkpoints.append(entry)
        elif kind == "end":
            status = ev.get("status") if ev.get("status") in ("FINISHED", "FAILED", "KILLED") else "FAILED"
            s.ended, s.status, s.error = _time(ev.get("t")), status, _text(ev.get("error"))
            self._close(s)

    def _checkpoint_file(self, raw: object) -> tuple[Path | None, str]:
        """The checkpoint a spool event names, if it is a file of ``checkpoints/`` of a sane size; else why not."""
        try:
            path = Path(str(raw)).resolve(strict=True)
        except (OSError, RuntimeError, ValueError):
            return None, f"no such file: {str(raw)[:200]}"
        if not path.is_relative_to(self.checkpoints_dir) or not path.is_file():
            return None, f"not a file of {self.checkpoints_dir}: {str(raw)[:200]}"
        if path.stat().st_size > MAX_CHECKPOINT_BYTES:
            return None, f"larger than {MAX_CHECKPOINT_BYTES >> 30} GiB"
        return path, ""

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
        if s.error:
            tags[schema.REASON] = s.error[:500]
        self.writer.set_tags(s.run_id, tags)
        self.writer.end_run(s.run_id, s.status, s.ended)
        s.closed = True

    # --- the end -----------------------------------------------------------------------------
    def finalize(self) -> dict:
        """Relay what is left, then close as KILLED every run without an end event (called once the run is over)."""
        self.stop()
        self.poll()
        with self._lock:
            for s in self.scripts.values():  # the agent's tree has ended: whatever is still open was killed
                if s.run_id and not s.closed:
                    s.status, s.ended = "KILLED", time.time()
                    try:
                        self._close(s)
                    except TrackingError:
                        pass
            for s in self.scripts.values():  # tails are final only now: the output tee drains after its script
                tail = self.spool_dir / (s.file + ".tail")
                if s.run_id and tail.is_file():
                    try:
                        self.writer.log_text(s.run_id, tail.read_text(errors="replace"), "stdout_tail.txt")
                    except TrackingError:
                        break
            self._save()
        return self.summary()

    def summary(self) -> dict:
        statuses = [s.status or "RUNNING" for s in self.scripts.values() if s.script]
        return {
            "launched": self.launches,
            "statuses": {k: statuses.count(k) for k in sorted(set(statuses))},
            "unrelayed": sum(1 for s in self.scripts.values() if s.script and not s.closed),
            "scripts": [
                {
                    "script": s.script,
                    "pid": s.pid,
                    "status": s.status,
                    "run_id": s.run_id,
                    "started": s.started,
                    "ended": s.ended,
                    "checkpoints": len(s.checkpoints),
                    "error": s.error,
                }
                for s in self.scripts.values()
                if s.script
            ],
        }

    def _seen(self, s: ScriptState) -> Seen:
        if s.file not in self._recent:
            self._recent[s.file] = Seen.of(RECENT_PAIRS, s.recent)
        return self._recent[s.file]

    def _save(self) -> None:
        for name, seen in self._recent.items():
            self.scripts[name].recent = seen.rows()
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(
            json.dumps({"parent_run": self.parent_run, "scripts": {k: asdict(v) for k, v in self.scripts.items()}})
        )
        tmp.replace(self.state_file)


def safe_name(raw: object) -> str:
    """A script name from a spool event as a plain file name (it names MLflow runs and artifact paths)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", str(raw or "?"))[-128:]
    return name if name.strip(".") else "_"


def _int(raw: object) -> int:
    try:
        return int(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0


def _time(raw: object) -> float:
    return float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else time.time()


def _text(raw: object) -> str | None:
    return None if raw is None else str(raw)[:2000]


def _alive(pid: int, started: float) -> bool:
    """True while the traced process still runs (guarding against pid reuse)."""
    try:
        p = psutil.Process(pid)
        return p.create_time() <= started + 1 and p.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
