"""Eight whole `bench run`s at once against the MLflow server on PostgreSQL (tests/pg.py), each agent launching
four traced scripts in parallel inside its sandbox: every value each script logged is in MLflow once.

This is issue #16's scale test with real parts end to end (harness, sandbox, tracer, output tee, relay, server,
database); tests/bench/tracking/test_postgres.py checks the same count with harness-side relays only. The agents
are `command` agents that write their scripts and run them (no checkpoint: each run ends `failed`, which is what an
agent without a model gets; this test is about what reaches the store, not about scores).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from bench.tracking import schema
from tests.bench.tracking.test_postgres import LOOP, helper_module

AGENTS, SCRIPTS, STEPS = 8, 4, 300


def agent_command() -> str:
    """What the agent types: write helper.py and run_1..4.py, start the four at once, wait for them."""
    files = {"helper.py": helper_module(), **{f"run_{k}.py": LOOP for k in range(1, SCRIPTS + 1)}}
    payload = base64.b64encode(json.dumps(files).encode()).decode()
    write = (
        'python -c "import base64, json, pathlib; '
        f"[pathlib.Path(n).write_text(t) for n, t in json.loads(base64.b64decode('{payload}')).items()]\""
    )
    start = f"for k in $(seq 1 {SCRIPTS}); do python run_$k.py {STEPS} $k > run_$k.log 2>&1 & done"
    return f"{write}\n{start}\nwait\n"


@pytest.mark.slow
def test_eight_bench_runs_at_once_through_the_server_record_every_value_once(mlflow_server, generated_t6, tmp_path):
    from mlflow.tracking import MlflowClient

    from bench.tasks import data

    data.prepare(generated_t6, progress=False)  # shared by the eight, as in a campaign
    campaign = f"scale-runs-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow_server.url, "BENCH_WORKSPACES_DIR": str(tmp_path / "ws")}
    bench = [sys.executable, "-c", "import sys; from bench.cli import main; sys.exit(main(sys.argv[1:]))"]
    common = ["run", "--agent", "command", "--agent-command", agent_command(), "--task", "t6", "--budget", "3m"]
    common += ["--grace", "5", "--campaign", campaign, "--quiet", "--no-summary"]
    t0 = time.time()
    procs = [
        subprocess.Popen([*bench, *common, "--first-repeat", str(r)], env=env, stdout=subprocess.PIPE, text=True)
        for r in range(1, AGENTS + 1)
    ]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    seconds = time.time() - t0

    client = MlflowClient(mlflow_server.url)
    exp = client.get_experiment_by_name(campaign)
    agents = client.search_runs([exp.experiment_id], f"tags.`{schema.KIND}` = 'agent'", max_results=100)
    assert sorted(int(r.data.tags[schema.REPEAT]) for r in agents) == list(range(1, AGENTS + 1)), outs
    assert all(r.info.status != "RUNNING" and r.data.tags.get(schema.STATUS) for r in agents)
    scripts = client.search_runs([exp.experiment_id], f"tags.`{schema.KIND}` = 'script'", max_results=1000)
    assert len(scripts) == AGENTS * SCRIPTS, [out[-800:] for out in outs]
    counted = 0
    for run in scripts:
        salt = int(run.data.tags[schema.SCRIPT][4:-3])
        for key in ("loss", "lr"):
            history = client.get_metric_history(run.info.run_id, key)
            assert sorted(m.step for m in history) == list(range(1, STEPS + 1)), (run.data.tags, key, len(history))
            counted += len(history)
        loss = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "loss")}
        assert all(loss[s] == 1.0 / s + salt * 1e-6 for s in range(1, STEPS + 1))  # the traced, exact values
    assert counted == AGENTS * SCRIPTS * STEPS * 2  # 19,200: every value the 32 scripts logged, once
    print(f"\n{AGENTS} bench runs x {SCRIPTS} scripts x {STEPS} steps: {counted} values once, {seconds:.0f} s")
