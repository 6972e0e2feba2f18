"""``bench import BUNDLE``.

A bundle's runs into the store in force (SQLite, a file store, a server, PostgreSQL).

Each MLflow run is created again through :class:`bench.tracking.writer.MlflowWriter` with its name,
start and end times, status, params, tags, metric histories (every value with its step and time),
artifacts and traces; parents before children, so that each ``mlflow.parentRunId`` names the new id
of its parent, and the UI's tree, ``bench report`` and the notebooks read the imported campaign as
the original. Each new run carries its id in the source store (``schema.SOURCE_RUN``): a second
import finds it and adds nothing, and a run that an interrupted import left open (RUNNING where the
source is not) is deleted and written again. The run directories are copied to where this machine
keeps the campaign's run directories (or ``--runs-dir``), and each agent run's ``bench.workspace``
tag names its new place.

The bundle is checked against its manifest first (:func:`bench.bundle.archive.check`): an import of
files that differ from what was published is refused, naming them, unless forced. Every destination
is checked before anything is written (:mod:`bench.bundle.containment`), and an import never merges
into a campaign the store already has.
"""

from __future__ import annotations

import math
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bench import paths
from bench.bundle import archive as bundle
from bench.bundle import containment
from bench.checksums import sha256
from bench.errors import BenchError
from bench.tracking import schema, store, whole_runs
from bench.tracking.writer import MlflowWriter, TrackingError

TERMINAL = ("FINISHED", "FAILED", "KILLED")
RUN_NAME = "mlflow.runName"  # MLflow's own tag, set from the run's name (MLflow refuses the two when they differ)


class BundleMismatch(BenchError, RuntimeError):
    """The bundle's files differ from its manifest (exit 1): the problems, each naming its file."""

    def __init__(self, problems: list[bundle.Problem]):
        self.problems = problems
        super().__init__(f"{len(problems)} difference(s) from the manifest")


@dataclass
class Imported:
    """What one import did.

    Runs created, runs already there, run folders copied or already there, values the store refused.
    """

    campaign: str
    created: int = 0
    skipped: int = 0
    folders: int = 0
    folders_kept: int = 0
    refused: list[str] = field(default_factory=list)
    problems: list[bundle.Problem] = field(default_factory=list)


def _seconds(ms: int | None) -> float | None:
    """Milliseconds as the writer's seconds.

    Such that its int(t * 1000) gives back the same milliseconds.
    """
    return None if ms is None else (int(ms) + 0.5) / 1000.0


def _ordered(runs: list[dict]) -> list[dict]:
    """Parents before their children, otherwise in start order.

    A parent outside the bundle counts as none.
    """
    ids = {r["run_id"] for r in runs}
    done: set[str] = set()
    out: list[dict] = []
    pending = sorted(runs, key=lambda r: (r.get("start_time") or 0, r["run_id"]))
    while pending:
        ready = [r for r in pending if r.get("parent_run_id") not in ids or r["parent_run_id"] in done]
        if not ready:  # a cycle in the parents' tags: the rest as they come
            ready = pending
        out += ready
        done |= {r["run_id"] for r in ready}
        pending = [r for r in pending if r["run_id"] not in done]
    return out


def _existing(campaign: str) -> dict[str, tuple[str, str]]:
    """Source run id -> (run id here, status) of the runs already imported or original.

    The runs a former import of this campaign made, and the original runs themselves (a bundle
    imported into the store it came from adds nothing).
    """
    _, runs = whole_runs.campaign_runs(campaign)
    found = {r.info.run_id: (r.info.run_id, r.info.status) for r in runs}
    found |= {r.data.tags[schema.SOURCE_RUN]: found[r.info.run_id] for r in runs if r.data.tags.get(schema.SOURCE_RUN)}
    return found


def trace_spec(data: dict):
    """A stored trace (``Trace.to_dict()``) as the TraceSpec the writer logs.

    The :class:`bench.pipeline.traces.TraceSpec`: the root span and its children, with their names,
    types, times, inputs, outputs, attributes and status.
    """
    from mlflow.entities import Trace

    from bench.pipeline.traces import SpanSpec, TraceSpec

    trace = Trace.from_dict(data)
    spans = trace.data.spans
    root = next((s for s in spans if s.parent_id is None), None)
    if root is None:
        raise bundle.BundleError("a trace of the bundle has no root span: not a trace `bench export` wrote")

    def own(attrs: dict) -> dict:  # MLflow's own bookkeeping (type, inputs, outputs, trace id) is set by the writer
        return {k: v for k, v in attrs.items() if not k.startswith(("mlflow.span", "mlflow.traceRequestId"))}

    children = [
        SpanSpec(
            s.name,
            s.span_type or "UNKNOWN",
            s.start_time_ns,
            s.end_time_ns,
            s.inputs,
            s.outputs,
            own(s.attributes),
            s.status.description if str(s.status.status_code).endswith("ERROR") else None,
        )
        for s in spans
        if s is not root
    ]
    tags = {k: v for k, v in (trace.info.tags or {}).items() if not k.startswith("mlflow.")}
    return TraceSpec(root.name, root.start_time_ns, root.end_time_ns, root.inputs, root.outputs, tags, children)


def _import_run(writer: MlflowWriter, top: Path, data: dict, parent: str | None, folder: Path | None, out) -> str:
    """Create one run again and return its new id.

    The source-run tag goes in at the creation, the status last.
    """
    tags = {k: v for k, v in data["tags"].items() if k not in (schema.PARENT, RUN_NAME)}  # both set by the creation
    tags[schema.SOURCE_RUN] = data["run_id"]
    tags.pop(schema.WORKSPACE, None)  # the bundle's tag names a folder of the author's disk (or anything at all)
    if folder is not None:
        tags[schema.WORKSPACE] = str(folder)  # the one this import copied
    run_id = writer.create_run(data["run_name"] or "", tags, parent=parent, start_time=_seconds(data.get("start_time")))
    writer.log_params(run_id, data.get("params") or {})
    rows = [
        (key, math.nan if m["value"] is None else float(m["value"]), int(m["step"]), _seconds(m["timestamp"]))
        for key, values in (data.get("metrics") or {}).items()
        for m in values
    ]
    refused = writer.log_values(run_id, rows)
    out.refused += [f"{data['run_name']}: {row[0]}: {why}" for row, why in refused]
    arts = top / "mlflow" / "artifacts" / data["run_id"]
    if arts.is_dir():
        writer.log_artifacts(run_id, arts)
    new_traces = {}
    for trace_id in data.get("traces") or ():
        path = top / "mlflow" / "traces" / f"{trace_id}.json"
        if path.is_file():
            new_traces[trace_id] = writer.log_trace(run_id, trace_spec(bundle.read_json(path)))
    if (old := tags.get(schema.TRACE)) in new_traces:
        writer.set_tags(run_id, {schema.TRACE: new_traces[old]})
    if data.get("status") in TERMINAL:
        writer.end_run(run_id, data["status"], _seconds(data.get("end_time")))
    return run_id


def _copy_folder(src: Path, dest: Path, out: Imported) -> None:
    """Copy one run folder of the bundle to its checked destination.

    One already there was compared first.
    """
    if dest.exists():
        out.folders_kept += 1  # the bundle's own files, already here (compared by :func:`_differs`)
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(src, partial)
    partial.rename(dest)
    out.folders += 1


def _differs(folder: str, dest: Path, files: dict[str, str]) -> list[str]:
    """How a run folder already at ``dest`` differs from the bundle's ``runs/<folder>``.

    Compared with the manifest's hashes: each of the bundle's files must be there with the
    same sha256 (the original run folder holds more: its data, spool and home, which a bundle
    leaves out).
    """
    prefix = f"runs/{folder}/"
    out = []
    for rel, digest in files.items():
        if not rel.startswith(prefix):
            continue
        here = dest / rel[len(prefix) :]
        if here.is_symlink() or not here.is_file():
            out.append(f"{rel[len(prefix) :]} missing")
        elif sha256(here) != digest:
            out.append(f"{rel[len(prefix) :]} differs (sha256 {sha256(here)[:12]}, the bundle's {digest[:12]})")
    return out


def _read(top: Path) -> tuple[dict, list[dict]]:
    """The bundle's experiment and runs, read within the caps and with every name checked.

    BundleError otherwise.
    """
    try:
        experiment = bundle.read_json(top / "mlflow" / "experiment.json")
        runs = [bundle.read_json(p) for p in sorted((top / "mlflow" / "runs").glob("*.json"))]
        if not isinstance(experiment, dict) or not all(isinstance(r, dict) for r in runs):
            raise TypeError("a JSON value where a run or the experiment should be")
        for data in runs:
            bundle.safe_name(data["run_id"], "run id")
            data["tags"] = dict(data.get("tags") or {})
            if data.get("run_folder") is not None:
                bundle.safe_name(data["run_folder"], "run folder")
            for trace_id in data.get("traces") or ():
                bundle.safe_name(trace_id, "trace id")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        if isinstance(e, bundle.BundleError):
            raise
        raise bundle.BundleError(f"the bundle's MLflow part is unreadable ({type(e).__name__}: {e})") from e
    return experiment, runs


def _refuse_merge(campaign: str, bundled: str, exp, present: list, ids: set[str], path: Path) -> None:
    """An import never merges into another campaign.

    The store's experiment of that name may hold only runs of this bundle (a former import of it, or
    the runs it was exported from), beside the summary runs a report wrote of them.
    """
    derived = (schema.KIND_SUMMARY, schema.KIND_CAMPAIGN)  # roll-ups a report writes of whatever runs are there
    foreign = [
        r
        for r in present
        if r.info.run_id not in ids
        and r.data.tags.get(schema.SOURCE_RUN) not in ids
        and r.data.tags.get(schema.KIND) not in derived
    ]
    if exp is None or not foreign:
        return
    names = ", ".join(sorted({str(r.info.run_name) for r in foreign})[:3])
    raise containment.Refused(
        f"the store {store.tracking_uri()} already has a campaign {campaign!r} with {len(foreign)} run(s) that are "
        f"not this bundle's (e.g. {names}); the bundle's campaign is {bundled!r}. An import never merges into "
        f"another campaign: import it beside, under a name of your own: bench import {path} --as NEW_NAME"
    )


def import_bundle(
    path: Path, *, runs_dir: Path | None = None, force: bool = False, say=None, name: str | None = None
) -> Imported:
    """Load the bundle at ``path`` into the store in force, as campaign ``name``.

    ``name`` defaults to the bundle's own.

    Everything is checked before anything is written: the manifest, the caps, every destination
    (:mod:`bench.bundle.containment`), the campaign's name against the store's campaigns, and each
    run folder already here against the bundle's. BundleError (containment.Refused among them): bad
    input, nothing written; BundleMismatch: the bundle differs from its manifest (and ``force`` is
    off); TrackingError: the store refused or is down.
    """
    from bench.pipeline.workspace import campaign_dir

    say = say or (lambda line: None)
    with bundle.opened(Path(path)) as top:
        manifest = bundle.read_manifest(top)
        problems = bundle.check_folder(top)
        if problems and not force:
            raise BundleMismatch(problems)
        experiment, runs = _read(top)
        bundled = str(experiment.get("name") or manifest["campaign"])
        campaign = containment.check_name(name if name is not None else bundled, "campaign")
        if runs_dir is None:  # the campaign's folder under this machine's workspaces, itself checked
            base = containment.destination(paths.workspaces_dir(), campaign_dir(campaign).name, "campaign")
        else:
            base = containment.clear(Path(runs_dir), "--runs-dir")
        exp, present = whole_runs.campaign_runs(campaign)
        _refuse_merge(campaign, bundled, exp, present, {r["run_id"] for r in runs}, Path(path))
        folders: dict[str, Path] = {}  # the run folders this import copies (or finds already here, the same)
        differ = []
        for data in runs:
            rel = data.get("run_folder")
            if rel and data["tags"].get(schema.KIND) == schema.KIND_AGENT and (top / "runs" / rel).is_dir():
                dest = folders[rel] = containment.destination(base, rel, "run folder")
                if dest.exists() and (diff := _differs(rel, dest, manifest["files"])):
                    differ.append(
                        f"{dest}: {'; '.join(diff[:3])}" + (f" (+{len(diff) - 3} more)" if len(diff) > 3 else "")
                    )
        if differ:
            raise containment.Refused(
                "run folder(s) already here differ from the bundle's, nothing imported (never overwritten): "
                + " | ".join(differ)
                + "; import into a folder of your own with --runs-dir DIR"
            )
        out = Imported(campaign, problems=problems)
        writer = MlflowWriter(campaign)
        if exp is None:  # a new experiment takes the bundle's tags (the UI's saved views); an existing one is kept
            for key, value in (experiment.get("tags") or {}).items():
                writer.set_experiment_tag(key, value)
        existing = _existing(campaign)
        new_ids: dict[str, str] = {}
        for i, data in enumerate(_ordered(runs), 1):
            folder = folders.get(data.get("run_folder") or "")
            if folder is not None:
                _copy_folder(top / "runs" / data["run_folder"], folder, out)
            found = existing.get(data["run_id"])
            original = found is not None and found[0] == data["run_id"]  # the store the bundle came from
            if found and (original or found[1] != "RUNNING" or data.get("status") == "RUNNING"):
                new_ids[data["run_id"]] = found[0]
                out.skipped += 1
                continue
            if found:  # left open by an interrupted import: written again
                writer.delete_run(found[0])
            if campaign != bundled and schema.CAMPAIGN in data["tags"]:
                data["tags"][schema.CAMPAIGN] = campaign  # imported --as another name: the runs say which
            parent = new_ids.get(data.get("parent_run_id") or "")
            new_ids[data["run_id"]] = _import_run(writer, top, data, parent, folder, out)
            out.created += 1
            say(f"[{i}/{len(runs)}] {data['run_name']}")
    return out


def main(path: str, runs_dir: str | None, force: bool, quiet: bool, name: str | None = None) -> int:
    """``bench import``: 0 imported, 1 the bundle differs from its manifest, 2 bad input.

    1 unless --force; bad input: a name that leads out of its folder, a campaign of that name
    already in the store, a run folder here that differs.
    """
    say = None if quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    try:
        runs = Path(runs_dir) if runs_dir else None
        out = import_bundle(Path(path), runs_dir=runs, force=force, say=say, name=name)
    except bundle.BundleError as e:
        print(f"bench import: {e}", file=sys.stderr)
        return 2
    except BundleMismatch as e:
        for p in e.problems:
            print(f"bench import: {p}", file=sys.stderr)
        print(
            f"bench import: {path} differs from its manifest in {len(e.problems)} place(s): nothing imported "
            "(--force imports it anyway)",
            file=sys.stderr,
        )
        return 1
    except TrackingError as e:
        print(f"bench import: {e}", file=sys.stderr)
        return 1
    for p in out.problems:
        print(f"bench import: warning (--force): {p}", file=sys.stderr)
    for r in out.refused:
        print(f"bench import: the store refused {r}", file=sys.stderr)
    print(
        f"{out.campaign} in {store.tracking_uri()}: {out.created} runs imported, {out.skipped} already there; "
        f"{out.folders} run folders copied, {out.folders_kept} already there"
    )
    return 0
