"""Every MLflow write of the harness goes through :class:`MlflowWriter`.

Names come from :mod:`~bench.tracking.schema`.

It is also where the run's secrets stop (:mod:`bench.redact`): every run name, tag, param and metric
name and value, text, trace and uploaded file passes the one redactor first, so that a key the agent
echoed into a metric name, a script, its output or a checkpoint never reaches the store, whichever
path the harness took to record it. Run names, tag and param values then pass the console filter
(:func:`bench.markup.shown`): a checkpoint's name with an escape sequence, a C1 control or a
right-to-left override is shown in the UI with them visible, never acted on.

The harness is the only process that talks to MLflow (training scripts spool to files, see
``hook/sitecustomize.py``), so this class is also where tracking failures are contained: each call
raises :class:`TrackingError`, and the caller decides whether to retry later (the relay) or to tell
the user how to record afterwards (:func:`bench.pipeline.record.save`).
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from bench import redact
from bench.errors import BenchError
from bench.markup import shown
from bench.tracking import schema, store

# An unreachable tracking server must cost seconds, not MLflow's default minutes of retries.
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")
# A run's trace is written at the record step, which waits for it anyway: exported in this thread,
# span by span, not through MLflow's background queue, which drops spans past 1,000 waiting (a long
# run's trace has about that many)
os.environ.setdefault("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")


class TrackingError(BenchError, RuntimeError):
    """The tracking store refused or could not be reached; what was spooled is kept."""


class TrackingRefused(TrackingError):
    """The store answered and refused what it was given (MLflow's INVALID_PARAMETER_VALUE).

    Sending it again cannot help, unlike an outage; the relay drops what was refused, with this
    message as the reason.
    """


REFUSALS = {"INVALID_PARAMETER_VALUE"}  # MLflow's error codes for "this input is invalid" (SQL store and REST alike)
MAX_REFUSALS = 64  # store refusals one log_values call bisects before it drops the rest of its rows with the reason


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config -> flat ``{"optim.lr": "0.0003"}``, values cut to MLflow's 6,000 characters."""
    flat: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        else:
            flat[name[:250]] = str(value)[:6000]
    return flat


def _shown_deep(o: object) -> object:
    """Every string inside ``o`` (dict keys included) through the console filter, newlines kept."""
    if isinstance(o, str):
        return shown(o, lines=True)
    if isinstance(o, tuple):
        return tuple(_shown_deep(x) for x in o)
    if isinstance(o, list):
        return [_shown_deep(x) for x in o]
    if isinstance(o, dict):
        return {_shown_deep(k): _shown_deep(v) for k, v in o.items()}
    return o


def _redacted_spec(spec):
    """A copy of a trace spec whose every string is redacted and passed through the console filter.

    Every string: names, inputs, outputs, attributes, tags, errors. The agent's messages are shown
    in the trace view: no escape sequence, no bidi override reordering them.
    """
    import dataclasses

    r = redact.redactor()

    def clean(o):
        if dataclasses.is_dataclass(o) and not isinstance(o, type):
            return dataclasses.replace(o, **{f.name: clean(getattr(o, f.name)) for f in dataclasses.fields(o)})
        if isinstance(o, list):
            return [clean(x) for x in o]
        return _shown_deep(r.deep(o))

    return clean(spec)


def _ms(t: float | None) -> int:
    return int((t if t is not None else time.time()) * 1000)


class MlflowWriter:
    """MLflow writes for one campaign (one experiment)."""

    def __init__(self, campaign: str):
        self.campaign = campaign
        self._experiment_id: str | None = None

    def _client(self):
        try:
            c = store.client()
            if self._experiment_id is None:
                self._experiment_id = store.experiment_id(self.campaign)
            return c
        except Exception as e:
            store._client.cache_clear()  # retry from scratch next time
            raise TrackingError(f"tracking store {store.tracking_uri()} unavailable: {e}") from e

    def _do(self, what: str, fn, *args, **kwargs):
        c = self._client()
        try:
            return getattr(c, fn)(*args, **kwargs)
        except Exception as e:
            kind = TrackingRefused if getattr(e, "error_code", None) in REFUSALS else TrackingError
            raise kind(f"{what} failed on {store.tracking_uri()}: {e}") from e

    # --- runs --------------------------------------------------------------------------------
    def create_run(
        self, name: str, tags: Mapping[str, str], *, parent: str | None = None, start_time: float | None = None
    ) -> str:
        """Create a run (nested under ``parent`` when given) and return its id."""
        self._client()
        r = redact.redactor()
        all_tags = {r.text(k, key=True): shown(r.text(str(v)), lines=True) for k, v in tags.items()}
        if parent:
            all_tags[schema.PARENT] = parent
        name = shown(r.text(name, key=True))  # a checkpoint's or script's name: one line, no escape (bench.markup)
        run = self._do(
            "create run", "create_run", self._experiment_id, start_time=_ms(start_time), tags=all_tags, run_name=name
        )
        return run.info.run_id

    def end_run(self, run_id: str, status: str = "FINISHED", end_time: float | None = None) -> None:
        """Close a run: MLflow status FINISHED, FAILED or KILLED."""
        self._do("end run", "set_terminated", run_id, status=status, end_time=_ms(end_time))

    def delete_run(self, run_id: str) -> None:
        """Mark a run deleted (MLflow keeps it, restorable; searches leave it out).

        For an agent run opened by a harness that died before it launched the agent
        (:mod:`bench.campaign.job` starts that run over).
        """
        self._do("delete run", "delete_run", run_id)

    # --- data --------------------------------------------------------------------------------
    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        """Log a run's params (nested mappings flattened), redacted and cut to MLflow's limits."""
        from mlflow.entities import Param

        r = redact.redactor()
        items = [
            Param(r.text(k, key=True)[:250], shown(r.text(v), lines=True)[:6000]) for k, v in flatten(params).items()
        ]
        for i in range(0, len(items), 100):
            self._do("log params", "log_batch", run_id, params=items[i : i + 100])

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        """Set a run's tags, redacted and passed through the console filter, 100 per request."""
        from mlflow.entities import RunTag

        r = redact.redactor()
        items = [RunTag(r.text(k, key=True), shown(r.text(str(v)), lines=True)) for k, v in tags.items()]
        for i in range(0, len(items), 100):
            self._do("set tags", "log_batch", run_id, tags=items[i : i + 100])

    def log_metrics(self, run_id: str, rows: Iterable[tuple[str, float, int, float | None]]) -> int:
        """Log ``(key, value, step, unix_time)`` rows in batches; non-finite values are skipped.

        Returns the count.
        """
        from mlflow.entities import Metric

        r = redact.redactor()
        items = [
            Metric(r.text(k, key=True), float(v), _ms(t), int(s))
            for k, v, s, t in rows
            if v is not None and math.isfinite(v)
        ]
        for i in range(0, len(items), 1000):
            self._do("log metrics", "log_batch", run_id, metrics=items[i : i + 1000])
        return len(items)

    def log_values(self, run_id: str, rows: list[tuple[str, float, int, float | None]]) -> list[tuple[tuple, str]]:
        """Log ``(key, value, step, unix_time)`` rows checked beforehand; returns the refused ones.

        The rows are checked by :mod:`bench.tracking.relay_limits` (NaN is kept); each refused row
        comes back with its message.

        MLflow refuses a whole batch for one bad value; a refused batch is split in halves until the
        refused rows are alone, so that one value the checks missed costs itself, never its batch.
        Past ``MAX_REFUSALS`` the rest of the rows are returned with the last message. An outage
        raises :class:`TrackingError`.
        """
        refused: list[tuple[tuple, str]] = []
        r = redact.redactor()
        rows = [(r.text(k, key=True), *rest) for k, *rest in rows]
        for i in range(0, len(rows), 1000):
            self._log_or_split(run_id, rows[i : i + 1000], refused)
        return refused

    def _log_or_split(self, run_id: str, rows: list[tuple], refused: list[tuple[tuple, str]]) -> None:
        from mlflow.entities import Metric

        if len(refused) >= MAX_REFUSALS:
            refused += [(row, refused[-1][1]) for row in rows]
            return
        try:
            self._do("log metrics", "log_batch", run_id, metrics=[Metric(k, v, _ms(t), s) for k, v, s, t in rows])
        except TrackingRefused as e:
            if len(rows) == 1:
                refused.append((rows[0], str(e)))
                return
            half = len(rows) // 2
            self._log_or_split(run_id, rows[:half], refused)
            self._log_or_split(run_id, rows[half:], refused)

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        """Write ``text`` as the run's artifact ``artifact_file``, redacted."""
        r = redact.redactor()
        self._do("log text", "log_text", run_id, r.text(text), r.text(artifact_file, key=True))

    def log_artifact(self, run_id: str, path: Path, artifact_path: str | None = None) -> None:
        """One file, uploaded as is, or as a redacted copy of that name when it holds a secret."""
        if Path(path).exists():
            with tempfile.TemporaryDirectory(prefix="bench-redacted-") as tmp:
                clean = redact.redacted_file(Path(path), Path(tmp))
                self._do("log artifact", "log_artifact", run_id, str(clean), artifact_path)

    def log_artifacts(self, run_id: str, folder: Path, artifact_path: str | None = None) -> None:
        """Every file under ``folder``, under ``artifact_path``; one of the same name is replaced.

        A folder with a secret in any file is uploaded as a copy whose files are redacted (links are
        not followed: left out).
        """
        folder = Path(folder)
        if not folder.is_dir():
            return
        r = redact.redactor()
        files = [p for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()]
        if not any(redact.contains_secret(p, r) for p in files):
            self._do("log artifacts", "log_artifacts", run_id, str(folder), artifact_path)
            return
        with tempfile.TemporaryDirectory(prefix="bench-redacted-") as tmp:
            for p in files:
                rel = p.relative_to(folder)
                dest = Path(tmp) / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                clean = redact.redacted_file(p, dest.parent, r)
                if clean == p:
                    shutil.copyfile(p, dest)
            self._do("log artifacts", "log_artifacts", run_id, tmp, artifact_path)

    def log_trace(self, run_id: str, spec) -> str:
        """Write ``spec`` as one MLflow trace linked to ``run_id``, with its spans' recorded times.

        ``spec`` is a :class:`bench.pipeline.traces.TraceSpec`; returns the trace id.

        MLflow's client tracing API (``start_trace``/``start_span`` with explicit start and end
        times) exports in the background and swallows its own failures (tracing is best effort
        there), so the export is flushed and the trace read back: a trace missing from the store, or
        with fewer spans, raises :class:`TrackingError`.
        """
        import mlflow
        from mlflow.entities import SpanStatus

        c = self._client()
        spec = _redacted_spec(spec)
        try:
            root = c.start_trace(
                spec.name,
                span_type="AGENT",
                inputs=spec.inputs,
                tags=spec.tags,
                experiment_id=self._experiment_id,
                start_time_ns=spec.start_ns,
                run_id=run_id,
            )
            trace_id = root.trace_id
            for s in spec.spans:
                span = c.start_span(
                    s.name,
                    trace_id=trace_id,
                    parent_id=root.span_id,
                    span_type=s.span_type,
                    inputs=s.inputs,
                    attributes=s.attributes,
                    start_time_ns=s.start_ns,
                )
                status = SpanStatus("ERROR", s.error[:500]) if s.error else "OK"
                c.end_span(trace_id, span.span_id, outputs=s.outputs, status=status, end_time_ns=s.end_ns)
            c.end_trace(trace_id, outputs=spec.outputs, end_time_ns=spec.end_ns)
            mlflow.flush_trace_async_logging()
        except Exception as e:
            raise TrackingError(f"log trace failed on {store.tracking_uri()}: {e}") from e
        got = self._do("get trace", "get_trace", trace_id, display=False)
        if got is None or len(got.data.spans) != len(spec.spans) + 1:
            n = "no" if got is None else len(got.data.spans)
            raise TrackingError(f"log trace: the store holds {n} spans of {len(spec.spans) + 1} for {trace_id}")
        return trace_id

    def traces_of(self, run_id: str) -> dict[str, int]:
        """The traces linked to ``run_id``, each with its number of spans.

        ``bench record`` run again must neither write a second trace nor keep one that an earlier
        attempt left incomplete.
        """
        self._client()
        found = self._do("search traces", "search_traces", locations=[self._experiment_id], run_id=run_id)
        return {t.info.trace_id: len(t.data.spans) for t in found}

    def delete_traces(self, trace_ids: list[str]) -> None:
        """Delete traces (an incomplete one, before it is written again)."""
        self._client()
        self._do("delete traces", "delete_traces", self._experiment_id, trace_ids=list(trace_ids))

    def set_experiment_tag(self, key: str, value: str) -> None:
        """A tag on the campaign's experiment.

        The UI's saved views live in such tags: bench.tracking.views.
        """
        self._client()
        r = redact.redactor()
        self._do("set experiment tag", "set_experiment_tag", self._experiment_id, r.text(key, key=True), r.text(value))

    def get_run(self, run_id: str):
        """The MLflow run ``run_id`` (its data, tags and info)."""
        return self._do("get run", "get_run", run_id)

    def find_runs(self, kind: str, tags: Mapping[str, str]) -> list[str]:
        """Ids of the campaign's active runs of ``kind`` whose tags equal ``tags``, oldest first.

        Only the kind goes into MLflow's filter (a constant of the schema); the other tags are
        compared here, so that values with quotes (entry labels, campaign names) need no escaping in
        a filter string.
        """
        self._client()
        found = self._do(
            "search runs",
            "search_runs",
            [self._experiment_id],
            filter_string=f"tags.`{schema.KIND}` = '{kind}'",
            max_results=1000,
            order_by=["attributes.start_time ASC"],
        )
        return [r.info.run_id for r in found if all(r.data.tags.get(k) == str(v) for k, v in tags.items())]

    def open_children(self, parent: str) -> list[str]:
        """Ids of the runs nested under ``parent`` that are still RUNNING.

        They are what a killed harness left open.
        """
        self._client()
        found = self._do(
            "search runs",
            "search_runs",
            [self._experiment_id],
            filter_string=f"tags.`{schema.PARENT}` = '{parent}' and attributes.status = 'RUNNING'",
            max_results=1000,
        )
        return [r.info.run_id for r in found]

    @property
    def experiment_id(self) -> str:
        """The id of the campaign's experiment, created on first use."""
        self._client()
        return self._experiment_id
