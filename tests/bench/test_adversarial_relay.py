"""The relay as a target (issue 21, deliverable 4): spool values MLflow refuses, and a flood, end to end.

Before: one value the store refuses (a 300-character key, a key with ``<``, a step past 2**63) stopped the script's
relay for good (its later values and checkpoints never reached MLflow, its run ended KILLED) and result.json said
nothing was left unrelayed; a flood lost values and checkpoint uploads without a word. Now each value is checked
against the store's limits on its own, a refused one is dropped with its reason, and result.json and the agent run
account for every value the spool holds: relayed + dropped (by reason) + merged (printed copies of traced values)
+ left unrelayed = written.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from bench.paths import mlruns_dir
from bench.sandbox.bwrap import probe
from bench.tracking import relay_limits, schema
from tests.bench.adversary import HONEST, PeakRSS, _run
from tests.lazy import lazy

mlflow = lazy("mlflow")  # imported at its first use (tests/lazy.py)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(probe() is not None, reason=f"no usable sandbox here: {probe()}"),
]

# The baseline cut to one epoch, which first logs four values MLflow refuses or would change, then trains honestly.
REFUSED = r"""
python - <<'EOF'
prelude = '''    log_metrics(1, **{"k" * 300: 1.0})
    log_metrics(2, **{"a<b": 2.0})
    log_metrics(2**63 + 5, loss=3.0)
    log_metrics(3, loss=float("inf"))
'''
src = open("train.py").read().replace('"epochs": 5', '"epochs": 1')
src = src.replace('if __name__ == "__main__":\n', 'if __name__ == "__main__":\n' + prelude)
open("run_1.py", "w").write(src)
EOF
python run_1.py > run_1.log 2>&1
"""


def _runs(result) -> list:
    experiment = mlflow.get_experiment_by_name(result.run.campaign)
    return mlflow.search_runs([experiment.experiment_id], output_format="list")


def _script_run(runs: list, name: str):
    (run,) = [
        r for r in runs if r.data.tags.get(schema.KIND) == schema.KIND_SCRIPT and r.data.tags[schema.SCRIPT] == name
    ]
    return run


def test_refused_values_are_dropped_with_reasons_and_the_script_is_relayed_to_its_end(guard, honest):
    result = _run(guard.task, REFUSED)
    assert result.status == "success" and result.score == pytest.approx(honest.score, rel=1e-6)
    runs = _runs(result)
    script = _script_run(runs, "run_1.py")
    assert script.info.status == "FINISHED"  # relayed to its end event, not closed as KILLED
    client = mlflow.tracking.MlflowClient()
    # the values logged after the refused ones are there: the validation MSE of the one epoch, the training loss
    assert len(client.get_metric_history(script.info.run_id, "val_mse")) == 1
    assert any(m.step > 3 for m in client.get_metric_history(script.info.run_id, "loss"))
    assert [a.path for a in client.list_artifacts(script.info.run_id, "checkpoints")]  # and its checkpoint
    dropped = result.scripts["relay"]["values"]["dropped"]
    for reason in ("key-too-long", "key-characters", "step-out-of-range", "value-infinite"):
        assert dropped.get(reason, 0) >= 1, dropped
    assert result.scripts["relay"]["values"]["unrelayed"] == 0
    (agent,) = [r for r in runs if r.data.tags.get(schema.KIND) == schema.KIND_AGENT]
    assert "key-too-long" in agent.data.tags[schema.RELAY_DROPPED]
    assert "dropped" in agent.data.tags[schema.RUN_NOTE]
    assert agent.data.metrics[schema.RELAY_VALUES_DROPPED] == sum(dropped.values())


FLOOD_VALUES, FLOOD_KEYS, FLOOD_CHECKPOINTS = 1_000_000, 5, 2_000
# A traced-looking spool written directly (the hook would take minutes for a million values): a start, 200,000
# metrics events of 5 distinct values each, 2,000 checkpoint events each naming a small file of checkpoints/, an end.
FLOOD = rf"""
python - <<'EOF'
import json, os, time
os.makedirs("checkpoints", exist_ok=True)
t = time.time()
lines = [{{"ev": "start", "t": t, "pid": os.getpid(), "script": "flood.py", "argv": ["flood.py"]}}]
every = {FLOOD_VALUES // FLOOD_KEYS} // {FLOOD_CHECKPOINTS}
for i in range({FLOOD_VALUES // FLOOD_KEYS}):
    values = {{f"m{{j}}": i + j / 10 for j in range({FLOOD_KEYS})}}
    lines.append({{"ev": "metrics", "t": t, "step": i, "metrics": values}})
    if i % every == every - 1:
        path = os.path.abspath(f"checkpoints/flood_{{i}}.bin")
        open(path, "w").write("x")
        lines.append({{"ev": "checkpoint", "t": t, "path": path, "val_score": 1.0, "metric": "mse", "step": i}})
lines.append({{"ev": "end", "t": time.time(), "status": "FINISHED"}})
with open(f".bench/spool/{{time.time_ns()}}-{{os.getpid()}}.jsonl", "w") as f:
    f.write("".join(json.dumps(line) + "\n" for line in lines))
EOF
"""


def _written(spool: Path) -> int:
    """Values in the spool files, counted here the way the hook writes them: each entry of a metrics event, and one
    self-reported score per checkpoint event."""
    n = 0
    for path in spool.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            ev = json.loads(line)
            n += len(ev["metrics"]) if ev.get("ev") == "metrics" else int(ev.get("ev") == "checkpoint")
    return n


def _stored(run_ids: list[str]) -> int:
    """Values the SQLite store holds for these runs, system metrics aside (read from its table, not through MLflow)."""
    with sqlite3.connect(mlruns_dir() / "mlflow.db") as db:
        marks = ",".join("?" * len(run_ids))
        sql = f"select count(*) from metrics where run_uuid in ({marks}) and key not like 'system/%'"
        return db.execute(sql, run_ids).fetchone()[0]


def test_a_flood_is_cut_at_the_cap_with_an_honest_count_and_bounded_memory(guard, honest, monkeypatch):
    cap = 50_000  # the default (relay_limits.MAX_VALUES_PER_SCRIPT) takes ~1 min to relay here; the cut is the point
    monkeypatch.setattr(relay_limits, "MAX_VALUES_PER_SCRIPT", cap)
    started = time.monotonic()
    with PeakRSS() as mem:
        result = _run(guard.task, FLOOD + HONEST, budget_s=240)
    print(f"flood run: {time.monotonic() - started:.0f} s, harness RSS {mem.base >> 20} -> peak {mem.peak >> 20} MiB")
    assert result.status == "success" and result.score == pytest.approx(honest.score, rel=1e-6)
    assert mem.peak - mem.base < 400 << 20  # the spool is read in bounded pieces, not held

    accounting = result.scripts["relay"]
    written = _written(Path(result.workspace) / ".bench" / "spool")
    assert written >= FLOOD_VALUES + FLOOD_CHECKPOINTS
    runs = _runs(result)
    scripts = [r.info.run_id for r in runs if r.data.tags.get(schema.KIND) == schema.KIND_SCRIPT]
    relayed = _stored(scripts)
    values = accounting["values"]
    assert values["relayed"] == relayed
    assert relayed + sum(values["dropped"].values()) + sum(values["merged"].values()) + values["unrelayed"] == written
    flood = next(s for s in result.scripts["scripts"] if s["script"] == "flood.py")
    assert flood["values"] == cap and flood["dropped"]["over-cap"] == FLOOD_VALUES + FLOOD_CHECKPOINTS - cap
    assert flood["status"] == "FINISHED"  # its end event was read past the cap
    # checkpoint uploads are capped per script; the scored checkpoint (run_1's) is uploaded whatever the flood did
    assert flood["checkpoints"] == FLOOD_CHECKPOINTS
    assert flood["checkpoints_uploaded"] == relay_limits.MAX_CHECKPOINT_UPLOADS
    client = mlflow.tracking.MlflowClient()
    honest_run = _script_run(runs, "run_1.py")
    uploaded = [Path(a.path).name for a in client.list_artifacts(honest_run.info.run_id, "checkpoints")]
    assert Path(result.evaluations[0].path).name in uploaded
