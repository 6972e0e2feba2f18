"""The local executor: GPUs found without torch, CPUs split evenly, each run in its own bench process with its own
GPU and CPU set, and infrastructure failures retried (only those) while the other runs go on."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time

import pytest

from bench.campaign import local, spec
from bench.campaign.job import CPUS_VAR
from bench.cli import main
from bench.pipeline import state
from bench.result import RunResult
from bench.runspec import RunSpec
from bench.tracking import schema
from tests.bench.campaign.conftest import campaign_file
from tests.bench.campaign.test_kill_resume import agent_runs

SEES = 'echo "SEES CVD=${CUDA_VISIBLE_DEVICES-unset} CPUS=$(nproc)"'


def test_gpus_from_cuda_visible_devices_else_nvidia_smi_without_torch(tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        '#!/bin/sh\n[ "$1" = -L ] || exit 9\n'
        "echo 'GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-aaaa)'\necho 'GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-bbbb)'\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    assert local.visible_gpus({}, str(fake)) == ["0", "1"]
    assert local.visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}, str(fake)) == ["2", "3"]  # the user's choice wins
    assert local.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, str(fake)) == []
    assert local.visible_gpus({}, str(tmp_path / "absent")) == []  # no driver: a CPU-only machine


def test_cpus_are_split_evenly():
    assert local.split_cpus(list(range(8)), 2) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert local.split_cpus([4, 0, 1, 2, 3], 2) == [(0, 1, 2), (3, 4)]
    assert local.split_cpus([0, 1], 4) == [(0,), (1,), (0,), (1,)]  # fewer CPUs than GPUs: one each, shared


def test_slots_one_per_gpu_or_one_with_every_cpu(task_folders, tmp_path, monkeypatch):
    cpus = sorted(os.sched_getaffinity(0))
    path, _ = campaign_file(tmp_path, 'tasks = ["t6"]\ngpus = [0, "1"]\n[[agents]]\nname = "baseline"\n')
    slots = local.slots_for(spec.load(path))
    half = len(cpus) // 2 + len(cpus) % 2
    assert [s.gpu for s in slots] == ["0", "1"]
    if len(cpus) >= 2:
        assert slots[0].cpus == tuple(cpus[:half]) and slots[1].cpus == tuple(cpus[half:])
    assert slots[1].env() == {"CUDA_VISIBLE_DEVICES": "1", CPUS_VAR: ",".join(map(str, slots[1].cpus))}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    path, _ = campaign_file(tmp_path, 'tasks = ["t6"]\n[[agents]]\nname = "baseline"\n')
    (cpu_only,) = local.slots_for(spec.load(path))
    assert cpu_only.gpu is None and cpu_only.cpus == tuple(cpus) and "CUDA_VISIBLE_DEVICES" not in cpu_only.env()


@pytest.mark.slow
def test_each_run_sees_its_own_gpu_and_cpu_set(tasks, tmp_path, capsys):
    """Two GPUs named in the file (there are none here: nothing uses them but the environment), two runs at once."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs 2 CPUs to split")
    body = 'tasks = ["t6"]\nrepeats = 2\nbudget = "30s"\ngrace = 2\ngpus = [0, 1]\n[[agents]]\nname = "command"\n'
    path, name = campaign_file(tmp_path, body + f"agent_command = '{SEES}'\n")
    assert main(["campaign", "run", str(path)]) == 0  # both final (failed: no checkpoint is a result, not an error)
    half = len(cpus) // 2
    seen = set()
    for key in spec.load(path).runs():
        run_dir = tmp_path / "workspaces" / name / key.run_id
        assert RunResult.load(run_dir).status == "failed"
        line = next(x for x in (run_dir / "agent.log").read_text().splitlines() if x.startswith("SEES"))
        seen.add(line)
    assert seen == {f"SEES CVD=0 CPUS={half}", f"SEES CVD=1 CPUS={len(cpus) - half}"}
    out = capsys.readouterr()
    assert "2 run(s) to go on 2 slot(s): gpu 0, gpu 1" in out.out and "2/2 final (2 failed)" in out.out


@pytest.mark.slow
def test_an_infrastructure_failure_is_retried_then_given_up_and_the_others_go_on(task_folders, tmp_path, capsys):
    """T5's data cannot be fetched (its mirror file is gone): its run never gets a run directory, each attempt. T6's
    runs are not held up. Once the mirror is back, resume runs it; finished runs are not redone."""
    mirror = tmp_path / "mirror" / "covtype" / "covtype.data.gz"
    assert mirror.is_file()
    mirror.rename(tmp_path / "covtype.data.gz")
    body = 'tasks = ["t5", "t6"]\nbudget = "20s"\ngrace = 2\nretries = 1\n[[agents]]\nname = "command"\n'
    path, name = campaign_file(tmp_path, body + "agent_command = 'true'\n")
    c = spec.load(path)
    t5, t6 = c.runs()
    assert main(["campaign", "run", str(path)]) == 1
    out = capsys.readouterr()
    assert "1/2 final (1 failed); 1 given up" in out.out, out.out
    assert RunResult.load(c.run_dir(t6)).status == "failed" and not c.run_dir(t5).exists()
    events = [json.loads(x) for x in (c.folder / ".campaign" / "events.jsonl").read_text().splitlines()]
    mine = [e for e in events if e["run_id"] == t5.run_id]
    assert [e["event"] for e in mine] == ["retry", "gave-up"]  # retries = 1: two attempts
    assert "exit 1" in mine[-1]["why"] and "pending" in mine[-1]["why"]
    assert "the mirror has no" in (c.folder / ".campaign" / "logs" / f"{t5.run_id}.log").read_text()

    assert main(["campaign", "status", str(path)]) == 0
    table = capsys.readouterr().out
    assert f"{t5.run_id}" in table and "gave-up: exit 1" in table and "1/2 final" in table

    (tmp_path / "covtype.data.gz").rename(mirror)
    before = c.run_dir(t6).joinpath("result.json").read_bytes()
    assert main(["campaign", "resume", str(path)]) == 0
    assert RunResult.load(c.run_dir(t5)).status == "failed"
    assert c.run_dir(t6).joinpath("result.json").read_bytes() == before  # final: never redone
    assert "2/2 final (2 failed)" in capsys.readouterr().out


@pytest.mark.slow
def test_a_killed_harness_is_an_infrastructure_failure_its_retry_resumes_the_run(tasks, tmp_path, capsys):
    """The run's bench process is SIGKILLed mid-run (an out-of-memory kill): the campaign retries it, and the retry
    finishes that run (bench run --resume) instead of starting a second one."""
    body = 'tasks = ["t6"]\nbudget = "20s"\ngrace = 2\n[[agents]]\nname = "command"\nagent_command = "sleep 60"\n'
    path, name = campaign_file(tmp_path, body)
    c = spec.load(path)
    (key,) = c.runs()
    log = tmp_path / "campaign.log"
    with open(log, "wb") as out:
        argv = [sys.executable, "-m", "bench.cli", "campaign", "run", str(path)]
        proc = subprocess.Popen(argv, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 300
        while not (c.run_dir(key) / "run.json").is_file():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        os.kill(state.read(c.run_dir(key)).harness_pid, signal.SIGKILL)  # the run's bench process, not the campaign
        assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    result = RunResult.load(c.run_dir(key))
    assert result.status == "interrupted" and "finished by bench run --resume" in result.reason, result.reason
    events = [json.loads(x) for x in (c.folder / ".campaign" / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["retry", "final"]
    assert "killed by SIGKILL" in events[0]["why"] and "unfinished" in events[0]["why"]
    assert len(agent_runs(name)) == 1

    # the resumed run lost most of its 20 s to the kill: --redo-cut-short runs its cell again, the old run set aside
    assert "cut-short" in agent_runs(name)[f"tags.{schema.DEVIATIONS}"].iloc[0].split(",")
    capsys.readouterr()
    assert main(["campaign", "status", str(path)]) == 0
    hint = f"1 run(s) cut short by the harness ({key.run_id}): final, so resume leaves them as they are; bench "
    assert hint in capsys.readouterr().out
    assert main(["campaign", "resume", str(path)]) == 0  # a plain resume leaves it final, and says how to redo it
    assert f"[campaign] {hint}campaign resume {path} --redo-cut-short" in capsys.readouterr().out
    assert RunResult.load(c.run_dir(key)).status == "interrupted"
    assert main(["campaign", "resume", str(path), "--redo-cut-short"]) == 0
    again = RunResult.load(c.run_dir(key))
    assert again.status == "timeout" and not again.interrupted, again.reason  # `sleep 60` given its whole 20 s
    (old,) = (c.folder / ".campaign" / "retired").iterdir()
    assert RunResult.load(old).status == "interrupted"  # evidence and all, kept
    runs = agent_runs(name)  # one agent run per cell: the cut-short one deleted (restorable in MLflow)
    assert list(runs["run_id"]) == [again.mlflow_run_id]
    assert "cut-short" not in runs[f"tags.{schema.DEVIATIONS}"].iloc[0].split(",")
    capsys.readouterr()
    assert main(["campaign", "resume", str(path), "--redo-cut-short"]) == 0  # nothing cut short now: nothing redone
    assert "nothing to run: every run of the campaign is final" in capsys.readouterr().out
    assert RunResult.load(c.run_dir(key)).to_dict() == again.to_dict()


def test_a_run_whose_harness_still_lives_elsewhere_is_waited_for_then_finished_here(task_folders, tmp_path):
    """``kill -9`` of a campaign and ``resume`` at once: the killed run's harness can outlive the kill by a moment
    (CI caught it: the resume left that run to a harness that was dying and ended with 7/8 final). The executor
    waits for that harness, then starts the run's job (which resumes it) instead of leaving it unfinished."""
    import psutil

    path, _ = campaign_file(tmp_path, 'tasks = ["t6"]\n[[agents]]\nname = "command"\nagent_command = "true"\n')
    c = spec.load(path)
    (key,) = c.runs()
    harness = subprocess.Popen(["sleep", "2"])  # the harness of another process, about to end
    threading.Thread(target=harness.wait, daemon=True).start()  # reaped as its parent would
    run_dir = c.run_dir(key)
    run_dir.mkdir(parents=True)
    described = RunSpec(task="x", agent="x", campaign="x", budget_s=1, grace_s=1, device="cpu", sandbox=False)
    state.write(
        run_dir,
        state.RunState(
            spec=described, token="x", data_dir="x", agent_pid=harness.pid, started_at=time.time(),
            agent_argv=[], endpoints=[], mlflow_run_id=None, partial_notes=[], harness_pid=harness.pid,
            harness_started=psutil.Process(harness.pid).create_time(),
        ),
    )  # fmt: skip
    from bench import rundir

    assert rundir.inspect(run_dir).state == "running"
    started = tmp_path / "started"

    class Executor(local.LocalExecutor):
        def command(self, key):  # the job's process: says it started, then bad input (given up, not retried)
            return [sys.executable, "-c", f"open({str(started)!r}, 'w').write({key.run_id!r}); raise SystemExit(2)"]

    t0 = time.monotonic()
    outcome = Executor(c, [local.Slot(None, (0,))], poll_s=0.05, every_s=1000).run([key])
    assert started.read_text() == key.run_id and time.monotonic() - t0 >= 1.5  # after the other harness ended
    assert outcome.elsewhere == [] and key.run_id in outcome.gave_up and not outcome.stopped


def test_bad_input_found_by_a_run_is_given_up_at_once_other_exits_are_retried(task_folders, tmp_path):
    from bench.campaign.retry import Attempts

    path, _ = campaign_file(tmp_path, 'tasks = ["t6"]\nretries = 3\n[[agents]]\nname = "baseline"\n')
    c = spec.load(path)
    (key,) = c.runs()
    attempts = Attempts(c)
    assert attempts.ended(key, "exit 1", 1) == "retry"
    assert attempts.ended(key, "its bench process was killed by SIGKILL", -9) == "retry"
    assert attempts.ended(key, "exit 2", 2) == "gave-up" and "bad input" in attempts.gave_up[key.run_id]
