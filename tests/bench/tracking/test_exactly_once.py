"""Every value a traced script logs is one value in MLflow, however late its printed copy is read.

The task helper ``log_metrics`` (the locked prepare.py's) traces a value and prints it; the scripts here print it
once more in their own format, before or after the helper. The test holds the script's output back until the
script has run far ahead of its output tee (the pipes between them fill), so the tee reads the printed lines
about two thousand steps after the helper traced them: the lateness that used to turn 2,000 values into ~5,800.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bench.paths import ROOT
from bench.tracking import HOOK_DIR, schema
from bench.tracking.relay import Relay
from bench.tracking.writer import MlflowWriter

STEPS = 2000

LOOP = """
import sys
from prepare import log_metrics

steps, order = int(sys.argv[1]), sys.argv[2]
for step in range(1, steps + 1):
    loss = 1.0 / step + step * 1e-7  # a distinct value at every step, with more decimals than any line shows
    line = f"step {step} | loss {loss:.6f} | lr {1e-3:.5f}"
    if order == "print-first":
        print(line, flush=True)
    if order != "print-only":
        log_metrics(step, loss=loss, lr=1e-3)  # traces, then prints "step N | loss 0.xxxx | lr 0.0010"
    if order in ("print-after", "print-only"):
        print(line, flush=True)
    if order == "print-only":
        print(f"step {step} | loss {loss:.4f} | lr {1e-3:.4f}", flush=True)  # the same values, shorter
"""


def run_late(ws: Path, order: str) -> None:
    """Run the loop traced; its stdout is read only once the helper has traced far ahead of the printed lines."""
    (ws / "loop.py").write_text(LOOP)
    for name in ("prepare.py", "task_helpers.py"):  # prepare.py imports the shared helpers beside it
        shutil.copy(ROOT / "tasks" / "t6_time_series_forecasting" / name, ws / name)
    spool = ws / ".bench" / "spool"
    env = {**os.environ, "BENCH_WORKSPACE": str(ws), "BENCH_SPOOL_DIR": str(spool), "PYTHONPATH": str(HOOK_DIR)}
    proc = subprocess.Popen(
        [sys.executable, "loop.py", str(STEPS), order], cwd=ws, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:  # the pipes fill: the script blocks on print
        size = sum(f.stat().st_size for f in spool.glob("*.jsonl"))
        time.sleep(1.0)
        if size and size == sum(f.stat().st_size for f in spool.glob("*.jsonl")):
            break
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert out.count(b"\n") == STEPS * (1 if order == "print-only" else 2) + (STEPS if order == "print-only" else 0)


def relayed(ws: Path) -> tuple[str, MlflowWriter]:
    writer = MlflowWriter(f"test-once-{uuid.uuid4().hex[:8]}")
    parent = writer.create_run("agent", {schema.KIND: schema.KIND_AGENT})
    summary = Relay(writer, parent, ws / ".bench" / "spool", {}, state_file=ws / "relay.json").finalize()
    (script,) = summary["scripts"]
    assert script["status"] == "FINISHED"
    return script["run_id"], writer


@pytest.mark.slow  # a traced training script through the tee and the relay, per order: 30-50 s on 2 cores
@pytest.mark.parametrize("order", ["print-after", "print-first", "print-only"])
def test_a_value_traced_and_printed_is_one_value_however_late_the_print_is_read(tmp_path, order):
    import mlflow

    (tmp_path / ".bench" / "spool").mkdir(parents=True)
    run_late(tmp_path, order)
    (spool,) = (tmp_path / ".bench" / "spool").glob("*.jsonl")
    lines = spool.read_text().splitlines()
    traced = sum('"metrics"' in line and '"stdout"' not in line for line in lines)
    assert traced == (0 if order == "print-only" else STEPS)  # what the script traced, counted in its spool

    run_id, _ = relayed(tmp_path)
    client = mlflow.tracking.MlflowClient()
    for key in ("loss", "lr"):
        history = client.get_metric_history(run_id, key)
        assert len(history) == STEPS, (key, len(history))
        assert sorted(m.step for m in history) == list(range(1, STEPS + 1))
    if order == "print-after":  # the helper's value is the one kept, at full precision
        loss = {m.step: m.value for m in client.get_metric_history(run_id, "loss")}
        assert all(loss[s] == 1.0 / s + s * 1e-7 for s in range(1, STEPS + 1))


def test_a_batch_the_store_refuses_is_logged_whole_on_the_retry(tmp_path):
    """The relay remembers what it logged only once the store took it: a refused batch is not half-forgotten."""
    import json

    import mlflow

    from bench.tracking.writer import TrackingError

    spool = tmp_path / "spool"
    spool.mkdir()
    t = 1_700_000_000.0
    lines = [{"ev": "start", "t": t, "script": "run_1.py", "pid": 4242, "argv": ["run_1.py"], "source": ""}]
    for step in range(1, 101):
        lines.append({"ev": "metrics", "t": t + step, "step": step, "metrics": {"loss": 1 / step, "elapsed_s": step}})
        lines.append(
            {"ev": "metrics", "t": t + step, "step": step, "metrics": {"loss": round(1 / step, 4)}, "src": "stdout"}
        )
    (spool / "4242.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    writer = MlflowWriter(f"test-refused-{uuid.uuid4().hex[:8]}")
    parent = writer.create_run("agent", {schema.KIND: schema.KIND_AGENT})
    relay = Relay(writer, parent, spool, {}, state_file=tmp_path / "relay.json")
    real, calls = writer.log_values, []

    def refuse_once(run_id, rows):
        calls.append(len(rows))
        if len(calls) == 1:
            raise TrackingError("store down")
        return real(run_id, rows)

    writer.log_values = refuse_once
    assert relay.poll() is False
    assert relay.poll() is True
    summary = relay.finalize()
    client = mlflow.tracking.MlflowClient()
    (run_id,) = [s["run_id"] for s in summary["scripts"]]
    assert calls[0] == calls[1] == 200  # the same 100 losses and 100 wall-seconds values, offered again whole
    assert [len(client.get_metric_history(run_id, k)) for k in ("loss", schema.SCRIPT_SECONDS)] == [100, 100]
