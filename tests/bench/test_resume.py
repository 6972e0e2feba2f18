"""A harness that dies mid-run: ``bench run --resume`` finishes the run, and nothing the scripts logged is lost.

The task is the real T6 folder on generated data (conftest.generated_t6). The first test is the user's case:
the ``bench`` process itself is SIGKILLed while an unsandboxed agent's script is logging metrics.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from bench.cli import main
from bench.pipeline import state, workspace
from bench.processes import TOKEN_VAR
from bench.result import RunResult
from bench.runner import RunSpec, run
from bench.tracking import schema, store
from tests.lazy import lazy

pytestmark = pytest.mark.slow  # every test makes a whole benchmark run to kill, resume or record: make test-all

mlflow = lazy("mlflow")  # imported at its first use (tests/lazy.py)

ROOT = Path(__file__).resolve().parents[2]

LOGGER = r"""
cat > run_1.py <<'EOF'
import time
from prepare import log_metrics, save_checkpoint
from train import CONFIG, build_model
if __name__ == "__main__":
    model = build_model(CONFIG)
    save_checkpoint(model, CONFIG, 0.9)
    for step in range(1_000_000):  # logs until something ends it
        log_metrics(step, loss=1.0 / (step + 1), lr=1e-3 * (1 + step % 7))
        time.sleep(0.004)
EOF
python run_1.py
"""


def campaign() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


def runs_of(name: str):
    store.client()  # the fluent API on the harness's store (the harness ran in another process)
    exp = mlflow.get_experiment_by_name(name)
    return mlflow.search_runs([exp.experiment_id]) if exp is not None else None


def spool_values(workspace: Path) -> int:
    """Metric values the script logged through the task helper, counted from the spool files themselves (the
    printed echo the output tee adds, ``"src": "stdout"``, repeats them and is not counted)."""
    n = 0
    for spool in (workspace / ".bench" / "spool").glob("*.jsonl"):
        for line in spool.read_bytes().splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue  # a torn last line
            if ev.get("ev") == "metrics" and ev.get("src") != "stdout":
                n += sum(1 for v in ev["metrics"].values() if math.isfinite(v))
    return n


def mlflow_values(name: str, keys=("loss", "lr")) -> int:
    runs = runs_of(name)
    client = mlflow.tracking.MlflowClient()  # after runs_of: on the harness's store
    scripts = runs[runs[f"tags.{schema.KIND}"] == schema.KIND_SCRIPT]
    return sum(len(client.get_metric_history(r, k)) for r in scripts["run_id"] for k in keys)


def with_token(token: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get(TOKEN_VAR) == token:
                out.append(p)
        except psutil.Error:
            continue
    return out


def wait_for(check, timeout: float, what: str, harness: subprocess.Popen, log: Path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        if harness.poll() is not None:
            pytest.fail(f"the harness exited ({harness.returncode}) before {what}:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    harness.kill()
    pytest.fail(f"no {what} after {timeout} s:\n{log.read_text()[-3000:]}")


@pytest.mark.slow
def test_sigkilled_harness_is_finished_by_resume_and_loses_no_metric_value(generated_t6, tmp_path, capsys):
    name, workspaces = campaign(), tmp_path / "workspaces"
    env = {**os.environ, "BENCH_WORKSPACES_DIR": str(workspaces), "PYTHONPATH": str(ROOT)}
    argv = ["run", "--agent", "command", "--task", "t6", "--agent-command", LOGGER, "--budget", "60"]
    argv += ["--grace", "2", "--campaign", name, "--unsandboxed", "--quiet"]
    log = tmp_path / "harness.log"
    with open(log, "wb") as out:
        harness = subprocess.Popen([sys.executable, "-m", "bench.cli", *argv], env=env, stdout=out, stderr=out)
    try:
        run_dir = wait_for(lambda: next(workspaces.glob(f"{name}/t6-command-r1-*/run.json"), None), 60, "run.json",
                           harness, log).parent  # fmt: skip
        ws = run_dir / "workspace"

        def relayed_some() -> bool:
            saved = json.loads((run_dir / "relay.json").read_text())
            relayed = sum(s["metrics"] for s in saved["scripts"].values())
            return relayed > 0 and any((ws / "checkpoints").iterdir()) and spool_values(ws) >= 600

        wait_for(relayed_some, 60, "relayed metrics and a checkpoint", harness, log)
        os.kill(harness.pid, signal.SIGKILL)  # the harness only: its agent runs in a session of its own
    finally:
        harness.kill()
        harness.wait()
    token = state.read(run_dir).token
    assert with_token(token), "an unsandboxed agent outlives its killed harness"
    assert not (run_dir / "result.json").exists()
    time.sleep(1)  # the orphaned script goes on logging
    before = mlflow_values(name)
    runs = runs_of(name)
    assert (runs["status"] == "RUNNING").sum() == 2  # the agent run and the script run, left open by the kill

    capsys.readouterr()
    assert main(["run", "--resume", str(run_dir), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "resuming" in out and "ended" in out, out

    assert not with_token(token)  # the script, its tee and the agent's shell were ended
    logged, recorded = spool_values(ws), mlflow_values(name)
    assert recorded == logged and before < logged  # every value the script logged, each once
    runs = runs_of(name)
    assert not (runs["status"] == "RUNNING").any(), runs[["tags.mlflow.runName", "status"]]
    result = RunResult.load(run_dir)
    assert result.status == "success", result.reason  # its checkpoint was scored
    assert "the harness died at ~" in result.reason and "bench run --resume" in result.reason
    assert result.interrupted and result.mlflow_run_id and not result.timed_out
    agent = runs[runs[f"tags.{schema.KIND}"] == schema.KIND_AGENT].iloc[0]
    assert agent["run_id"] == state.read(run_dir).mlflow_run_id  # the live run was completed, not a second one
    assert agent[f"tags.{schema.STATUS}"] == "success" and "bench run --resume" in agent[f"tags.{schema.REASON}"]
    # the agent lost the rest of its 60 s budget with the harness: marked, and left out of comparisons with the paper
    assert "cut-short" in agent[f"tags.{schema.DEVIATIONS}"].split(",")
    assert agent[f"tags.{schema.PROTOCOL}"] == schema.PROTOCOL_NONSTANDARD
    script = runs[runs[f"tags.{schema.KIND}"] == schema.KIND_SCRIPT]
    assert list(script["status"]) == ["KILLED"]
    noted = [json.loads(line) for line in (run_dir / "evidence" / "processes.jsonl").read_text().splitlines()]
    assert any(n["phase"] == "resume" and n["processes"] for n in noted)  # noted before they were ended

    assert main(["run", "--resume", str(run_dir)]) == 0  # a second resume: finished, nothing redone
    assert "finished runs are never redone" in capsys.readouterr().out
    assert RunResult.load(run_dir).to_dict() == result.to_dict()
    print(f"metric values: spool {logged}, in MLflow at the kill {before}, after the resume {recorded}")


def quick_run(task, name: str, repeat: int = 1) -> RunResult:
    spec = RunSpec(task, "command", campaign=name, repeat=repeat, budget_s=30, grace_s=1, console=False)
    spec.options = {"command": "true"}
    spec.sandbox = False
    return run(spec)


def dead_harness(run_dir: Path, while_agent_ran: bool = False) -> None:
    """As if the harness that wrote run.json had died: its pid names no process any more. ``while_agent_ran``: it
    died before the watch ended, so run.json does not say how the agent's time ended."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    st = state.read(run_dir)
    st.harness_pid, st.harness_started = gone.pid, 0.0
    if while_agent_ran:
        st.watched = None
    state.write(run_dir, st)


def test_a_harness_that_died_after_the_agents_time_did_not_cut_it_short(generated_t6, capsys):
    """The harness dies while evaluating (the agent, `true`, had ended on its own): the resumed run is the agent's
    own outcome with its own wall time, not `interrupted`, and carries no cut-short deviation."""
    from bench.pipeline.record import deviations

    done = quick_run(generated_t6, campaign())
    Path(done.result_file).unlink()
    dead_harness(Path(done.run_dir))
    assert state.read(Path(done.run_dir)).watched["interrupted"] is False  # what the live watch saw
    assert main(["run", "--resume", str(done.run_dir), "--quiet"]) == 1  # no checkpoint: failed, as before
    resumed = RunResult.load(done.run_dir)
    assert resumed.status == "failed" and not resumed.interrupted, resumed.reason
    assert resumed.wall_time_s == done.wall_time_s and resumed.agent_exit_code == 0
    assert "the harness died after the agent's time; finished by bench run --resume" in resumed.reason
    assert [d.kind for d in deviations(resumed, generated_t6.budget_s)] == [
        d.kind for d in deviations(done, generated_t6.budget_s)
    ]


def test_resume_of_a_finished_or_live_run_does_nothing(generated_t6, capsys):
    done = quick_run(generated_t6, campaign())
    before = done.result_file.read_bytes()
    capsys.readouterr()
    assert main(["run", "--resume", done.run_dir]) == 0
    assert "already finished (failed); finished runs are never redone" in capsys.readouterr().out
    assert done.result_file.read_bytes() == before

    live = Path(done.run_dir)  # a run whose harness is alive (here: this test's process) is refused
    done.result_file.unlink()
    st = state.read(live)
    st.harness_pid, st.harness_started = os.getpid(), psutil.Process().create_time()
    state.write(live, st)
    assert main(["run", "--resume", str(live)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "still being run by bench" in err
    assert not done.result_file.exists()


def test_campaign_resume_finds_only_the_unfinished_run_then_skips_finished_repeats(generated_t6, capsys):
    name = campaign()
    finished = quick_run(generated_t6, name, repeat=1)
    unfinished = quick_run(generated_t6, name, repeat=2)
    Path(unfinished.result_file).unlink()
    dead_harness(Path(unfinished.run_dir), while_agent_ran=True)
    kept = finished.result_file.read_bytes()
    capsys.readouterr()

    assert main(["run", "--resume", name, "--quiet"]) == 1  # the resumed run has no checkpoint: not a success
    out = capsys.readouterr().out
    assert f"campaign {name}: 1 unfinished run(s)" in out and Path(unfinished.run_dir).name in out
    assert finished.result_file.read_bytes() == kept
    resumed = RunResult.load(unfinished.run_dir)
    assert resumed.status == "interrupted" and resumed.reason.startswith("the harness died at ~")

    argv = ["run", "--resume", name, "--agent", "command", "--task", "t6", "--repeats", "3", "--agent-command"]
    assert main([*argv, "true", "--budget", "30", "--grace", "1", "--unsandboxed", "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "0 unfinished run(s)" in out and "r1: finished" in out and "r2: finished" in out
    assert sorted(r.run.repeat for r in map(RunResult.load, Path(finished.run_dir).parent.glob("*/result.json"))) == [
        1,
        2,
        3,
    ]


def test_resume_with_the_store_unreachable_writes_the_result_and_says_how_to_record(generated_t6, monkeypatch, capsys):
    unfinished = quick_run(generated_t6, campaign())
    Path(unfinished.result_file).unlink()
    dead_harness(Path(unfinished.run_dir), while_agent_ran=True)
    with monkeypatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # nothing listens on the discard port
        patch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # refused at once, not after MLflow's backoff
        store._client.cache_clear()
        capsys.readouterr()
        assert main(["run", "--resume", unfinished.run_dir, "--quiet"]) == 1
    store._client.cache_clear()
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and f"bench record {unfinished.run_dir}" in captured.out
    assert RunResult.load(unfinished.run_dir).status == "interrupted"


class HarnessDied(BaseException):
    """The harness's death between the watch and the end of the pipeline (nothing in the harness catches it)."""


def test_bench_record_without_result_json_finishes_the_run_from_its_spool(generated_t6, monkeypatch, capsys):
    """The harness dies after its agent's script logged and checkpointed, before result.json: `bench record` finishes
    the run (the spool's unrelayed tail, collect, evaluate, audit, result.json) into the MLflow runs it left open."""
    import bench.runner

    short = LOGGER.replace("range(1_000_000)", "range(300)").replace("  # logs until something ends it", "")
    spec = RunSpec(generated_t6, "command", campaign=campaign(), budget_s=60, grace_s=1, console=False)
    spec.options, spec.sandbox = {"command": short}, False

    def died(run, ended):  # runner.finish's place
        run.relay.stop()  # the harness's relay thread dies with it
        raise HarnessDied

    with monkeypatch.context() as patch, pytest.raises(HarnessDied):
        patch.setattr(bench.runner, "finish", died)
        run(spec)
    (run_dir,) = workspace.campaign_dir(spec.campaign).glob("t6-command-r1-*")
    assert (run_dir / "run.json").is_file() and (run_dir / "relay.json").is_file()
    assert not (run_dir / "result.json").exists()
    assert (runs_of(spec.campaign)["status"] == "RUNNING").any()  # the agent run the harness opened
    dead_harness(run_dir)  # the harness was this test's process: as if `bench` had died

    capsys.readouterr()
    assert main(["record", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert f"bench record: {run_dir} has no result.json" in out and "from its spool and relay state" in out
    result = RunResult.load(run_dir)
    assert result.status == "success", result.reason  # its checkpoint, written before the harness died, scored
    assert result.reason.endswith("; finished by bench record"), result.reason
    assert result.mlflow_run_id == state.read(run_dir).mlflow_run_id  # the run the harness opened, not a new one
    runs = runs_of(spec.campaign)
    assert not (runs["status"] == "RUNNING").any(), runs[["tags.mlflow.runName", "status"]]
    agent = runs[runs[f"tags.{schema.KIND}"] == schema.KIND_AGENT]
    assert list(agent["run_id"]) == [result.mlflow_run_id] and list(agent[f"tags.{schema.STATUS}"]) == ["success"]
    assert mlflow_values(spec.campaign) == spool_values(run_dir / "workspace") == 600  # 300 steps x (loss, lr)

    assert main(["record", str(run_dir)]) == 0  # now an ordinary record of a finished run


def test_bench_record_without_a_run_or_with_a_live_harness_says_so_in_one_line(generated_t6, tmp_path, capsys):
    run_dir = tmp_path / "t6-command-r1-x"
    run_dir.mkdir()
    assert main(["record", str(run_dir)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no result.json and no run.json" in err

    live = Path(quick_run(generated_t6, campaign()).run_dir)
    (live / "result.json").unlink()
    st = state.read(live)  # a run whose harness is alive (here: this test's process)
    st.harness_pid, st.harness_started = os.getpid(), psutil.Process().create_time()
    state.write(live, st)
    capsys.readouterr()
    assert main(["record", str(live)]) == 1
    captured = capsys.readouterr()
    assert captured.err.strip().count("\n") == 0 and "still being run by bench" in captured.err
    assert "finishing" not in captured.out and not (live / "result.json").exists()


def test_run_json_errors_are_one_clear_line(tmp_path, monkeypatch):
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(state.RunStateError, match="cannot be read"):
        state.read(tmp_path)
    (tmp_path / "run.json").write_text(json.dumps({"task": "t6", "version": 2}))
    with pytest.raises(state.RunStateError, match="lacks agent"):
        state.read(tmp_path)
    described = RunSpec("t6", "command", campaign="c", budget_s=60.0, grace_s=2.0, device="cpu")
    good = state.RunState(described, "tok", 1, 0.0, [], [], None, [], "/d")
    written = json.loads(state.write(tmp_path, good).read_text())
    for bad in ({"wall_time_s": 3.0}, [3.0, 0, False, False]):  # a hand edit of how the agent's time ended
        (tmp_path / "run.json").write_text(json.dumps({**written, "watched": bad}))
        with pytest.raises(state.RunStateError, match="mistypes a field"):
            state.read(tmp_path)

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(state.RunStateError) as e:
        state.write(tmp_path, good)
    assert "No space left on device" in str(e.value) and f"free space in {tmp_path}" in str(e.value)
    assert f"bench run --resume {tmp_path}" in str(e.value)


def test_result_json_on_a_full_disk_is_one_line_saying_what_to_do(generated_t6, monkeypatch, capsys):
    """Writing result.json fails (ENOSPC): `bench run` prints one line, no traceback; the run can be resumed."""

    def full(self, path=None):
        raise OSError(28, "No space left on device")

    argv = ["run", "--agent", "command", "--task", "t6", "--agent-command", "true", "--budget", "30"]
    with monkeypatch.context() as patch:
        patch.setattr(RunResult, "write", full)
        assert main([*argv, "--grace", "1", "--campaign", campaign(), "--unsandboxed", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [line for line in err.splitlines() if line.startswith("bench:")]  # (MLflow may log its own lines)
    assert "No space left on device" in line and "then: bench run --resume" in line
    run_dir = Path(line.rsplit("bench run --resume ", 1)[1])
    assert not list(run_dir.glob("*.tmp")) and not (run_dir / "result.json").exists()
    dead_harness(run_dir)  # the harness was this test's process: as if `bench` had exited
    assert main(["run", "--resume", str(run_dir), "--quiet"]) == 1  # resumed once the disk has room again
    resumed = RunResult.load(run_dir)  # the disk failed after the agent's time: its own outcome, not interrupted
    assert resumed.status == "failed" and not resumed.interrupted, resumed.reason


def test_a_replayed_spool_after_a_kill_duplicates_no_metric_value(tmp_path):
    """At least once: a harness killed after a batch reached MLflow but before relay.json said so replays the
    batch. MLflow's SQL store drops rows identical in (key, value, timestamp, step); checked here, not assumed."""
    from bench.tracking.relay import Relay
    from bench.tracking.writer import MlflowWriter

    name = campaign()
    writer = MlflowWriter(name)
    parent = writer.create_run("agent", {schema.KIND: schema.KIND_AGENT})
    spool = tmp_path / "ws" / ".bench" / "spool"
    spool.mkdir(parents=True)
    t0 = time.time()
    lines = [{"ev": "start", "t": t0, "pid": 1, "script": "run_1.py", "argv": ["run_1.py"], "source": ""}]
    lines += [{"ev": "metrics", "t": t0 + i / 1000, "step": i, "metrics": {"loss": 1 / (i + 1)}} for i in range(500)]
    (spool / "1-1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    state_file = tmp_path / "relay.json"

    first = Relay(writer, parent, spool, {}, state_file=state_file)
    first.poll()  # creates the script run (saved at once), then logs the batch
    after_create = json.loads(state_file.read_text())
    after_create["scripts"]["1-1.jsonl"]["offset"] = len(json.dumps(lines[0])) + 1  # as if killed before the save
    after_create["scripts"]["1-1.jsonl"]["metrics"] = 0
    after_create["scripts"]["1-1.jsonl"]["recent"] = []  # nor what the relay remembers of the batch
    state_file.write_text(json.dumps(after_create))

    second = Relay(writer, parent, spool, {}, state_file=state_file)
    second.finalize()  # replays all 500 values into the same run
    assert second.scripts["1-1.jsonl"].metrics == 500  # sent to MLflow a second time
    runs = runs_of(name)
    scripts = runs[runs[f"tags.{schema.KIND}"] == schema.KIND_SCRIPT]
    assert len(scripts) == 1 and list(scripts["status"]) == ["KILLED"]
    history = mlflow.tracking.MlflowClient().get_metric_history(scripts["run_id"].iloc[0], "loss")
    assert len(history) == 500
