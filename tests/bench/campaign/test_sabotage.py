"""A campaign does not retry the agent's own sabotage (issue 29): a run whose agent left a FIFO, a directory and a
parser bomb in the tracer's spool used to hang or crash its job, which the campaign classed an infrastructure
failure, retried into the same crash and gave up, blaming the machine. Now the job ends with the run final (its
result.json written, the acts named) and the campaign's decision is ``final``, logged as the run's outcome."""

from __future__ import annotations

import json
import threading

import pytest

from bench import rundir
from bench.campaign import job, spec
from bench.campaign.retry import Attempts, last_events
from tests.bench.campaign.conftest import campaign_file

SABOTAGE = (
    "mkfifo .bench/spool/1-1.jsonl && mkdir .bench/spool/2-2.jsonl && "
    'python -c \'open(".bench/spool/3-3.jsonl", "w").write("[" * 100000 + chr(10))\''
)


@pytest.mark.slow  # a campaign of a whole benchmark run
def test_a_run_whose_agent_sabotaged_the_spool_is_final_and_never_retried(tasks, tmp_path):
    body = 'tasks = ["t6"]\nbudget = "30s"\ngrace = 2\nretries = 2\nsandbox = false\n[[agents]]\nname = "command"\n'
    path, _ = campaign_file(tmp_path, body + f"agent_command = {json.dumps(SABOTAGE)}\n")
    c = spec.load(path)
    (key,) = c.runs()
    out: dict = {}
    # job.execute is what a run's job process does (job_main: its CPU set and signals, then this; 0 if it returns a
    # result, 1 otherwise: an infrastructure failure)
    thread = threading.Thread(target=lambda: out.setdefault("result", job.execute(c, key, console=False)))
    thread.daemon = True
    thread.start()
    thread.join(240)
    assert not thread.is_alive(), "the run's job hung on the spool"
    assert out["result"] is not None  # job_main's exit 0: the run is final, not an infrastructure failure
    seen = rundir.inspect(c.run_dir(key))
    assert seen.state == "final" and seen.result.status == "failed" and job.infra_failure(seen.result) is None
    assert seen.result.scripts["relay"]["refused_files"]["counts"] == {"not-regular": 2}
    assert seen.result.scripts["relay"]["lines_dropped"] == {"too-deep": 1}
    attempts = Attempts(c)
    assert attempts.ended(key, "exit 0", 0) == "final" and not attempts.failures and not attempts.gave_up
    assert last_events(c)[key.run_id]["event"] == "final"
