"""Nothing in a spool stops the relay (issue 21): values MLflow refuses are dropped one by one with their reason,
a batch the store refuses anyway is split, the caps cut a flood with a count, and system metrics go on."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import mlflow
import psutil
import pytest
from mlflow.exceptions import MlflowException
from mlflow.utils.validation import _validate_metric

from bench.tracking import accounting, relay_limits, schema
from bench.tracking.relay import Relay
from bench.tracking.writer import MlflowWriter, TrackingError

T = 1_700_000_000.0
KEYS = ["loss", "val/mse", "a b:c-d.e_f", "é", "k" * 250, "k" * 251, "a<b", "a/../b", "/abs", "", ".", "a\nb", "x//y"]


@pytest.mark.parametrize("key", KEYS)
def test_the_key_checks_agree_with_the_installed_mlflow(key):
    """The limits are MLflow's own (3.17): a key is refused here exactly when MLflow's validation refuses it."""
    try:
        _validate_metric(key, 1.0, 0, 0)
        takes = True
    except MlflowException:
        takes = False
    assert (relay_limits.key_problem(key) is None) == takes


def test_the_step_range_is_the_sql_stores(tmp_path):
    """A step of 2**63 - 1 is stored; one more (or one less than -2**63) is what SQLite cannot hold."""
    writer = MlflowWriter(f"test-steps-{uuid.uuid4().hex[:8]}")
    run = writer.create_run("r", {})
    lo, hi = relay_limits.INT64_MIN, relay_limits.INT64_MAX
    assert writer.log_values(run, [("ok", 1.0, hi, T), ("ok", 2.0, lo, T)]) == []
    for step in (relay_limits.INT64_MAX + 1, relay_limits.INT64_MIN - 1):
        assert relay_limits.step_of(step) == (None, "step-out-of-range")
        with pytest.raises(TrackingError):  # an internal error, not a refusal: why it is checked before
            writer.log_values(run, [("ok", 3.0, step, T)])


def _spool(folder: Path, events: list, name: str = "4242.jsonl") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps(e) + "\n" for e in events))
    return folder


def _relay(tmp_path: Path, spool: Path, **kw) -> tuple[Relay, MlflowWriter, str]:
    writer = MlflowWriter(f"test-limits-{uuid.uuid4().hex[:8]}")
    parent = writer.create_run("agent", {schema.KIND: schema.KIND_AGENT})
    return Relay(writer, parent, spool, {}, state_file=tmp_path / "relay.json", **kw), writer, parent


START = {"ev": "start", "t": T, "script": "run_1.py", "pid": 4242, "argv": ["run_1.py"], "source": ""}


def test_refused_values_are_dropped_by_reason_and_the_rest_of_the_script_is_relayed(tmp_path):
    bad = [
        {"ev": "metrics", "t": T, "step": 1, "metrics": {"k" * 300: 1.0, "a<b": 2.0, "ok": "x", "flag": True}},
        {"ev": "metrics", "t": T, "step": 2**63 + 5, "metrics": {"loss": 3.0}},
        {"ev": "metrics", "t": T, "step": 3, "metrics": {"loss": float("inf"), "big": 10**400, "nan": float("nan")}},
        {"ev": "metrics", "t": float("nan"), "step": 4, "metrics": {"loss": 4.0}},
        {"ev": "metrics", "t": T, "step": 1e300, "metrics": {"loss": 5.0}},
        {"ev": "metrics", "t": T, "step": "x", "metrics": {"loss": 6.0}},
        {"ev": "metrics", "t": T, "step": 5, "metrics": "not a dict"},
    ]
    good = [{"ev": "metrics", "t": T + s, "step": s, "metrics": {"loss": 1 / s}} for s in range(10, 20)]
    end = {"ev": "end", "t": T + 30, "status": "FINISHED"}
    spool = _spool(tmp_path / "spool", [START, *bad, *good, end])
    relay, writer, _ = _relay(tmp_path, spool)
    assert relay.poll() is True  # nothing here is an outage: no retry, no degraded store
    summary = relay.finalize()
    (script,) = summary["scripts"]
    assert script["status"] == "FINISHED"
    client = mlflow.tracking.MlflowClient()
    assert [m.step for m in client.get_metric_history(script["run_id"], "loss")] == list(range(10, 20))
    (nan,) = client.get_metric_history(script["run_id"], "nan")  # NaN is a value MLflow keeps as NaN
    assert nan.value != nan.value
    assert script["dropped"] == {
        "key-too-long": 1,
        "key-characters": 1,
        "value-not-a-number": 2,  # "x", True
        "step-out-of-range": 2,  # 2**63 + 5, 1e300
        "value-infinite": 2,  # inf, 10**400
        "timestamp-out-of-range": 1,
        "step-not-an-integer": 1,
    }
    assert script["examples"]["key-characters"] == "a<b" and script["values"] == 11
    values = summary["relay"]["values"]
    assert values["merged"] == {} and values["relayed"] + sum(values["dropped"].values()) == 11 + 10
    lines = accounting.lines(summary)
    assert lines[0].startswith("dropped value-infinite: 2 values") or "key-too-long: 1 values" in "\n".join(lines)


def test_a_value_the_store_refuses_anyway_costs_itself_not_its_batch(tmp_path, monkeypatch):
    """Checks that miss a limit (a newer MLflow, another store): the refused batch is split, the rest logged."""
    monkeypatch.setattr(relay_limits, "key_problem", lambda key: None)
    rows = {f"m{i}": float(i) for i in range(300)} | {"a<b": 1.0}
    spool = _spool(tmp_path / "spool", [START, {"ev": "metrics", "t": T, "step": 1, "metrics": rows}])
    relay, writer, _ = _relay(tmp_path, spool)
    summary = relay.finalize()
    (script,) = summary["scripts"]
    assert script["values"] == 300 and script["dropped"] == {"store-refused": 1}
    assert (
        "a<b" in script["examples"]["store-refused"] and "Names may only contain" in script["examples"]["store-refused"]
    )


def test_the_caps_cut_a_flood_with_a_count_and_the_scored_checkpoint_is_uploaded_anyway(tmp_path, monkeypatch):
    monkeypatch.setattr(relay_limits, "MAX_VALUES_PER_SCRIPT", 50)
    monkeypatch.setattr(relay_limits, "MAX_CHECKPOINT_UPLOADS", 2)
    ckpts = tmp_path / "ws" / "checkpoints"
    ckpts.mkdir(parents=True)
    events = [START] + [{"ev": "metrics", "t": T, "step": s, "metrics": {"a": s, "b": -s}} for s in range(1, 41)]
    for i in range(5):
        (ckpts / f"c{i}.pt").write_text(str(i))
        events.append({"ev": "checkpoint", "t": T, "path": str(ckpts / f"c{i}.pt"), "val_score": i, "step": 100 + i})
    events.append({"ev": "end", "t": T + 9, "status": "FINISHED"})
    spool = _spool(tmp_path / "ws" / ".bench" / "spool", events)
    relay, writer, _ = _relay(tmp_path, spool, checkpoints_dir=ckpts)
    summary = relay.finalize()
    (script,) = summary["scripts"]
    # 80 values of metrics events + 5 checkpoint scores written; 50 relayed, the rest counted past the cap
    assert script["values"] == 50 and script["dropped"] == {"over-cap": 35} and script["status"] == "FINISHED"
    assert (script["checkpoints"], script["checkpoints_uploaded"]) == (5, 2)
    assert summary["relay"]["checkpoints"]["not_uploaded"] == {"over-cap": 3}
    client = mlflow.tracking.MlflowClient()
    assert [m.step for m in client.get_metric_history(script["run_id"], "a")] == list(range(1, 26))

    again = Relay(writer, relay.parent_run, spool, {}, state_file=tmp_path / "relay.json", checkpoints_dir=ckpts)
    again.keep([(str(ckpts / "c3.pt"), "run_1.py")])  # the evaluation scored c3: record uploads it
    uploaded = sorted(Path(a.path).name for a in client.list_artifacts(script["run_id"], "checkpoints"))
    assert uploaded == ["c0.pt", "c1.pt", "c3.pt"]
    assert again.summary()["relay"]["checkpoints"]["not_uploaded"] == {"over-cap": 2}


def test_system_metrics_go_on_while_a_script_cannot_be_relayed(tmp_path):
    """A script whose events the store will not take must not stop the samples (they used to stop with it)."""
    (tmp_path / "run_1.py").write_text("import time\ntime.sleep(60)\n")
    script = subprocess.Popen([sys.executable, str(tmp_path / "run_1.py")])  # the script, as the harness sees it
    try:
        start = {**START, "pid": script.pid, "t": psutil.Process(script.pid).create_time()}
        spool = _spool(tmp_path / "spool", [start, {"ev": "metrics", "t": T, "step": 7, "metrics": {"loss": 1.0}}])
        relay, writer, _ = _relay(tmp_path, spool)
        relay.system.tick = 3600.0  # no thread's samples beside this test's own
        relay.follow(script.pid, None)  # the agent's tree: here the script itself

        def down(run_id, rows):
            raise TrackingError("store refuses this script's values")

        writer.log_values = down
        assert relay.poll() is False and relay.poll() is False  # stuck on its values
        relay.system.sample_once()  # finds the script's process and binds it to its run
        relay.system.sample_once(force=True)
    finally:
        script.kill()
        script.wait()
    (state,) = relay.scripts.values()
    history = mlflow.tracking.MlflowClient().get_metric_history(state.run_id, "system/memory_mb")
    assert len(history) == 1 and history[0].value > 0


def test_what_the_store_never_took_is_counted_as_left_unrelayed(tmp_path):
    events = [START] + [{"ev": "metrics", "t": T, "step": s, "metrics": {"a": s, "b": s}} for s in range(1, 8)]
    events.append({"ev": "checkpoint", "t": T, "path": "/nowhere.pt", "val_score": 1.0})
    spool = _spool(tmp_path / "spool", events)
    relay, writer, _ = _relay(tmp_path, spool)

    def down(run_id, rows):  # the run is created, then the store takes no value
        raise TrackingError("store down")

    writer.log_values = down
    summary = relay.finalize()
    assert summary["unrelayed"] == 1
    assert summary["relay"]["values"] == {"relayed": 0, "dropped": {}, "merged": {}, "unrelayed": 15}
    assert any(line.startswith("left unrelayed: 15 values") for line in accounting.lines(summary))


def test_a_flood_is_relayed_in_bounded_reads(tmp_path, monkeypatch):
    """More than one read's worth of spool is relayed in full at the end (it used to stop after one read)."""
    import bench.tracking.relay as relay_module

    monkeypatch.setattr(relay_module, "MAX_READ", 4096)
    events = [START] + [{"ev": "metrics", "t": T, "step": s, "metrics": {"a": s}} for s in range(2000)]
    spool = _spool(tmp_path / "spool", [*events, {"ev": "end", "t": T, "status": "FINISHED"}])
    relay, _, _ = _relay(tmp_path, spool)
    started = time.monotonic()
    summary = relay.finalize()
    assert summary["relay"]["values"]["relayed"] == 2000 and summary["scripts"][0]["status"] == "FINISHED"
    assert time.monotonic() - started < 120


def test_the_run_cap_counts_every_script_of_the_run(tmp_path, monkeypatch):
    """Many small floods are one big one: past the run's cap, each further value is counted, not relayed."""
    monkeypatch.setattr(relay_limits, "MAX_VALUES_PER_RUN", 30)
    spool = tmp_path / "spool"
    for pid in (1, 2):
        events = [{**START, "pid": pid}] + [
            {"ev": "metrics", "t": T, "step": s, "metrics": {"a": s}} for s in range(20)
        ]
        _spool(spool, events, f"{pid}.jsonl")
    relay, _, _ = _relay(tmp_path, spool)
    summary = relay.finalize()
    first, second = summary["scripts"]
    assert (first["values"], first["dropped"]) == (20, {})
    assert (second["values"], second["dropped"]) == (10, {"over-run-cap": 10})
    assert "over-run-cap: 10 values (past the cap of" in "\n".join(accounting.lines(summary))
