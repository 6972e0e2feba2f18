"""The script tracer (interpreter start hook) and the relay that turns its spool into nested MLflow runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bench.tracking import HOOK_DIR, schema
from bench.tracking.relay import Relay
from bench.tracking.writer import MlflowWriter

SCRIPT_OK = """
import json, os, time
def log(step, **m):
    with open(os.environ["BENCH_SPOOL_FILE"], "a") as f:
        f.write(json.dumps({"ev": "metrics", "t": time.time(), "step": step, "metrics": m}) + "\\n")
for step in range(5):
    log(step, loss=1.0 / (step + 1), lr=0.1)
"""


def wait_for_starts(ws: Path, n: int) -> None:
    """Poll until ``n`` spool files hold their complete start line."""
    deadline = time.time() + 30
    while time.time() < deadline:
        files = list((ws / ".bench" / "spool").glob("*.jsonl"))
        if len(files) >= n and all(f.read_bytes().endswith(b"\n") for f in files):
            return
        time.sleep(0.05)
    raise AssertionError("traced scripts did not start")


def run_traced(ws: Path, name: str, body: str, *args: str, wait: bool = True, cwd: Path | None = None):
    (ws / name).write_text(body)
    env = {
        **os.environ,
        "BENCH_WORKSPACE": str(ws),
        "BENCH_SPOOL_DIR": str(ws / ".bench" / "spool"),
        "PYTHONPATH": str(HOOK_DIR),
    }
    proc = subprocess.Popen([sys.executable, name, *args], cwd=cwd or ws, env=env, stderr=subprocess.PIPE, text=True)
    if wait:
        proc.wait(timeout=60)
    return proc


def events(ws: Path) -> dict[str, list[dict]]:
    out = {}
    for f in sorted((ws / ".bench" / "spool").glob("*.jsonl")):
        evs = [json.loads(line) for line in f.read_text().splitlines()]
        out[evs[0]["script"]] = evs
    return out


@pytest.fixture
def ws(tmp_path):
    (tmp_path / ".bench" / "spool").mkdir(parents=True)
    return tmp_path


def test_tracer_spools_start_metrics_and_exit_status(ws):
    run_traced(ws, "run_1.py", SCRIPT_OK, "--lr", "0.1")
    run_traced(ws, "run_2.py", "raise ValueError('bad config')")
    run_traced(ws, "run_3.py", "import sys\nsys.exit(3)")
    ev = events(ws)
    assert set(ev) == {"run_1.py", "run_2.py", "run_3.py"}
    start = ev["run_1.py"][0]
    assert start["ev"] == "start" and start["argv"][1:] == ["--lr", "0.1"] and "def log" in start["source"]
    assert [e["ev"] for e in ev["run_1.py"]] == ["start"] + ["metrics"] * 5 + ["end"]
    assert ev["run_1.py"][-1]["status"] == "FINISHED"
    assert ev["run_2.py"][-1]["status"] == "FAILED" and "ValueError: bad config" in ev["run_2.py"][-1]["error"]
    assert ev["run_3.py"][-1] == {**ev["run_3.py"][-1], "status": "FAILED", "exit_code": 3}


def test_tracer_ignores_prepare_py_non_workspace_scripts_and_forked_workers(ws, tmp_path_factory):
    run_traced(ws, "prepare.py", "print('eval')")
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (ws / "pkg").mkdir()
    run_traced(ws, "pkg/helper.py", "print(1)")  # not top-level
    # a script outside the workspace, started from inside it, is not traced either
    (elsewhere / "outside.py").write_text("print(1)")
    env = {
        **os.environ,
        "BENCH_WORKSPACE": str(ws),
        "BENCH_SPOOL_DIR": str(ws / ".bench" / "spool"),
        "PYTHONPATH": str(HOOK_DIR),
    }
    subprocess.run([sys.executable, str(elsewhere / "outside.py")], cwd=ws, env=env, check=True)
    forking = "import os, sys\npid = os.fork()\nif pid == 0:\n    sys.exit(0)\nos.waitpid(pid, 0)\n"
    run_traced(ws, "run_fork.py", forking)
    ev = events(ws)
    assert set(ev) == {"run_fork.py"}
    assert [e["ev"] for e in ev["run_fork.py"]] == ["start", "end"]  # the forked child wrote no second end


def test_killed_script_has_no_end_event(ws):
    proc = run_traced(ws, "run_k.py", "import time\nprint('up', flush=True)\ntime.sleep(60)", wait=False)
    wait_for_starts(ws, 1)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert [e["ev"] for e in events(ws)["run_k.py"]] == ["start"]


def test_relay_creates_nested_runs_with_statuses_metrics_and_source(ws):
    import mlflow

    run_traced(ws, "run_1.py", SCRIPT_OK)
    run_traced(ws, "run_2.py", "raise RuntimeError('boom')")
    proc = run_traced(ws, "run_3.py", "import time\ntime.sleep(60)", wait=False)
    wait_for_starts(ws, 3)
    proc.kill()
    proc.wait()

    campaign = f"test-relay-{uuid.uuid4().hex[:8]}"
    rec = MlflowWriter(campaign)
    parent = rec.create_run("agent", {schema.KIND: schema.KIND_AGENT})
    spool, state = ws / ".bench" / "spool", ws / "relay.json"
    relay = Relay(rec, parent, spool, {schema.TASK: "t6"}, baseline_source=SCRIPT_OK, state_file=state)
    summary = relay.finalize()
    assert summary["launched"] == 3
    assert summary["statuses"] == {"FAILED": 1, "FINISHED": 1, "KILLED": 1}

    runs = mlflow.search_runs([rec.experiment_id], filter_string=f"tags.`{schema.PARENT}` = '{parent}'")
    by_script = {r[f"tags.{schema.SCRIPT}"]: r for _, r in runs.iterrows()}
    assert {s: r["status"] for s, r in by_script.items()} == {
        "run_1.py": "FINISHED",
        "run_2.py": "FAILED",
        "run_3.py": "KILLED",
    }
    assert "RuntimeError: boom" in by_script["run_2.py"][f"tags.{schema.REASON}"]
    client = mlflow.tracking.MlflowClient()
    rid = by_script["run_1.py"]["run_id"]
    assert [m.value for m in client.get_metric_history(rid, "loss")] == [1.0, 0.5, 1 / 3, 0.25, 0.2]
    arts = {a.path for a in client.list_artifacts(rid, "source")}
    assert arts == {"source/run_1.py", "source/run_1.py.diff"}

    # a second relay over the same spool (e.g. `bench record` after an outage) duplicates nothing
    Relay(rec, parent, ws / ".bench" / "spool", {}, state_file=ws / "relay.json").finalize()
    assert len(client.get_metric_history(rid, "loss")) == 5
    assert len(mlflow.search_runs([rec.experiment_id], filter_string=f"tags.`{schema.PARENT}` = '{parent}'")) == 3


def test_relay_keeps_events_spooled_while_the_store_is_unreachable(ws, monkeypatch):
    run_traced(ws, "run_1.py", SCRIPT_OK)
    campaign = f"test-outage-{uuid.uuid4().hex[:8]}"
    good = MlflowWriter(campaign)
    parent = good.create_run("agent", {schema.KIND: schema.KIND_AGENT})
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # nothing listens on the discard port
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    down = MlflowWriter(campaign)
    relay = Relay(down, parent, ws / ".bench" / "spool", {}, state_file=ws / "relay.json")
    assert relay.poll() is False  # degraded, not crashed
    assert relay.summary()["unrelayed"] == 1
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    summary = Relay(good, parent, ws / ".bench" / "spool", {}, state_file=ws / "relay.json").finalize()
    assert summary["unrelayed"] == 0 and summary["statuses"] == {"FINISHED": 1}


WORKERS = """
import multiprocessing as mp
import torch
from torch.utils.data import DataLoader, TensorDataset

def square(x):
    return x * x

if __name__ == "__main__":
    data = DataLoader(TensorDataset(torch.arange(64.0)), batch_size=8, num_workers=2)  # forked workers
    total = sum(float(b[0].sum()) for b in data)
    with mp.get_context("spawn").Pool(2) as pool:  # fresh interpreters: `python -c ...` under the hood
        total += sum(pool.map(square, range(4)))
    print(total)
"""


@pytest.mark.slow  # torch scripts with spawned workers / torch.compile: 20-50 s on 2 cores
def test_dataloader_and_spawned_workers_are_not_launches(ws):
    proc = run_traced(ws, "run_w.py", WORKERS)
    assert proc.returncode == 0, proc.stderr.read()
    ev = events(ws)
    assert list(ev) == ["run_w.py"]
    assert [e["ev"] for e in ev["run_w.py"]] == ["start", "end"] and ev["run_w.py"][-1]["status"] == "FINISHED"


COMPILED = """
import torch
if __name__ == "__main__":
    model = torch.compile(torch.nn.Linear(4, 2))  # inductor: may start compile workers
    print(model(torch.ones(3, 4)).shape)
"""


@pytest.mark.slow  # torch scripts with spawned workers / torch.compile: 20-50 s on 2 cores
def test_torch_compiled_script_is_one_launch(ws):
    proc = run_traced(ws, "run_c.py", COMPILED)
    assert proc.returncode == 0, proc.stderr.read()
    ev = events(ws)
    assert list(ev) == ["run_c.py"] and ev["run_c.py"][-1]["status"] == "FINISHED"


def test_forged_spool_events_upload_nothing_from_outside_and_leave_no_ghost_run(ws, tmp_path):
    """The spool is written by the agent's processes. A forged start (a path as its name, pid 1, which never
    exits), checkpoint events naming a host file, a link out of checkpoints/, and a line too long to be an event:
    nothing outside checkpoints/ is uploaded, the name is a plain file name, the run ends KILLED, not RUNNING."""
    import mlflow

    (ws / "checkpoints").mkdir(exist_ok=True)
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("harness-side file")
    (ws / "checkpoints" / "link.pt").symlink_to(secret)
    (ws / "checkpoints" / "real.pt").write_bytes(b"weights")
    spool = ws / ".bench" / "spool"
    spool.mkdir(parents=True, exist_ok=True)
    lines = [
        {"ev": "start", "t": time.time(), "pid": 1, "script": "../../../etc/evil.py", "argv": "not a list"},
        {"ev": "checkpoint", "t": time.time(), "path": str(secret), "val_score": 0.1, "metric": "mse"},
        {"ev": "checkpoint", "t": time.time(), "path": str(ws / "checkpoints" / "link.pt"), "val_score": "x"},
        {"ev": "checkpoint", "t": "later", "path": str(ws / "checkpoints" / "real.pt"), "val_score": 0.2},
    ]
    text = "".join(json.dumps(e) + "\n" for e in lines) + "x" * 100_000 + "\n" + '{"ev": "end", "status": "RUNNING"'
    (spool / f"{time.time_ns()}-1.jsonl").write_text(text)

    writer = MlflowWriter(f"test-forged-{uuid.uuid4().hex[:8]}")
    parent = writer.create_run("agent", {schema.KIND: schema.KIND_AGENT})
    state = tmp_path / "run" / "relay.json"
    state.parent.mkdir()
    relay = Relay(writer, parent, spool, {}, checkpoints_dir=ws / "checkpoints", state_file=state)
    summary = relay.finalize()
    (script,) = summary["scripts"]
    assert script["script"] == ".._.._.._etc_evil.py" and script["status"] == "KILLED"
    run = mlflow.tracking.MlflowClient().get_run(script["run_id"])
    assert run.info.status == "KILLED" and run.info.run_name == ".._.._.._etc_evil.py"
    uploaded = [a.path for a in mlflow.tracking.MlflowClient().list_artifacts(script["run_id"], "checkpoints")]
    assert uploaded == ["checkpoints/real.pt"]  # not the host file, not the link to it
    reasons = [c.get("not_uploaded", "") for c in relay.scripts[next(iter(relay.scripts))].checkpoints]
    assert reasons == ["outside-checkpoints", "link", ""]  # a link is never followed (issue 29), wherever it leads
    relayed = summary["relay"]["checkpoints"]
    assert relayed["uploaded"] == 1 and relayed["not_uploaded"] == {"outside-checkpoints": 1, "link": 1}
    assert summary["relay"]["values"]["dropped"] == {"value-not-a-number": 1}  # the link's val_score "x"
    assert state.is_file() and not (ws / ".bench" / "relay.json").exists()  # progress kept harness-side


def test_a_relay_json_planted_in_the_workspace_is_never_read(ws, tmp_path):
    """The live relay makes its state file before the agent starts; `bench record` later reads that one, not a
    forged ``.bench/relay.json`` claiming every event was already relayed."""
    import mlflow

    writer = MlflowWriter(f"test-planted-{uuid.uuid4().hex[:8]}")
    parent = writer.create_run("agent", {schema.KIND: schema.KIND_AGENT})
    spool, state = ws / ".bench" / "spool", tmp_path / "run" / "relay.json"
    state.parent.mkdir()
    Relay(writer, parent, spool, {}, state_file=state)  # the runner's relay, made before the launch
    assert state.is_file()
    run_traced(ws, "run_1.py", SCRIPT_OK)
    (name,) = [f.name for f in spool.glob("*.jsonl")]
    forged = {"scripts": {name: {"file": name, "offset": 10**9, "script": "run_1.py", "closed": True}}}
    (ws / ".bench" / "relay.json").write_text(json.dumps(forged))
    summary = Relay(writer, parent, spool, {}, state_file=state).finalize()  # as `bench record` does
    assert summary["statuses"] == {"FINISHED": 1}
    (run_id,) = [s["run_id"] for s in summary["scripts"]]
    assert len(mlflow.tracking.MlflowClient().get_metric_history(run_id, "loss")) == 5


def test_script_metrics_share_the_training_step_axis_with_one_wall_seconds_value_per_step(ws, tmp_path):
    """What train.py does: a loss line and a validation line at the same step, both with elapsed_s, and a
    checkpoint at that step; a second checkpoint that names no step. In MLflow every series is on the training
    step, and elapsed_s has one value per step (the first one logged there)."""
    import mlflow

    spool = tmp_path / "spool"
    spool.mkdir()
    t = 1_700_000_000.0
    lines = [
        {"ev": "start", "t": t, "script": "run_1.py", "pid": 4242, "argv": ["run_1.py"], "source": "x = 1\n"},
        {"ev": "metrics", "t": t + 1, "step": 20, "metrics": {"loss": 2.0, "elapsed_s": 1.0}},
        {"ev": "metrics", "t": t + 2, "step": 20, "metrics": {"val_mse": 0.5, "elapsed_s": 1.5}},
        {"ev": "checkpoint", "t": t + 3, "path": "checkpoints/a.pt", "val_score": 0.5, "step": 20},
        {"ev": "metrics", "t": t + 4, "step": 40, "metrics": {"loss": 1.0, "elapsed_s": 3.0}},
        {"ev": "metrics", "t": t + 5, "step": 40, "metrics": {"val_mse": 0.4, "elapsed_s": 3.5}},
        {"ev": "checkpoint", "t": t + 6, "path": "checkpoints/b.pt", "val_score": 0.4},
        {"ev": "end", "t": t + 7, "status": "FINISHED"},
    ]
    (spool / "4242.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    writer = MlflowWriter(f"test-axes-{uuid.uuid4().hex[:8]}")
    parent = writer.create_run("agent", {schema.KIND: schema.KIND_AGENT})
    Relay(writer, parent, spool, {}, state_file=tmp_path / "relay.json").finalize()

    (child,) = mlflow.search_runs([writer.experiment_id], filter_string=f"tags.`{schema.PARENT}` = '{parent}'")[
        "run_id"
    ]
    client = mlflow.tracking.MlflowClient()

    def series(key):
        return [(m.step, m.value) for m in sorted(client.get_metric_history(child, key), key=lambda m: m.timestamp)]

    assert series("loss") == [(20, 2.0), (40, 1.0)]
    assert series("val_mse") == [(20, 0.5), (40, 0.4)]
    assert series(schema.CHECKPOINT_SCORE) == [(20, 0.5), (40, 0.4)]  # the second: the last step the script logged
    assert series(schema.SCRIPT_SECONDS) == [(20, 1.0), (40, 3.0)]
