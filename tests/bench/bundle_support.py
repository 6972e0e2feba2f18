"""Shared by the bundle tests: a small generated campaign exported once, fresh stores from an empty one, and what
``bench report`` and the notebooks read of a campaign, as DataFrames, for comparing two stores.

The frames: the report's tables (their tidy data), the leaderboard's cells, the runs (agent, script, eval) and the
curves, each without the columns that name a run by its store's id or its run folder's place, rows in a set order
(the loader sorts children by their parent's id).
"""

from __future__ import annotations

import importlib.util
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from bench.bundle import export as bundle_export
from bench.tracking import schema, store, whole_runs

ROOT = Path(__file__).resolve().parents[2]
NS = 1_000_000_000


def _synthetic():
    spec = importlib.util.spec_from_file_location("bundle_synthetic", ROOT / "tests" / "analysis" / "synthetic.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _use_store(monkeypatch, folder: Path, empty: Path | None = None) -> None:
    """The embedded store under ``folder``; from a copy of ``empty`` (an SQLite store with MLflow's schema and no
    runs) when given: MLflow takes seconds to create its schema, a copy milliseconds."""
    if empty is not None:
        folder.mkdir(parents=True)
        shutil.copy(empty, folder / "mlflow.db")
    monkeypatch.setenv("BENCH_MLRUNS_DIR", str(folder))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture(scope="module")
def empty(tmp_path_factory) -> Path:
    """An SQLite store's file with MLflow's schema made and nothing in it."""
    folder = tmp_path_factory.mktemp("bundle-empty-store")
    with pytest.MonkeyPatch.context() as mp:
        _use_store(mp, folder)
        store.client()
    return folder / "mlflow.db"


@dataclass
class Source:
    campaign: str
    counts: dict
    archive: Path
    tree: list
    frames: dict


@pytest.fixture(scope="module")
def source(tmp_path_factory, empty) -> Source:
    """A small campaign in a store of its own, exported once: 2 agents x 1 task, a script run each, an eval run of
    the successful one (the other failed), one agent run with a trace of two spans and an artifact."""
    from bench.pipeline.traces import SpanSpec, TraceSpec
    from bench.tracking.writer import MlflowWriter

    tmp = tmp_path_factory.mktemp("bundle-source")
    with pytest.MonkeyPatch.context() as mp:
        _use_store(mp, tmp / "store", empty)
        name = f"bundle-{uuid.uuid4().hex[:6]}"
        counts = _synthetic().generate(name, agents=2, tasks=1, repeats=1, scripts=1, evals=1, fail_every=2)
        _, runs = whole_runs.campaign_runs(name)
        agent = next(r for r in runs if r.data.tags.get(schema.KIND) == schema.KIND_AGENT)
        w = MlflowWriter(name)
        spans = [
            SpanSpec("LLM 1: m", "LLM", 10 * NS, 11 * NS, {"q": 1}, {"a": 2}, {schema.SPAN_LLM_ATTRS["api"]: "x"}),
            SpanSpec("shell: ls", "TOOL", 12 * NS, 13 * NS, {"cmd": "ls"}, {"o": ""}, {schema.SPAN_TOOL: "shell"}, "1"),
        ]
        spec = TraceSpec("agent run", 9 * NS, 14 * NS, {"p": "x"}, {"s": "ok"}, {schema.KIND: schema.TRACE_KIND}, spans)
        trace = w.log_trace(agent.info.run_id, spec)
        w.set_tags(agent.info.run_id, {schema.TRACE: trace})
        w.log_text(agent.info.run_id, "the audit\n", "audit/audit.json")
        archive = tmp / "c.tar.gz"
        bundle_export.export(name, archive)
        return Source(name, counts, archive, _tree(name), report_frames(name))


def _tree(name: str) -> list[tuple]:
    """The campaign as comparable tuples: name, status, times, params, tags, histories, parent's name, artifacts."""
    exp, runs = whole_runs.campaign_runs(name)
    names = {r.info.run_id: r.info.run_name for r in runs}
    out = []
    for r in runs:
        tags = {k: v for k, v in r.data.tags.items() if k not in (schema.PARENT, schema.SOURCE_RUN, schema.TRACE)}
        hist = whole_runs.full_histories(r.info.run_id, sorted(r.data.metrics))
        hist = {k: [(m.value, m.step, m.timestamp) for m in v] for k, v in hist.items()}
        traces = [
            [(s.name, s.span_type, s.start_time_ns, s.end_time_ns, s.inputs, s.outputs) for s in t.data.spans]
            for t in whole_runs.run_traces(exp.experiment_id, r.info.run_id)
        ]
        arts = [a.path for a in store.client().list_artifacts(r.info.run_id, "audit")]
        parent = names.get(r.data.tags.get(schema.PARENT))
        info = (r.info.run_name, r.info.status, r.info.start_time, r.info.end_time)
        out.append((*info, dict(r.data.params), tags, hist, parent, traces, arts))
    return sorted(out, key=repr)


def report_frames(campaign: str) -> dict[str, pd.DataFrame]:
    from analysis import curves, gap, tables
    from analysis.leaderboard import build
    from analysis.runs import load

    rs = load([campaign])
    lb = build(rs)
    out = {
        t.name: t.data
        for t in (tables.leaderboard_table(lb), tables.table4(lb), tables.table5(lb), tables.table6(lb))
        + (tables.table8(lb), gap.gap_table(lb))
    }
    out |= {"cells": lb.cells, "agents": rs.agents, "scripts": rs.scripts, "evals": rs.evals}
    out |= {"timeline": curves.timeline(rs), "anytime": curves.anytime(rs, lb.tasks)}
    return {name: _comparable(df) for name, df in out.items()}


def _comparable(df: pd.DataFrame) -> pd.DataFrame:
    ids = [c for c in df.columns if "run_id" in str(c) or "workspace" in str(c) or "experiment_id" in str(c)]
    df = df.drop(columns=ids).reset_index(drop=True)
    order = sorted(range(len(df)), key=lambda i: tuple(map(str, df.iloc[i].tolist())))
    return df.iloc[order].reset_index(drop=True)


def assert_same(a: dict[str, pd.DataFrame], b: dict[str, pd.DataFrame]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert not a[name].empty or name in ("gap",), name  # a comparison of nothing proves nothing
        pd.testing.assert_frame_equal(a[name], b[name], obj=name)
