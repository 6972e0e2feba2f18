"""The spool as a weapon against the harness (issue 29, deliverable 2 and the spool cases of deliverable 1), end to end.

Before: a FIFO named like a spool file blocked the harness forever in ``open()`` (SIGTERM did nothing, ``--resume``
hung too); a directory with that name, or one spool line of 100,000 ``[``, crashed it: no ``result.json``, the
MLflow run left RUNNING, a resume failed the same way, and a campaign called it an infrastructure failure. A tail
file that was a link to a host file was uploaded as ``stdout_tail.txt``; script runs made only from forged events
were not flagged. Now the run ends (disqualified when the agent planted links out of the workspace: rule 5):
``result.json`` written, every MLflow run closed, the agent's act named (in ``result.json`` and flagged audit
findings), the honest part scored. Each run is made in a thread with a deadline, so that a regression fails here
instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import mlflow
import pytest

from bench.paths import mlruns_dir
from bench.pipeline import collect, state
from bench.result import RunResult
from bench.sandbox.bwrap import probe
from bench.tracking import schema, store
from tests.bench.adversary import HONEST, PeakRSS, _run
from tests.bench.test_resume_limits import unfinished_run

SECRET = "SECRET-host-shadow-7f3a9c"

# A FIFO, a directory and a socket-free link named like spool files; a forged spool (a start with no process
# behind it: a ghost) whose second line is a parser bomb, then a metric and an end; its tail a FIFO; a second
# forged spool whose tail is a link to a host file. Then the honest one-epoch run, which must still score.
SABOTAGE = r"""
mkfifo .bench/spool/1-1.jsonl
mkdir .bench/spool/2-2.jsonl
ln -s {secret_file} .bench/spool/3-3.jsonl
python - <<'EOF'
import json, os, time
t = time.time()
def spool(name, lines):
    with open(f".bench/spool/{{name}}", "w") as f:
        f.write("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
start = {{"ev": "start", "t": t, "pid": os.getpid(), "script": "ghost.py", "argv": ["ghost.py"]}}
metric = {{"ev": "metrics", "t": t, "step": 1, "metrics": {{"after_bomb": 1.0}}}}
end = {{"ev": "end", "t": t + 1, "status": "FINISHED"}}
spool("4-4.jsonl", [start, "[" * 100_000, metric, end])
spool("5-5.jsonl", [{{**start, "script": "ghost2.py"}}, end])
EOF
mkfifo .bench/spool/4-4.jsonl.tail
ln -s {secret_file} .bench/spool/5-5.jsonl.tail
"""


def _in_thread(fn, deadline_s: float):
    """``fn()`` in a thread; its value, or a failure naming the hang (a blocked open() never returns)."""
    out: dict = {}

    def go() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # reported below
            out["error"] = e

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(deadline_s)
    assert not thread.is_alive(), f"the harness did not end within {deadline_s} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


def _runs(campaign: str) -> list:
    store.client()
    experiment = mlflow.get_experiment_by_name(campaign)
    return mlflow.search_runs([experiment.experiment_id], output_format="list")


def _store_holds(marker: str) -> list[str]:
    """Files of the MLflow store (database and artifacts) whose bytes contain ``marker``."""
    hits = []
    for path in mlruns_dir().rglob("*"):
        if path.is_file() and not path.is_symlink() and marker.encode() in path.read_bytes():
            hits.append(str(path))
    return hits


def _assert_sabotage_named(result: RunResult) -> None:
    refused = result.scripts["relay"]["refused_files"]
    named = {Path(e["path"]).name: e["what"] for e in refused["examples"]}
    assert named == {
        "1-1.jsonl": "not-regular",  # the FIFO
        "2-2.jsonl": "not-regular",  # the directory
        "3-3.jsonl": "link",
        "4-4.jsonl.tail": "not-regular",
        "5-5.jsonl.tail": "link",
    }, refused
    assert result.scripts["relay"]["lines_dropped"].get("too-deep") == 1
    ghost = next(s for s in result.scripts["scripts"] if s["script"] == "ghost.py")
    assert ghost["status"] == "FINISHED" and ghost["values"] == 1  # read past the bomb to its end
    flags = [v for v in result.audit.violations if v.rule == 7 and v.verdict == "flag"]
    reasons = " | ".join(v.reason for v in flags)
    assert "tampered with the tracer's spool" in reasons and "5 file(s)" in reasons, reasons
    assert "ghost.py" in reasons and "ghost2.py" in reasons and "run_1.py" not in reasons, reasons


@pytest.mark.slow
@pytest.mark.skipif(probe() is not None, reason=f"no usable sandbox here: {probe()}")
def test_a_fifo_a_directory_links_and_a_parser_bomb_in_the_spool_are_named_and_the_run_ends(guard, tmp_path):
    secret_file = tmp_path / "shadow"
    secret_file.write_text(f"root:{SECRET}:19000:0:99999:7:::\n")
    command = SABOTAGE.format(secret_file=secret_file) + HONEST
    started = time.monotonic()
    with PeakRSS() as mem:
        result = _in_thread(lambda: _run(guard.task, command, budget_s=90), deadline_s=400)
    print(
        f"sabotaged run: {time.monotonic() - started:.0f} s, harness RSS {mem.base >> 20} -> peak {mem.peak >> 20} MiB"
    )
    assert mem.peak - mem.base < 400 << 20
    assert Path(result.result_file).is_file()
    # the links out of the workspace break rule 5 (disqualified, named); the honest part was still scored
    assert result.status == "disqualified" and "links outside the workspace" in result.reason, result.reason
    best = next(e for e in result.evaluations if e.candidate == "best")
    assert best.official.ok and best.script == "run_1.py", best.official.why_not
    _assert_sabotage_named(result)
    runs = _runs(result.run.campaign)
    assert runs and all(r.info.status != "RUNNING" for r in runs), [(r.info.run_name, r.info.status) for r in runs]
    scripts = [r for r in runs if r.data.tags.get(schema.KIND) == schema.KIND_SCRIPT]
    honest = next(r for r in scripts if r.data.tags.get(schema.SCRIPT) == "run_1.py")
    assert honest.info.status == "FINISHED"
    client = mlflow.tracking.MlflowClient()
    assert "stdout_tail.txt" in [a.path for a in client.list_artifacts(honest.info.run_id)]  # the real tail is kept
    assert _store_holds(SECRET) == [] and SECRET not in Path(result.result_file).read_text()
    guard.check(result, "no-marker-planted")


def _sabotage_spool(run_dir: Path) -> None:
    """The spool cases planted into a run's spool after its agent ended (as a detached process could)."""
    spool = run_dir / "workspace" / ".bench" / "spool"
    spool.mkdir(parents=True, exist_ok=True)
    os.mkfifo(spool / "1-1.jsonl")
    (spool / "2-2.jsonl").mkdir()
    start = {"ev": "start", "t": time.time(), "pid": 7, "script": "ghost.py", "argv": ["ghost.py"]}
    (spool / "4-4.jsonl").write_text(json.dumps(start) + "\n" + "[" * 100_000 + "\n")


@pytest.mark.slow  # a whole benchmark run of a hostile agent
def test_resume_and_bench_record_finish_a_sabotaged_run_whose_harness_died(generated_t6):
    from bench import rundir
    from bench.campaign import job
    from bench.cli import main
    from bench.resume import resume_run

    run_dir = unfinished_run(generated_t6, grace_s=1.0)  # run.json keeps 1.0: the param is recorded alike
    _sabotage_spool(run_dir)
    result = _in_thread(lambda: resume_run(run_dir, console=False), deadline_s=240)
    assert Path(result.result_file).is_file() and "finished by bench run --resume" in result.reason
    assert result.tracking_error is None  # recorded in MLflow too
    refused = result.scripts["relay"]["refused_files"]["counts"]
    assert refused == {"not-regular": 2}, refused
    assert "the agent left 2 file(s) in the tracer's spool that the harness refused to read" in result.reason
    assert result.scripts["relay"]["lines_dropped"] == {"too-deep": 1}
    assert any(v.rule == 7 and "ghost.py" in v.reason for v in result.audit.violations)
    assert all(r.info.status != "RUNNING" for r in _runs(result.run.campaign))
    # a campaign sees the run as final: the agent's act is its outcome, never an infrastructure failure
    seen = rundir.inspect(run_dir)
    assert seen.state == "final" and job.infra_failure(seen.result) is None

    Path(result.result_file).unlink()  # the harness died again before its result: bench record finishes it
    st = state.read(run_dir)
    gone = subprocess.Popen(["true"])
    gone.wait()
    st.harness_pid, st.harness_started = gone.pid, 0.0
    state.write(run_dir, st)
    code = _in_thread(lambda: main(["record", str(run_dir)]), deadline_s=240)
    assert code == 0 and RunResult.load(run_dir).scripts["relay"]["refused_files"]["total"] == 2
    assert all(r.info.status != "RUNNING" for r in _runs(result.run.campaign))


@pytest.mark.slow  # a whole benchmark run of a hostile agent
def test_a_step_that_crashes_anyway_records_an_honest_failed_run(generated_t6, monkeypatch):
    """Belt and braces: whatever makes a step raise (here the collect step, forced), the run is recorded as failed
    with the step and its error named in the reason and the audit, result.json written, every MLflow run closed
    (a forged script run with no end event too), and a campaign treats it as final."""
    from bench import rundir
    from bench.campaign import job
    from bench.pipeline import guard as guard_mod
    from bench.runner import RunSpec, run

    def crash(*args, **kwargs):
        raise IsADirectoryError("[Errno 21] Is a directory: 'checkpoints/best.pt'")

    monkeypatch.setattr(collect, "collect", crash)
    forged = (
        'python -c \'import json,os,time; open(".bench/spool/9-9.jsonl","w").write(json.dumps('
        '{"ev":"start","t":time.time(),"pid":9,"script":"open.py"})+"\\n")\''
    )
    spec = RunSpec(generated_t6, "command", campaign=f"test-crash-{os.getpid()}-{time.time_ns()}", budget_s=30)
    spec.options, spec.sandbox, spec.grace_s, spec.console = {"command": forged}, False, 1, False
    result = _in_thread(lambda: run(spec), deadline_s=240)
    assert Path(result.result_file).is_file()
    assert result.status == "failed"
    assert "the collect step failed (IsADirectoryError" in result.reason, result.reason
    (crashed,) = [v for v in result.audit.violations if v.rule == 0]
    assert crashed.verdict == "flag" and "collect step failed" in crashed.reason
    assert (Path(result.run_dir) / guard_mod.LOG).read_text().count("Traceback") == 1
    runs = _runs(result.run.campaign)
    statuses = {r.data.tags.get(schema.SCRIPT) or r.data.tags.get(schema.KIND): r.info.status for r in runs}
    assert statuses == {"agent": "FAILED", "open.py": "KILLED"}, statuses  # closed, never RUNNING
    assert RunResult.load(result.run_dir).status == "failed"
    seen = rundir.inspect(Path(result.run_dir))
    assert seen.state == "final" and job.infra_failure(seen.result) is None


@pytest.mark.slow  # a whole benchmark run of a hostile agent
def test_a_resume_that_cannot_rebuild_part_of_the_run_still_records_it_and_says_what(generated_t6, monkeypatch):
    """What a resume rebuilds from the run directory before finishing (the agent's events, the arrivals, the
    launches) raising is contained too: here the agent's events (forced: events.jsonl is read with a bounded depth
    since b992947, and a line nested 100,000 deep raised RecursionError out of the resume before it), and the run is
    still finished, the reason naming what could not be rebuilt."""
    from bench import resume

    def crash(ws):
        raise RecursionError("maximum recursion depth exceeded while decoding a JSON array")

    monkeypatch.setattr(resume, "_agent_events", crash)
    run_dir = unfinished_run(generated_t6, grace_s=1.0)  # run.json keeps 1.0: the param is recorded alike
    result = _in_thread(lambda: resume.resume_run(run_dir, console=False), deadline_s=240)
    assert Path(result.result_file).is_file() and result.tracking_error is None
    assert "the agent's events could not be rebuilt (RecursionError" in result.reason, result.reason
    assert all(r.info.status != "RUNNING" for r in _runs(result.run.campaign))


@pytest.mark.slow  # a whole benchmark run of a hostile agent
def test_a_record_step_that_crashes_leaves_result_json_and_no_run_open(generated_t6, monkeypatch):
    """The record step raising something other than a tracking outage (forced here): result.json still holds the
    run (with the error as its tracking error, so ``bench record`` is the way on) and the agent run is closed."""
    from bench.pipeline import record
    from bench.runner import RunSpec, run

    def crash(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded while decoding a JSON array")

    monkeypatch.setattr(record, "record", crash)
    spec = RunSpec(generated_t6, "command", campaign=f"test-rec-{os.getpid()}-{time.time_ns()}", budget_s=30)
    spec.options, spec.sandbox, spec.grace_s, spec.console = {"command": "true"}, False, 1, False
    result = _in_thread(lambda: run(spec), deadline_s=240)
    saved = RunResult.load(result.run_dir)
    assert saved.status == "failed" and "record step failed" in saved.tracking_error
    runs = _runs(result.run.campaign)
    assert runs and all(r.info.status != "RUNNING" for r in runs), [(r.info.run_name, r.info.status) for r in runs]
