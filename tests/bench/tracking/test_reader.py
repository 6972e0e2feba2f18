"""The store's one reading interface (bench/tracking/reader.py and its readers): each fast path reads what MLflow's
public API reads, and a fast path whose preconditions fail gives way to the public API with the same results.

The expected values come from MLflow's public calls made here (``MlflowClient.search_experiments``,
``search_runs``, ``get_metric_history``) and from what the test wrote, never from the reader under test. The store
is an SQLite file of the test's own: several experiments (one deleted), agent runs with nested script runs, metric
histories (NaN, infinities, a step logged twice), tags with odd characters, a deleted run, runs of other kinds.
"""

from __future__ import annotations

import math
import uuid

import pytest
from mlflow.entities import Metric, Param, RunTag

from bench.tracking import api_reader, reader, schema, server_reader, sql_reader, store

ODD = {
    "odd.quote": 'it\'s "quoted"',
    "odd.lines": "two\nlines\tand a tab",
    "odd.unicode": "ünïcødé ✓ 日本語",
    "odd.like": "100%_match\\",
    "odd.sql": "'; DROP TABLE runs; --",
    "odd.empty": "",
    "odd.spaces": "  padded\n ",
    "odd.long": "x" * 5000,
    "odd key/with spaces-and.dots": "value",
}
HISTORY_KEYS = ["loss", schema.CHECKPOINT_SCORE, "odd", "never logged"]


def _metric(key: str, value: float, step: int, ts: int) -> Metric:
    return Metric(key, value, ts, step)


@pytest.fixture
def tracked(tmp_path, monkeypatch):
    """A store of its own with the runs above; returns (client, uri, facts the test wrote)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    c = store.client()
    uid = uuid.uuid4().hex[:6]
    exp_a, exp_b, exp_gone = (c.create_experiment(f"{n}-{uid}") for n in ("a", "b", "gone"))
    facts: dict = {"names": {exp_a: f"a-{uid}", exp_b: f"b-{uid}"}, "gone": exp_gone}
    facts |= {"agents": [], "scripts": [], "deleted": []}

    def run(exp: str, kind: str, tags: dict | None = None, parent: str | None = None) -> str:
        tags = {schema.KIND: kind, **(tags or {})}
        if parent:
            tags[schema.PARENT] = parent
        return c.create_run(exp, tags=tags).info.run_id

    t0 = 1_700_000_000_000
    for i in range(3):
        rid = run(exp_a, schema.KIND_AGENT, {**ODD, schema.RUN_NOTE: "a description", "repeat": str(i)})
        params = [Param(schema.PARAM_METRIC, "mse"), Param("odd param", ODD["odd.quote"]), Param("i", str(i))]
        metrics = [_metric("score", 0.5 + i, s, t0 + s) for s in range(4)]
        metrics += [_metric("nan", math.nan, 0, t0), _metric("inf", math.inf, 0, t0), _metric("-inf", -math.inf, 0, t0)]
        metrics += [_metric("twice", 1.0, 3, t0 + 5), _metric("twice", 2.0, 3, t0 + 9)]  # one step, two times
        c.log_batch(rid, metrics=metrics, params=params)
        c.set_terminated(rid, "FINISHED" if i else "FAILED")
        facts["agents"].append(rid)
        for j in range(2):  # nested script runs, with histories
            sid = run(exp_a, schema.KIND_SCRIPT, {schema.SCRIPT: f"run_{j}.py"}, parent=rid)
            scores = [_metric(schema.CHECKPOINT_SCORE, 0.1 * k + j, k, t0 + 1000 * k) for k in range(5)]
            losses = [_metric("loss", 1.0 / (k + 1), k, t0 + 10 * k) for k in range(40)]
            odd = [_metric("odd", math.nan, 0, t0), _metric("odd", math.inf, 1, t0), _metric("odd", 3.0, 1, t0)]
            c.log_batch(sid, metrics=scores + losses + odd)
            c.set_terminated(sid, "FINISHED")
            facts["scripts"].append(sid)
    eval_id = run(exp_a, schema.KIND_EVAL, {schema.CANDIDATE: "best"}, parent=facts["agents"][0])
    c.log_metric(eval_id, schema.EVAL_VAL_SCORE, 0.25)
    run(exp_a, schema.KIND_SUMMARY)  # another kind: never an agent run
    gone = run(exp_a, schema.KIND_AGENT, {"repeat": "9"})
    c.delete_run(gone)
    facts["deleted"].append(gone)
    facts["agents"].append(run(exp_b, schema.KIND_AGENT, {schema.AGENT: "still running"}))  # RUNNING, no end time
    facts["deleted"].append(run(exp_gone, schema.KIND_AGENT))
    c.delete_experiment(exp_gone)
    c.log_batch(facts["agents"][-1], tags=[RunTag("late", "tag")])
    return c, uri, facts


# --- what the public API says, flattened as the interface promises ---------------------------------------------------
def _value(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else v


def _rows(df) -> dict[str, dict]:
    """A wide runs table as {run_id: {column: value}}, missing values (NaN, None) left out, numbers as floats."""
    out = {}
    for rec in df.to_dict("records"):
        out[rec["run_id"]] = {k: _value(v) for k, v in rec.items() if _value(v) is not None}
    return out


def _expected_runs(c, experiment_ids: list[str], kind: str, params: bool) -> dict[str, dict]:
    found = c.search_runs(experiment_ids, f"tags.`{schema.KIND}` = '{kind}'", max_results=1000)
    out = {}
    for r in found:
        row = {"run_id": r.info.run_id, "experiment_id": str(r.info.experiment_id), "status": r.info.status}
        row |= {"start_time": r.info.start_time, "end_time": r.info.end_time}
        row |= {f"t:{k}": v for k, v in r.data.tags.items() if k != schema.RUN_NOTE}
        row |= {f"m:{k}": v for k, v in r.data.metrics.items()}
        row |= {f"p:{k}": v for k, v in r.data.params.items()} if params else {}
        out[r.info.run_id] = {k: _value(v) for k, v in row.items() if _value(v) is not None}
    return out


def _history(rows) -> list[tuple]:
    return sorted((r, int(s), "NaN" if math.isnan(v) else float(v), float(t)) for r, s, v, t in rows)


def _expected_history(c, run_ids: list[str], key: str) -> list[tuple]:
    return _history([(r, m.step, m.value, m.timestamp / 1000.0) for r in run_ids for m in c.get_metric_history(r, key)])


def _read_history(source, run_ids: list[str], key: str) -> list[tuple]:
    df = source.metric_history(run_ids, key)
    assert list(df.columns) == api_reader.HISTORY_COLUMNS
    keys = list(zip(df["run_id"], df["time"], df["step"], strict=True))
    assert keys == sorted(keys)  # sorted by run, time, step
    return _history(zip(df["run_id"], df["step"], df["value"], df["time"], strict=True))


def _check_reads_like_the_api(source, c, facts) -> None:
    api_order = [e.experiment_id for e in c.search_experiments(order_by=["last_update_time DESC"])]
    exps = source.experiments()
    assert list(exps) == api_order and set(facts["names"]) <= set(exps)
    assert facts["gone"] not in exps  # a deleted experiment is not read
    name_b = next(iter(facts["names"].values()))
    assert source.experiments([name_b, "no such experiment"]) == {k: v for k, v in exps.items() if v == name_b}
    ids = list(exps)
    for kind in (schema.KIND_AGENT, schema.KIND_SCRIPT, schema.KIND_EVAL, schema.KIND_SUMMARY, "no such kind"):
        for params in (False, True):
            assert _rows(source.runs(ids, kind, params)) == _expected_runs(c, ids, kind, params), (kind, params)
    agents = _rows(source.runs(ids, schema.KIND_AGENT, True))
    assert sorted(agents) == sorted(facts["agents"])  # no deleted run, none of a deleted experiment
    first = agents[facts["agents"][0]]
    assert {k: first[f"t:{k}"] for k in ODD} == ODD and f"t:{schema.RUN_NOTE}" not in first
    assert first["p:odd param"] == ODD["odd.quote"] and first["m:twice"] == 2.0 and first["m:inf"] > 1e300
    scripts = _rows(source.runs(ids, schema.KIND_SCRIPT))
    assert {s[f"t:{schema.PARENT}"] for s in scripts.values()} == set(facts["agents"][:3])  # nested under each
    assert source.runs([], schema.KIND_AGENT).empty
    every = facts["agents"] + facts["scripts"] + facts["deleted"]
    for key in HISTORY_KEYS:
        assert _read_history(source, every + every[:2], key) == _expected_history(c, every, key), key
    assert len(_read_history(source, facts["scripts"], "loss")) == 40 * len(facts["scripts"])
    assert _read_history(source, [], "loss") == []


def test_the_tables_and_the_public_api_read_the_same(tracked):
    c, uri, facts = tracked
    assert sql_reader.unusable(uri) is None
    fast = reader.open_reader()
    assert fast.name == "sql" and reader.open_reader(fast=False).name == "api"
    _check_reads_like_the_api(sql_reader.SqlReader(uri, strict=True), c, facts)
    _check_reads_like_the_api(api_reader.ApiReader(), c, facts)


@pytest.mark.parametrize(
    ("precondition", "attribute", "value", "why"),
    [
        ("an unknown schema revision", "KNOWN_REVISIONS", {}, "is not one this reader was checked on"),
        ("a missing table", "TABLES", (*sql_reader.TABLES, "runs_v2"), "no table runs_v2"),
        ("experiments in other workspaces", "DEFAULT_WORKSPACE", "elsewhere", "workspaces other than"),
    ],
)
def test_a_fast_path_whose_precondition_fails_gives_way_to_the_public_api(
    tracked, monkeypatch, capsys, precondition, attribute, value, why
):
    c, uri, facts = tracked
    monkeypatch.setattr(sql_reader, attribute, value)
    assert why in sql_reader.unusable(uri)
    source = reader.open_reader()
    assert source.name == "api", precondition
    assert why in capsys.readouterr().err  # said once, on stderr
    _check_reads_like_the_api(source, c, facts)
    with pytest.raises(RuntimeError, match=why):
        reader.open_reader(fast=True)


def test_a_query_that_fails_on_a_known_schema_is_answered_by_the_public_api(tracked, monkeypatch, capsys):
    """A release that changed a table without a new revision: each failing read is answered by the public API."""
    c, uri, facts = tracked
    monkeypatch.setattr(sql_reader, "_KIND_JOIN", sql_reader._KIND_JOIN.replace("r.lifecycle_stage", "r.stage_of_life"))
    renamed = ("experiments", "runs", "tags", "params", "latest_metrics", "metric_rows")
    monkeypatch.setattr(sql_reader, "TABLES", renamed)
    source = sql_reader.SqlReader(uri)
    ids = list(facts["names"])
    assert _rows(source.runs(ids, schema.KIND_AGENT, True)) == _expected_runs(c, ids, schema.KIND_AGENT, True)
    assert "reading the tracking database directly failed" in capsys.readouterr().err
    with pytest.raises(Exception, match="stage_of_life"):
        sql_reader.SqlReader(uri, strict=True).runs(ids, schema.KIND_AGENT)


def test_a_store_not_made_yet_reads_empty_and_is_not_created(tmp_path, monkeypatch):
    db = tmp_path / "none" / "mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    source = reader.open_reader()
    assert source.experiments() == {} and source.metric_history(["x"], "loss").empty
    assert not db.exists()
    with pytest.raises(RuntimeError, match="no fast path"):
        reader.open_reader(fast=True)


@pytest.mark.slow  # an MLflow server's start: 20-40 s on 2 cores
def test_a_server_reads_like_the_api_and_a_server_without_the_bulk_endpoint_is_read_one_run_at_a_time(
    tracked, tmp_path, monkeypatch, capsys
):
    import socket

    from bench.tracking import server

    c, uri, facts = tracked
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    running = server.start(uri, tmp_path / "artifacts", port=port, log=tmp_path / "server.log")
    try:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", running.url)
        monkeypatch.delenv(store.DATABASE_ENV, raising=False)
        bulk = reader.open_reader()
        assert bulk.name == "server"
        _check_reads_like_the_api(bulk, c, facts)
        assert bulk.bulk and "did not answer" not in capsys.readouterr().err  # every history came in bulk
        monkeypatch.setattr(server_reader, "VALUES_PER_REQUEST", 7)  # every batch comes back full: halves, then one run
        _check_reads_like_the_api(server_reader.ServerReader(strict=True), c, facts)

        no_endpoint = "/ajax-api/2.0/mlflow/metrics/no-such-endpoint"  # a release without it
        monkeypatch.setattr(server_reader, "BULK", no_endpoint)
        with pytest.raises(Exception, match="404"):
            server_reader.ServerReader(strict=True).metric_history(facts["scripts"], "loss")
        fallback = reader.open_reader()
        _check_reads_like_the_api(fallback, c, facts)
        assert not fallback.bulk and "404" in capsys.readouterr().err

        monkeypatch.setenv(store.DATABASE_ENV, uri)  # the server's database named (what `bench server` prints)
        assert reader.open_reader().name == "sql"
    finally:
        running.stop()
        store._client.cache_clear()  # no client left on the stopped server's URL
