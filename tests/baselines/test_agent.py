"""The optuna agent's driver: log parsing, pruner reports, the time-left rule, and a search with fake scripts.

The fake workspace's train.py prints validation lines like the task baselines (no torch): its score is best
at lr = 1e-3, so once the baseline trial has completed every other trial is worse at epoch 2 and pruned.
"""

from __future__ import annotations

import json
import os
import sys

import optuna
import pytest

from baselines import agent
from baselines.agent import GridReporter, TimeKeeper, TrialRecord, parse_metrics, quantile, val_key
from bench.tracking import HOOK_DIR

FAKE_TRAIN = '''"""A fake T6 baseline: prints validation lines, no training."""
import math
import time

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
        print(f"step {epoch * 64} | loss 0.5 | epoch {epoch:.4f}", flush=True)
        val = 0.6 + gap + 0.5 / epoch
        print(f"step {epoch * 64} | val_mse {val:.4f} | epoch {epoch:.4f} | seconds 0.1", flush=True)
'''

FAKE_PREPARE = 'TASK_ID = "t6"\nMETRIC = "mse"\nDIRECTION = "min"\nSEQ_LEN = 336\n'


class FakeTrial:
    def __init__(self):
        self.reports: dict[int, float] = {}

    def report(self, value, step):
        assert step not in self.reports
        self.reports[step] = value


def test_parse_metrics_and_val_key():
    assert parse_metrics("step 64 | val_mse 0.7058 | epoch 1.0000 | seconds 0.4050") == {
        "step": 64.0,
        "val_mse": 0.7058,
        "epoch": 1.0,
        "seconds": 0.405,
    }
    assert parse_metrics("step 61: val_bpb 3.6362, saved checkpoints/x.pt") is None
    assert parse_metrics("DLinear: 64,704 parameters") is None
    assert val_key("mse") == "val_mse" and val_key("val_bpb") == "val_bpb"


def test_grid_reporter_carries_the_best_so_far_onto_a_common_grid():
    trial = FakeTrial()
    r = GridReporter(trial, grid=4, minimize=True)
    assert r.add(0.26, 3.0)  # -> step 1
    assert not r.add(0.4, 2.5)  # same grid step: remembered, not reported
    assert r.add(1.01, 2.8)  # steps 2, 3 carry 2.5 (known then), step 4 gets the best so far
    assert trial.reports == {1: 3.0, 2: 2.5, 3: 2.5, 4: 2.5}
    assert not r.add(1.5, float("nan"))
    r = GridReporter(FakeTrial(), grid=1, minimize=False)
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


@pytest.fixture
def fake_workspace(tmp_path, monkeypatch):
    ws = tmp_path / "t6-optuna-r1-x" / "workspace"
    (ws / ".bench" / "spool").mkdir(parents=True)
    (ws / "train.py").write_text(FAKE_TRAIN)
    (ws / "prepare.py").write_text(FAKE_PREPARE)
    monkeypatch.chdir(ws)
    # traced like under the harness: the tracer's spool, so that pruned scripts can be marked
    monkeypatch.setenv("BENCH_WORKSPACE", str(ws))
    monkeypatch.setenv("BENCH_SPOOL_DIR", str(ws / ".bench" / "spool"))
    monkeypatch.setenv("BENCH_TRACE_STDOUT", "0")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HOOK_DIR), str(agent.PACKAGE_ROOT)]))
    monkeypatch.delenv("BENCH_STARTED_AT", raising=False)
    return ws


def test_search_prunes_marks_and_summarises(fake_workspace):
    code = agent.main(["--budget", "60", "--reserve", "5", "--trials", "4", "--prune-after", "1", "--seed", "3"])
    assert code == 0
    ws = fake_workspace
    summary = json.loads((ws / ".bench" / "artifacts" / "study.json").read_text())
    assert summary["trials"] == 4 and summary["study_name"] == "t6-optuna-r1-x"
    assert summary["states"].get("PRUNED", 0) >= 1, summary["states"]
    assert summary["best"]["script"] == "run_1.py" and summary["best"]["params"]["lr"] == 1e-3  # the baseline
    assert summary["best"]["value"] == pytest.approx(0.7)
    assert "4 trials launched" in summary["stop_reason"]
    for name in ("trials.csv", "best_params.json", "best_config.json", "optimization_history.png", "study.journal"):
        assert (ws / ".bench" / "artifacts" / name).is_file(), name
    assert sorted(p.name for p in ws.glob("run_*.py")) == ["run_1.py", "run_2.py", "run_3.py", "run_4.py"]
    assert (ws / "run_1.log").read_text().startswith("fake DLinear")

    pruned = [r for r in summary["trial_records"] if r["state"] == "PRUNED"]
    assert all(r["progress_epochs"] == 2.0 and "pruned by optuna" in r["reason"] for r in pruned)
    # the pruned script's trace ends with the reason, which the relay turns into its run's status and tags
    ends = []
    for f in (ws / ".bench" / "spool").glob("*.jsonl"):
        events = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        ends += [e for e in events if e.get("ev") == "end" and e.get("status") == "KILLED"]
    assert len(ends) == len(pruned) and all("pruned by optuna" in e["error"] for e in ends)

    study = optuna.load_study(
        study_name="t6-optuna-r1-x",
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(ws / ".bench" / "optuna" / "study.journal"))
        ),
    )
    states = [t.state.name for t in study.trials]
    assert states.count("PRUNED") == len(pruned) and states[0] == "COMPLETE"
    assert study.trials[1].user_attrs["script"] == "run_2.py"


def test_a_trial_is_cut_when_the_time_runs_out(fake_workspace):
    slow = FAKE_TRAIN.replace("time.sleep(0.02)", "time.sleep(1.0)")
    (fake_workspace / "train.py").write_text(slow)
    code = agent.main(["--budget", "4", "--reserve", "1", "--trials", "3"])
    assert code == 0
    summary = json.loads((fake_workspace / ".bench" / "artifacts" / "study.json").read_text())
    assert summary["trials"] == 1 and summary["states"] == {"CUT": 1}
    assert summary["best"]["value"] is not None  # its validations so far still count
    assert "no time left" in summary["stop_reason"]


def test_no_budget_is_an_error(fake_workspace, monkeypatch):
    monkeypatch.delenv("BENCH_BUDGET_S", raising=False)
    with pytest.raises(SystemExit):
        agent.main([])


def test_trial_env_keeps_the_package_root_off_the_scripts_path(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/hook", str(agent.PACKAGE_ROOT), "/other"]))
    assert agent.trial_env()["PYTHONPATH"] == os.pathsep.join(["/hook", "/other"])
    monkeypatch.setenv("PYTHONPATH", str(agent.PACKAGE_ROOT))
    assert "PYTHONPATH" not in agent.trial_env()


def test_module_runs_as_a_program(fake_workspace):
    import subprocess

    out = subprocess.run(
        [sys.executable, "-m", "baselines.agent", "--help"], capture_output=True, text=True, cwd=fake_workspace
    )
    assert out.returncode == 0 and "--trials" in out.stdout
