"""A campaign's leaderboard as MLflow runs, so that the MLflow UI shows Agg and the per-task statistics beside the runs.

For one experiment (campaign) this writes, through :class:`bench.tracking.writer.MlflowWriter`:

- one **campaign run** (``bench.kind=campaign``) holding the ``bench report`` files as artifacts (``report/``) and
  the leaderboard as its description;
- one **summary run** per leaderboard entry (``bench.kind=summary``), nested under the campaign run, tagged with the
  entry's agent, model and label like its agent runs, with the metrics ``agg``, ``agg_max``, ``success_rate``,
  ``runs``, ``tasks`` and per task ``<task>_mean``, ``_std``, ``_rel_mean``, ``_success_rate``, ``_n_runs``.

Idempotent: the runs are found again by their tags and updated (new metric values are the latest; the report files
replace those of the same name), never duplicated. A statistic that is undefined now (a std of one run) is not
logged, and an entry whose runs were all deleted is not visited: what an earlier summary logged for them stays.
``analysis.runs`` reads only ``bench.kind=agent`` runs (and their script and eval children), so these runs never
count as agent runs.

Called at the end of ``bench run`` (bench/cli.py), ``bench campaign run``/``resume`` and ``make demo``; ``bench
report`` writes nothing into the store it reads unless asked (``--record``, analysis/report.py). This module does not
import :mod:`analysis.report` (which calls it): the caller passes the report's writer as ``render``.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis import gap
from analysis.leaderboard import AGENT, Leaderboard, build
from analysis.runs import load
from bench.paths import mlruns_dir
from bench.tracking import schema, store, views
from bench.tracking.writer import MlflowWriter

Render = Callable[[Path, list[str]], object]  # analysis.report.write_report(out, experiments)


@dataclass
class Written:
    """What one summary wrote: the campaign run, a summary run per entry label, and how long it took."""

    experiment: str
    campaign_run: str
    summary_runs: dict[str, str] = field(default_factory=dict)  # entry label -> run id
    report_files: int = 0
    report_error: str = ""  # why the report could not be attached ("" when it was, or none was asked for)
    seconds: float = 0.0

    def line(self) -> str:
        report = (
            f"report not attached ({self.report_error})" if self.report_error else f"{self.report_files} report files"
        )
        n = len(self.summary_runs)
        return (
            f"campaign summary of {self.experiment}: MLflow run {self.campaign_run} "
            f"({n} {'entry' if n == 1 else 'entries'}, {report}, {self.seconds:.1f} s)"
        )


def _finite(value) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def entry_metrics(lb: Leaderboard, source: str, entry: str) -> dict[str, float]:
    """The summary run's metrics for one entry: Eq. 1's Agg and Agg-max, success, and per task its cell's figures.

    Undefined values (no successful run, a std of one run, a task without baseline) are left out.
    """
    row = lb.summary[(lb.summary["source"] == source) & (lb.summary["entry"] == entry)].iloc[0]
    out = {
        schema.SUMMARY_AGG: row["agg"],
        schema.SUMMARY_AGG_MAX: row["agg_max"],
        schema.SUMMARY_SUCCESS_RATE: row["success_rate"],
        schema.SUMMARY_RUNS: row["runs"],
        schema.SUMMARY_TASKS: row["agg_tasks"],
    }
    cells = lb.cells[(lb.cells["source"] == source) & (lb.cells["entry"] == entry)]
    for cell in cells.itertuples():
        rate = cell.n_success / cell.n_runs if cell.n_runs else None
        values = (cell.mean, cell.std, cell.rel_mean, rate, cell.n_runs)
        out.update(
            {
                schema.summary_task_metric(cell.task, w): v
                for w, v in zip(schema.SUMMARY_TASK_STATS, values, strict=True)
            }
        )
        out[schema.summary_task_metric(cell.task, schema.SUMMARY_GAP_MEAN)] = getattr(cell, "gap_mean", None)
    gaps = (schema.SUMMARY_GAP, "gap"), (schema.SUMMARY_GAP_MAX, "gap_max"), (schema.SUMMARY_GAP_TASKS, "gap_tasks")
    out.update({name: row.get(column) for name, column in gaps})  # MLRC-Bench's gap closed (analysis.gap)
    return {k: f for k, v in out.items() if (f := _finite(v)) is not None}


def _note(lb: Leaderboard, source: str) -> str:
    """The campaign run's description: the entries ranked by Agg (the report's own tables are its artifacts)."""
    rows = lb.summary[(lb.summary["source"] == source) & (lb.summary["kind"] == AGENT)]
    fmt = lambda v: f"{v:+.4f}" if pd.notna(v) else "–"  # noqa: E731
    lines = ["| rank | entry | Agg | Agg-max | gap closed | success | runs | tasks |", "|---" * 8 + "|"]
    for r in rows.itertuples():
        rank = str(r.rank) if pd.notna(r.rank) else "–"
        lines.append(
            f"| {rank} | {r.entry} | {fmt(r.agg)} | {fmt(r.agg_max)} | {fmt(getattr(r, 'gap', None))} "
            f"| {r.successes:g}/{r.runs:g} | {r.runs:g} | {r.agg_tasks:g}/{r.of_tasks:g} |"
        )
    missing = gap.missing_note(lb.tasks)  # the tasks without a reference: no gap term there
    return (
        "Leaderboard of this campaign (paper Eq. 1; gap closed: MLRC-Bench's share of the baseline-to-reference gap; "
        "written by `bench run` / `bench report`):\n\n" + "\n".join(lines) + (f"\n\n{missing}" if missing else "")
    )


def _one(writer: MlflowWriter, kind: str, tags: dict[str, str], name: str, parent: str | None = None) -> str:
    """The run of ``kind`` with these tags: the oldest one found, else a new one."""
    found = writer.find_runs(kind, tags)
    if found:
        return found[0]
    return writer.create_run(name, {schema.KIND: kind, **tags}, parent=parent)


def write_campaign(
    experiment: str,
    *,
    report_dir: Path | None = None,
    render: Render | None = None,
    writer: MlflowWriter | None = None,
) -> Written | None:
    """Write (or update) the campaign run and its summary runs; None when the experiment has no agent runs.

    ``report_dir``: a folder holding this experiment's ``bench report`` already (logged as it is); else ``render``
    writes one into a temporary folder (no report artifacts when both are None). A report that fails leaves the
    summary runs written and says why in :attr:`Written.report_error`.
    """
    started = time.perf_counter()
    with _lock():  # two `bench run`s of one campaign ending together: the second reads what the first wrote
        runs = load(experiment, include_children=False)
        if runs.empty:
            return None
        lb = build(runs, calibration=False)
        writer = writer or MlflowWriter(experiment)
        campaign_run = _one(writer, schema.KIND_CAMPAIGN, {schema.CAMPAIGN: experiment}, "campaign")
        written = Written(experiment, campaign_run)
        writer.set_tags(campaign_run, {schema.RUN_NOTE: _note(lb, experiment)})
        tasks = lb.cells.loc[lb.cells["source"] == experiment, "task"].nunique()
        writer.log_metrics(
            campaign_run, [(schema.SUMMARY_RUNS, len(runs.agents), 0, None), (schema.SUMMARY_TASKS, tasks, 0, None)]
        )
        entries = lb.summary[(lb.summary["source"] == experiment) & (lb.summary["kind"] == AGENT)]
        for r in entries.itertuples():
            model = r.model if isinstance(r.model, str) else ""
            tags = {schema.CAMPAIGN: experiment, schema.AGENT: r.agent, schema.MODEL: model}
            run = _one(writer, schema.KIND_SUMMARY, tags, f"summary: {r.entry}", parent=campaign_run)
            labels = _labels(runs.agents, r.agent, model)  # the runs' own (bench run --tag)
            writer.set_tags(run, {schema.ENTRY: schema.entry_label(r.agent, model), **labels})
            writer.log_metrics(run, [(k, v, 0, None) for k, v in entry_metrics(lb, experiment, r.entry).items()])
            writer.end_run(run)
            written.summary_runs[r.entry] = run
        views.save(writer)  # the UI's saved views of this campaign (columns, grouping): bench ui links to them
        try:
            written.report_files = _attach_report(writer, campaign_run, experiment, report_dir, render)
        except Exception as e:  # a report that cannot be drawn: the leaderboard's numbers are written all the same
            written.report_error = f"{type(e).__name__}: {e}"
        writer.end_run(campaign_run)
    written.seconds = time.perf_counter() - started
    return written


def _labels(agents, agent: str, model: str) -> dict[str, str]:
    """The labels of an entry's runs (bench run --tag) on its summary run: each key with its values, comma-joined."""
    if "tags" not in agents:
        return {}
    mine = agents[(agents["agent"] == agent) & (agents["model"].fillna("") == model)]
    values: dict[str, set[str]] = {}
    for labels in mine["tags"]:
        for k, v in labels.items():
            values.setdefault(k, set()).add(v)
    return {f"{schema.TAG_PREFIX}{k}": ",".join(sorted(v))[:5000] for k, v in values.items()}


@contextlib.contextmanager
def _lock():
    """An exclusive lock beside the embedded store (none for a server: there the oldest run found is updated)."""
    if not store.is_embedded():
        yield
        return
    mlruns_dir().mkdir(parents=True, exist_ok=True)
    with open(mlruns_dir() / ".summary.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _attach_report(writer, run: str, experiment: str, report_dir: Path | None, render: Render | None) -> int:
    if report_dir is not None:
        return _log_report(writer, run, Path(report_dir))
    if render is None:
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        render(Path(tmp), [experiment])
        return _log_report(writer, run, Path(tmp))


def _log_report(writer: MlflowWriter, run: str, folder: Path) -> int:
    writer.log_artifacts(run, folder, schema.REPORT_ARTIFACTS)
    return sum(1 for p in folder.rglob("*") if p.is_file())


def after_report(experiments: Iterable[str] | None, render: Render) -> None:
    """``bench report --record``: the campaign summary of each reported experiment, one printed line each.

    Each campaign run gets a report of its own experiment drawn by ``render`` as the campaign's end draws it, never
    the folder the user asked for (a ``--published`` or ``--calibration`` variant is the reader's, not the
    campaign's). A failure is one line: the report on disk is what the user asked for.
    """
    names = list(experiments) if experiments else None
    try:
        if names is None:
            names = sorted(set(load(None, include_children=False).agents["experiment"].dropna()))
    except Exception as e:  # any tracking failure: one line
        print(f"campaign summary not written: {e}")
        return
    for name in names:
        print(summary_line(name, render=render))


def summary_line(experiment: str, **kwargs) -> str:
    """:func:`write_campaign`, as the one line ``bench run`` and ``bench report`` print (a failure included)."""
    try:
        written = write_campaign(experiment, **kwargs)
    except Exception as e:  # the store refused, a report failed: the runs are recorded
        return f"campaign summary of {experiment} not written: {type(e).__name__}: {e}"
    return written.line() if written else f"campaign summary of {experiment}: no agent runs"
