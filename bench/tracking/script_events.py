"""What each kind of spool event does to its script's MLflow run.

A traced script's spool holds four kinds of event; the relay (:mod:`bench.tracking.relay`) reads
them in order, and :class:`ScriptEvents` turns each into calls on the script's child run:

- ``start``: the child run is created under the agent run (tagged with its kind, name and pid), its
  argv and pid logged as params, its source (bounded) as an artifact, with its diff against the
  task's baseline ``train.py``;
- ``metrics``: each value checked against the store's limits and the relay's caps first
  (:func:`~bench.tracking.script_state.metric_rows`, printed copies of traced values dropped), the
  ones the store refuses anyway dropped with its message, never retried;
- ``checkpoint``: the config as params (once), the self-reported score as a metric on the script's
  step axis, the file uploaded from inside the workspace's ``checkpoints/`` up to a cap
  (:mod:`bench.tracking.checkpoint_uploads`); the paths past the cap are kept, so that
  :meth:`ScriptEvents.keep` uploads the ones the evaluation scored;
- ``end``: the run closed with its status (one MLflow does not know is FAILED) and the agent's
  reason as one plain line.

Spool files are written by the agent's processes, so every event is untrusted input: a script name
becomes a plain file name, sources and lines are bounded, a value that breaks a limit is dropped and
counted by reason.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

from bench.markup import one_line
from bench.tracking import relay_limits, schema
from bench.tracking.checkpoint_uploads import Uploads
from bench.tracking.hook._bench_once import Seen
from bench.tracking.relay_limits import Tally
from bench.tracking.script_state import ScriptState, _int, _text, _time, metric_rows, safe_name
from bench.tracking.writer import MlflowWriter, TrackingError, TrackingRefused, flatten

MAX_RECORDED = 200  # checkpoint events kept in relay.json per script (the counts cover the rest)
MAX_DEFERRED = 1000  # paths of checkpoints not uploaded for the cap, kept to upload those the evaluation scores
MAX_SOURCE = 1 << 20  # characters of a script's source kept as its artifact
# (key, step) pairs whose values the relay keeps (in relay.json): the output tee already drops
# printed copies of traced values however late it reads them (hook/_bench_once.py); what is left for
# the relay is a line printed just before the helper traces the same value, which reaches the spool
# within microseconds of the traced event
RECENT_PAIRS = 512


class ScriptEvents:
    """The script runs of one agent run, event by event (the kinds: the module's docstring).

    Args:
        writer: the harness's writer, the one module that calls MLflow's write API.
        uploads: where checkpoints are uploaded from, and the files already uploaded.
        base_tags: the tags every script run carries.
        baseline_source: the task's ``train.py``, each other script's source is diffed against.
        parent_run: the agent run the script runs are nested in (None until it is opened).
        save: saves the relay's progress; called once a run is created, so that a harness killed
            from then on resumes into that run, never a second copy of it.
        closed: called once a script's run is closed (the system metrics stop sampling it).
    """

    def __init__(
        self,
        writer: MlflowWriter,
        uploads: Uploads,
        base_tags: dict[str, str],
        baseline_source: str,
        *,
        parent_run: Callable[[], str | None],
        save: Callable[[], None],
        closed: Callable[[], None],
    ) -> None:
        self.writer, self.uploads = writer, uploads
        self.base_tags, self.baseline_source = base_tags, baseline_source
        self._parent_run, self._save, self._closed = parent_run, save, closed
        self.others = 0  # values the other scripts relayed, while one is read (the cap per run)
        self.recent: dict[str, Seen] = {}  # file -> the values last logged for it (saved as ScriptState.recent)

    def seen(self, s: ScriptState) -> Seen:
        """The values last logged for the script: a printed copy of one is not logged twice."""
        if s.file not in self.recent:
            self.recent[s.file] = Seen.of(RECENT_PAIRS, s.recent)
        return self.recent[s.file]

    def metric_rows(self, s: ScriptState, ev: dict, queued: int = 0) -> list[tuple]:
        """The values of a ``metrics`` event the store and the caps take.

        ``queued``: the script's rows read but not logged yet (they count against the caps).
        """
        return metric_rows(s, ev, self.seen(s), queued, self.others)

    def log(self, s: ScriptState, rows: list[tuple]) -> None:
        """Log checked rows.

        The ones the store refuses anyway are dropped with its message, never retried.
        """
        refused = self.writer.log_values(s.run_id, rows)
        tally = Tally(s.dropped, s.examples)
        for (key, *_), why in refused:
            tally.drop("store-refused", f"{key[:100]}: {why}")
        s.metrics += len(rows) - len(refused)

    def apply(self, s: ScriptState, ev: dict) -> None:
        """Record one event of the script.

        Raises :class:`~bench.tracking.writer.TrackingError` when the store does not take it (the
        event stays spooled and is read again).
        """
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
        if kind == "metrics":  # only before the run exists (the relay batches the rest)
            self.log(s, self.metric_rows(s, ev))
        elif kind == "checkpoint":
            self._checkpoint(s, ev)
        elif kind == "end":
            status = ev.get("status") if ev.get("status") in ("FINISHED", "FAILED", "KILLED") else "FAILED"
            s.ended, s.status, s.error = _time(ev.get("t")), status, _text(ev.get("error"))
            self.close(s)

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
        self.log(s, self.metric_rows(s, score))
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

    def keep(self, scripts: list[ScriptState], checkpoints: list[tuple[str, str]]) -> None:
        """Upload the checkpoints the evaluation scored that the upload cap left out.

        ``checkpoints``: ``(path, script)`` pairs. The selection's files are on their script's run
        whatever the script flooded.
        """
        for raw, script in checkpoints:
            path, _ = self.uploads.path_of(raw)
            owners = [s for s in scripts if path and s.run_id and str(path) in s.deferred]
            # past MAX_DEFERRED paths: the latest run of its script that left checkpoints out for
            # the cap
            owners = owners or [s for s in scripts if path and s.script == script and s.not_uploaded.get("over-cap")]
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

    def _ensure_run(self, s: ScriptState) -> None:
        parent = self._parent_run()
        if s.run_id is None and parent is None:
            raise TrackingError("the agent run does not exist yet; script events stay spooled")
        if s.run_id is None:
            name = s.script or s.file
            tags = {**self.base_tags, schema.KIND: schema.KIND_SCRIPT, schema.SCRIPT: name, schema.PID: s.pid}
            s.run_id = self.writer.create_run(name, tags, parent=parent, start_time=s.started or None)
            self._save()  # a harness killed from here on resumes into this run, never a second copy of it

    def close(self, s: ScriptState) -> None:
        """Close the script's run with its status, and the agent's reason as one plain line."""
        tags = {schema.EXIT: s.status}
        if s.error:  # the agent's text: one plain line in the tag (no raw newlines or Markdown structure)
            tags[schema.REASON] = one_line(s.error, 500)
        self.writer.set_tags(s.run_id, tags)
        self.writer.end_run(s.run_id, s.status, s.ended)
        s.closed = True
        self._closed()
