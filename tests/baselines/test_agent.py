"""The optuna agent: reading a trial's trace, pruner reports, the time-left rule, ending trials, and searches with
fake scripts.

The fake workspace's prepare.py has a standard-library ``log_metrics`` like the tasks' helper (it appends a metrics
event to the tracer's spool file, then prints the values unless ``QUIET``); its train.py logs validation scores
through it (no torch). The score is best at lr = 1e-3, so once the baseline trial has completed every other trial
is worse at epoch 2 and pruned.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import optuna
import psutil
import pytest

from baselines import agent
from baselines.pruning import GridReporter
from baselines.spool import TrialSpool, val_key
from baselines.timing import TimeKeeper, TrialRecord, measure_speed, quantile
from baselines.trial_process import PACKAGE_ROOT, trial_env, trial_token
from bench.processes import TOKEN_VAR
from bench.tasks import Direction
from bench.tracking import HOOK_DIR

FAKE_TRAIN = '''"""A fake T6 baseline: logs validation scores through prepare.log_metrics, no training."""
import math
import time

from prepare import log_metrics

CONFIG = {
    "seq_len": 336,
    "pred_len": 96,
    "kernel_size": 25,
    "lr": 1e-3,
    "batch_size": 128,
    "epochs": 5,
    "weight_decay": 0.0,
    "optimizer": "adam",
    "loss": "mse",
    "lr_schedule": "constant",
    "seed": 2021,
}

if __name__ == "__main__":
    print("fake DLinear", flush=True)
    gap = abs(math.log10(CONFIG["lr"]) + 3)  # 0 at the baseline's learning rate
    for epoch in range(1, CONFIG["epochs"] + 1):
        time.sleep(0.02)
        log_metrics(epoch * 64, loss=0.5, epoch=epoch)
        log_metrics(epoch * 64, val_mse=0.6 + gap + 0.5 / epoch, epoch=epoch, seconds=0.1)
'''

FAKE_PREPARE = '''TASK_ID = "t6"
METRIC = "mse"
DIRECTION = "min"
SEQ_LEN = 336
QUIET = False  # True: log_metrics prints nothing

import json
import os
import time


def log_metrics(step, **metrics):
    """Like the tasks' helper: append a metrics event to the tracer's spool file, then print the values."""
    values = {k: float(v) for k, v in metrics.items()}
    path = os.environ.get("BENCH_SPOOL_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"ev": "metrics", "t": time.time(), "step": int(step), "metrics": values}) + "\\n")
    if not QUIET:
        print(f"step {step} | " + " | ".join(f"{k} {v:.4f}" for k, v in values.items()), flush=True)
'''

# Before training: a grandchild that leaves the trial's session and tree (setsid, double fork) and would sleep on.
DETACH = """
    import os
    child = os.fork()
    if child == 0:
        os.setsid()
        grandchild = os.fork()
        if grandchild:
            with open("grandchild.pid", "w") as f:
                f.write(str(grandchild))
            os._exit(0)
        time.sleep(300)
        os._exit(0)
    os.waitpid(child, 0)
"""


class FakeTrial:
    def __init__(self):
        self.reports: dict[int, float] = {}

    def report(self, value, step):
        assert step not in self.reports
        self.reports[step] = value


def event(**kw) -> str:
    return json.dumps(kw) + "\n"


def test_the_spool_gives_the_helpers_validations_by_pid_and_complete_lines_only(tmp_path):
    started = time.time()
    older = tmp_path / f"{int((started - 60) * 1e9)}-4242.jsonl"  # an earlier process with the same pid
    older.write_text(event(ev="metrics", t=1.0, step=1, metrics={"val_mse": 9.0}))
    (tmp_path / f"{time.time_ns()}-4243.jsonl").write_text(event(ev="metrics", t=2.0, step=1, metrics={"val_mse": 8.0}))
    spool = TrialSpool(tmp_path, 4242, started, "val_mse")
    assert spool.read() == [] and spool.find() is None  # the trial's own file is not there yet

    ours = tmp_path / f"{time.time_ns()}-4242.jsonl"
    ours.write_text(
        event(ev="start", t=started + 0.1, pid=4242, script="run_1.py")
        + event(ev="metrics", t=started + 1, step=64, metrics={"loss": 0.5, "epoch": 1.0})  # no validation
        + event(ev="metrics", t=started + 2, step=64, metrics={"val_mse": 0.70583, "epoch": 1.0})
        + event(ev="metrics", t=started + 2, step=64, metrics={"val_mse": 0.7058, "epoch": 1.0}, src="stdout")
        + '{"ev": "metrics", "t": 1, "met\n'  # a line torn by a killed writer
        + event(ev="checkpoint", t=started + 2, path="x.pt", val_score=0.7)
        + '{"ev": "metrics", "t": 3, "step": 128, "metrics": {"val_mse": 0.65'  # being written
    )
    first = spool.read()
    assert [(v.value, v.epoch, v.step) for v in first] == [(0.70583, 1.0, 64)]  # full precision, not the echo
    assert spool.started_t == pytest.approx(started + 0.1)
    with open(ours, "a") as f:
        f.write("}}\n" + event(ev="metrics", t=4.0, step=192, metrics={"val_mse": 0.6}))  # no epoch logged
    assert [(v.value, v.epoch) for v in spool.read()] == [(0.65, None), (0.6, None)]
    assert spool.read() == []

    assert spool.mark([{"ev": "end", "status": "KILLED", "error": "pruned"}])
    assert ours.read_text().endswith('\n{"ev": "end", "status": "KILLED", "error": "pruned"}\n')
    assert "KILLED" not in older.read_text()
    assert not TrialSpool(tmp_path, 9999, started, "val_mse").mark([{"ev": "end"}])
    assert val_key("mse") == "val_mse" and val_key("val_bpb") == "val_bpb"


def test_grid_reporter_carries_the_best_so_far_onto_a_common_grid():
    trial = FakeTrial()
    r = GridReporter(trial, grid=4, direction=Direction.MIN)
    assert r.add(0.26, 3.0)  # -> step 1
    assert not r.add(0.4, 2.5)  # same grid step: remembered, not reported
    assert r.add(1.01, 2.8)  # steps 2, 3 carry 2.5 (known then), step 4 gets the best so far
    assert trial.reports == {1: 3.0, 2: 2.5, 3: 2.5, 4: 2.5}
    assert not r.add(1.5, float("nan"))
    r = GridReporter(FakeTrial(), grid=1, direction=Direction("max"))
    r.add(1, 0.5)
    r.add(2, 0.4)
    assert r.trial.reports == {1: 0.5, 2: 0.5} and r.best == 0.5


def test_time_left_rule():
    clock = TimeKeeper(deadline=1000.0, reserve_s=10.0, quantile_q=0.75)
    assert clock.left(now=900) == 90
    assert clock.can_launch(now=900) == (True, "first trial")  # nothing measured: always start one
    assert not clock.can_launch(now=995)[0]  # inside the reserve
    for d in (20.0, 30.0, 40.0, 100.0):
        clock.records.append(TrialRecord(number=0, script="run_1.py", state="COMPLETE", duration_s=d))
    clock.records.append(TrialRecord(number=1, script="run_5.py", state="PRUNED", duration_s=500.0))
    assert clock.expected_trial_s() == 40.0  # q0.75 of the completed trials; pruned ones are short by design
    ok, why = clock.can_launch(now=1000 - 10 - 43)
    assert not ok and "43 s left < 44 s" in why
    assert clock.can_launch(now=1000 - 10 - 45)[0]
    # epochs are fitted to the time left: a trial of min_epochs at the median epoch time is enough
    clock.records[0].startup_s, clock.records[0].seconds_per_epoch = 2.0, 4.0
    assert clock.shortest_trial_s(2) == pytest.approx(2.0 + 2 * 4.0 * 1.15)
    assert clock.can_launch(now=1000 - 10 - 15, min_epochs=2) == (True, "15 s left >= 14 s")
    ok, why = clock.can_launch(now=1000 - 10 - 12, min_epochs=2)
    assert not ok and "2 epoch(s) at the median epoch time" in why
    assert clock.can_launch(now=1000 - 10 - 15, min_epochs=20)[0] is False  # longer than the q75: that rules


def test_epochs_are_fitted_to_the_time_left():
    clock = TimeKeeper(deadline=1000.0, reserve_s=0.0, safety=1.0)
    assert clock.fit_epochs(30, epoch_cost=2.0, now=900) == 30  # no measurement yet
    clock.records.append(TrialRecord(number=0, script="run_1.py", startup_s=5.0, seconds_per_unit=1.5))
    # 100 s left - 5 s start-up - 3 s margin = 92 s; an epoch costs 2 x 1.5 = 3 s -> 30 epochs fit
    assert clock.fit_epochs(40, epoch_cost=2.0, now=900) == 30
    assert clock.fit_epochs(10, epoch_cost=2.0, now=900) == 10
    assert clock.predict_s(10, 2.0) == pytest.approx(35.0)
    assert quantile([3, 1, 2], 0.5) == 2 and quantile([3, 1, 2], 1.0) == 3


def test_speed_is_measured_from_the_validations_own_times():
    rec = TrialRecord(number=0, script="run_1.py")
    measure_speed(rec, 100.0, [], None, 2.0)
    assert rec.startup_s is None and rec.seconds_per_epoch is None  # nothing logged: nothing measured
    # launched at 100, training from 102, 3 s per epoch: validations at 105 (epoch 1) and 111 (epoch 3)
    measure_speed(rec, 100.0, [(105.0, 1.0), (108.0, 2.0), (111.0, 3.0)], 100.5, 2.0)
    assert (rec.startup_s, rec.seconds_per_epoch, rec.seconds_per_unit) == pytest.approx((2.0, 3.0, 1.5))
    # one validation: from the trace's start event to it (loading counted as training)
    one = TrialRecord(number=1, script="run_2.py")
    measure_speed(one, 100.0, [(110.0, 2.0)], 101.0, 0.0)
    assert (one.startup_s, one.seconds_per_epoch, one.seconds_per_unit) == pytest.approx((1.0, 4.5, None))


def test_trial_env_keeps_the_package_root_off_the_scripts_path(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/hook", str(PACKAGE_ROOT), "/other"]))
    env = trial_env(threads=1, token="tok")
    assert env["PYTHONPATH"] == os.pathsep.join(["/hook", "/other"])
    assert env[TOKEN_VAR] == "tok" and env["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("PYTHONPATH", str(PACKAGE_ROOT))
    assert "PYTHONPATH" not in trial_env()


def test_the_trials_token_is_the_runs_only_where_the_parent_does_not_carry_it(monkeypatch):
    monkeypatch.delenv(TOKEN_VAR, raising=False)
    assert trial_token().startswith("optuna-") and trial_token() != trial_token()
    code = "from baselines.trial_process import trial_token; print(trial_token())"
    env = {**os.environ, TOKEN_VAR: "run-token", "PYTHONPATH": str(PACKAGE_ROOT)}
    # the harness's agent: launched with the token by a parent without it (this test process)
    direct = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert direct.stdout.strip() == "run-token"
    # under a shell that carries the token too: ending trials by it could reach the shell, so a token of its own
    shell = f"'{sys.executable}' -c '{code}'; exit $?"  # `; exit` keeps sh from exec-ing python in its place
    nested = subprocess.run(["sh", "-c", shell], env=env, capture_output=True, text=True, check=True)
    assert nested.stdout.strip().startswith("optuna-")


@pytest.fixture
def fake_workspace(tmp_path, monkeypatch):
    ws = tmp_path / "t6-optuna-r1-x" / "workspace"
    (ws / ".bench" / "spool").mkdir(parents=True)
    (ws / "train.py").write_text(FAKE_TRAIN)
    (ws / "prepare.py").write_text(FAKE_PREPARE)
    monkeypatch.chdir(ws)
    # traced like under the harness: the tracer's spool is where the driver reads the scores
    monkeypatch.setenv("BENCH_WORKSPACE", str(ws))
    monkeypatch.setenv("BENCH_SPOOL_DIR", str(ws / ".bench" / "spool"))
    monkeypatch.setenv("BENCH_TRACE_STDOUT", "0")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HOOK_DIR), str(PACKAGE_ROOT)]))
    monkeypatch.delenv("BENCH_STARTED_AT", raising=False)
    monkeypatch.delenv(TOKEN_VAR, raising=False)
    return ws


def spool_events(ws) -> list[dict]:
    events = []
    for f in (ws / ".bench" / "spool").glob("*.jsonl"):
        events += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return events


def test_search_prunes_marks_and_summarises(fake_workspace):
    code = agent.main(["--budget", "60", "--reserve", "5", "--trials", "4", "--prune-after", "1", "--seed", "3"])
    assert code == 0
    ws = fake_workspace
    summary = json.loads((ws / ".bench" / "artifacts" / "study.json").read_text())
    assert summary["trials"] == 4 and summary["study_name"] == "t6-optuna-r1-x" and summary["direction"] == "min"
    assert summary["states"].get("PRUNED", 0) >= 1, summary["states"]
    assert summary["best"]["script"] == "run_1.py" and summary["best"]["params"]["lr"] == 1e-3  # the baseline
    assert summary["best"]["value"] == pytest.approx(0.7)
    assert "4 trials launched" in summary["stop_reason"]
    for name in ("trials.csv", "best_params.json", "best_config.json", "optimization_history.png", "study.journal"):
        assert (ws / ".bench" / "artifacts" / name).is_file(), name
    assert sorted(p.name for p in ws.glob("run_*.py")) == ["run_1.py", "run_2.py", "run_3.py", "run_4.py"]
    assert (ws / "run_1.log").read_text().startswith("fake DLinear\nstep 64 | loss 0.5000")  # the output, as is

    first = summary["trial_records"][0]
    assert first["state"] == "COMPLETE" and first["reports"] == 5 and first["progress_epochs"] == 5.0
    assert first["startup_s"] is not None and first["seconds_per_epoch"] is not None
    pruned = [r for r in summary["trial_records"] if r["state"] == "PRUNED"]
    assert all(r["progress_epochs"] == 2.0 and "pruned by optuna" in r["reason"] for r in pruned)
    # the pruned script's trace ends with the reason, which the relay turns into its run's status and tags
    events = spool_events(ws)
    ends = [e for e in events if e.get("ev") == "end" and e.get("status") == "KILLED"]
    assert len(ends) == len(pruned) and all("pruned by optuna" in e["error"] for e in ends)
    marks = [e["metrics"] for e in events if e.get("ev") == "metrics" and "optuna_trial" in e["metrics"]]
    assert sorted(m["optuna_trial"] for m in marks) == [0, 1, 2, 3]
    assert sum(m["optuna_pruned"] for m in marks) == len(pruned)

    study = optuna.load_study(
        study_name="t6-optuna-r1-x",
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(ws / ".bench" / "optuna" / "study.journal"))
        ),
    )
    states = [t.state.name for t in study.trials]
    assert states.count("PRUNED") == len(pruned) and states[0] == "COMPLETE"
    assert study.trials[1].user_attrs["script"] == "run_2.py"
    assert study.trials[0].intermediate_values == pytest.approx({k: 0.6 + 0.5 / k for k in range(1, 6)})


def test_scores_come_from_the_trace_not_from_what_the_script_prints(fake_workspace):
    ws = fake_workspace
    (ws / "prepare.py").write_text(FAKE_PREPARE.replace("QUIET = False", "QUIET = True"))
    (ws / "train.py").write_text(FAKE_TRAIN.replace('    print("fake DLinear", flush=True)\n', ""))
    code = agent.main(["--budget", "60", "--reserve", "5", "--trials", "3", "--prune-after", "1", "--seed", "3"])
    assert code == 0
    assert [(ws / f"run_{k}.log").read_text() for k in (1, 2, 3)] == ["", "", ""]  # nothing printed at all
    summary = json.loads((ws / ".bench" / "artifacts" / "study.json").read_text())
    assert summary["best"]["script"] == "run_1.py" and summary["best"]["value"] == pytest.approx(0.7)
    assert summary["states"].get("PRUNED", 0) >= 1, summary["states"]
    assert all(r["reports"] >= 2 for r in summary["trial_records"])


def test_without_the_tracer_a_trial_says_why_it_has_no_score(fake_workspace, monkeypatch, capsys):
    monkeypatch.delenv("BENCH_SPOOL_DIR")
    code = agent.main(["--budget", "60", "--reserve", "5", "--trials", "1"])
    assert code == 1  # no trial has a score
    assert "the tracer is off" in capsys.readouterr().out
    summary = json.loads((fake_workspace / ".bench" / "artifacts" / "study.json").read_text())
    (rec,) = summary["trial_records"]
    assert rec["state"] == "FAIL" and rec["exit_code"] == 0
    assert "no trace of run_1.py" in rec["reason"] and "validation scores could not be read" in rec["reason"]


def test_a_trial_is_cut_when_the_time_runs_out(fake_workspace):
    slow = FAKE_TRAIN.replace("time.sleep(0.02)", "time.sleep(1.0)")
    (fake_workspace / "train.py").write_text(slow)
    code = agent.main(["--budget", "4", "--reserve", "1", "--trials", "3"])
    assert code == 0
    summary = json.loads((fake_workspace / ".bench" / "artifacts" / "study.json").read_text())
    assert summary["trials"] == 1 and summary["states"] == {"CUT": 1}
    assert summary["best"]["value"] is not None  # its validations so far still count
    assert "no time left" in summary["stop_reason"]
    ends = [e for e in spool_events(fake_workspace) if e.get("ev") == "end"]
    assert [e["status"] for e in ends] == ["KILLED"] and "time budget ran out" in ends[0]["error"]


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_cut_trial_leaves_no_process_behind(fake_workspace):
    ws = fake_workspace
    slow = FAKE_TRAIN.replace("time.sleep(0.02)", "time.sleep(1.0)")
    (ws / "train.py").write_text(slow.replace('    print("fake DLinear", flush=True)\n', DETACH))
    try:
        assert agent.main(["--budget", "4", "--reserve", "1", "--trials", "1"]) == 0
        summary = json.loads((ws / ".bench" / "artifacts" / "study.json").read_text())
        assert summary["states"] == {"CUT": 1}
        pid = int((ws / "grandchild.pid").read_text())
        deadline = time.time() + 10  # ended before main() returned; a loaded machine may be slow to tear it down
        while not gone(pid) and time.time() < deadline:
            time.sleep(0.1)
        assert gone(pid), "the detached grandchild of the cut trial is still running"
    finally:
        if (ws / "grandchild.pid").is_file() and not gone(pid := int((ws / "grandchild.pid").read_text())):
            os.kill(pid, 9)


def test_no_budget_is_an_error(fake_workspace, monkeypatch):
    monkeypatch.delenv("BENCH_BUDGET_S", raising=False)
    with pytest.raises(SystemExit):
        agent.main([])


def test_module_runs_as_a_program_and_refuses_to_run_without_a_budget(fake_workspace):
    env = {k: v for k, v in os.environ.items() if k not in ("BENCH_BUDGET_S", "BENCH_STARTED_AT")}
    out = subprocess.run(
        [sys.executable, "-m", "baselines.agent", "--task", "t6"], capture_output=True, text=True, cwd=fake_workspace,
        env=env,
    )  # fmt: skip
    assert out.returncode == 2 and "no budget: run under the harness (BENCH_BUDGET_S) or pass --budget" in out.stderr
    assert not list(fake_workspace.glob("run_*.py"))  # nothing was launched
