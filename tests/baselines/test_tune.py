"""bench baselines tune / show / optuna-dashboard: the command line, the results files, the storage lookup."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest

from baselines import cli
from baselines.tune import RESULT_KEYS, RESULTS_DIR, default_storage, hardware, load_results, summarise
from bench.result import Official, RunResult


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench")
    cli.add_cli(p.add_subparsers(dest="command", required=True))
    return p


def test_cli_parses_tune_show_and_both_dashboard_spellings():
    args = parser().parse_args(["baselines", "tune", "--task", "t6", "--budget", "15m", "--trials", "40"])
    assert (args.task, args.budget, args.trials, args.campaign, args.storage) == ("t6", 900.0, 40, "baselines", None)
    assert args.func is cli.cmd_tune
    args = parser().parse_args(["baselines", "tune", "--task", "t1", "--storage", "postgresql+psycopg://h/db"])
    assert args.storage == "postgresql+psycopg://h/db" and args.budget is None
    assert parser().parse_args(["baselines", "show"]).func is cli.cmd_show
    for argv in (["baselines", "optuna-dashboard", "--port", "9000"], ["optuna-dashboard", "--port", "9000"]):
        args = parser().parse_args(argv)
        assert args.func is cli.cmd_dashboard and args.port == 9000 and args.host == "127.0.0.1"


def test_storage_lookup_for_the_dashboard(tmp_path):
    assert cli.resolve_storage(None) == default_storage()
    assert default_storage().startswith("sqlite:///") and default_storage().endswith("optuna.db")
    assert cli.resolve_storage("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"
    journal = tmp_path / "t6-optuna-r1-x" / "workspace" / ".bench" / "optuna" / "study.journal"
    journal.parent.mkdir(parents=True)
    journal.write_text("")
    assert cli.resolve_storage(str(tmp_path / "t6-optuna-r1-x")) == str(journal)  # a run directory
    assert cli.resolve_storage(str(journal)) == str(journal)
    with pytest.raises(FileNotFoundError):
        cli.resolve_storage(str(tmp_path / "missing.journal"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="no Optuna journal"):
        cli.resolve_storage(str(empty))
    try:
        cmd = cli.dashboard_command(str(journal), "127.0.0.1", 8081)
    except FileNotFoundError as e:  # optuna-dashboard is optional
        assert "pip install optuna-dashboard" in str(e)
    else:
        assert cmd[1:] == [str(journal), "--host", "127.0.0.1", "--port", "8081"]


def test_dashboard_refuses_a_missing_sqlite_store(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli, "dashboard_command", lambda *a: ["true"])
    args = parser().parse_args(["optuna-dashboard", "--storage", f"sqlite:///{tmp_path / 'none.db'}"])
    assert cli.cmd_dashboard(args) == 1
    assert "no study storage" in capsys.readouterr().err


def test_summarise_picks_the_evaluated_checkpoints_trial(tmp_path):
    ws = tmp_path / "run" / "workspace"
    (ws / ".bench" / "artifacts").mkdir(parents=True)
    study = {
        "trials": 3,
        "states": {"COMPLETE": 2, "PRUNED": 1},
        "stop_reason": "stopped launching: ...",
        "trial_records": [
            {"number": 0, "script": "run_1.py", "config": {"lr": 1e-3}, "params": {"lr": 1e-3}},
            {"number": 1, "script": "run_2.py", "config": {"lr": 3e-3}, "params": {"lr": 3e-3}},
        ],
    }
    (ws / ".bench" / "artifacts" / "study.json").write_text(json.dumps(study))
    # a real result.json (tests/bench/fixtures/results), turned into an optuna run that scored run_2.py's checkpoint
    v1 = RunResult.load(Path(__file__).parents[1] / "bench" / "fixtures" / "results" / "v3_t6_baseline.json")
    best, window = (
        dataclasses.replace(v1.evaluations[0], candidate=c, script=script, val_score=val, official=Official(0.371))
        for c, script, val in (("best", "run_2.py", 0.649), ("window-0", "run_1.py", 0.659))
    )
    outcome = dataclasses.replace(v1.outcome, score=0.371, best_val_score=0.649)
    result = dataclasses.replace(
        v1, workspace=str(ws), run_dir=str(tmp_path / "run"), evaluations=[best, window], outcome=outcome,
        mlflow_run_id="abc", run=dataclasses.replace(v1.run, budget_s=600.0),
    )  # fmt: skip
    out = summarise(result, storage="sqlite:///x.db", study="s", seed=0)
    assert set(RESULT_KEYS) <= set(out)
    assert out["config"] == {"lr": 3e-3} and out["best_trial"] == 1 and out["val_score"] == 0.649
    assert (out["official_score"], out["trials"], out["pruned"]) == (0.371, 3, 1)
    assert out["date"].count("-") == 2 and out["storage"] == "sqlite:///x.db"


def test_hardware_says_cpu_or_gpu():
    text = hardware()
    assert "torch" in text and ("CPU" in text or "CUDA" in text)


def test_committed_results_have_the_report_keys(capsys):
    results = load_results()
    for task, r in results.items():
        assert set(RESULT_KEYS) <= set(r), task
        assert r["task"] == task and r["direction"] in ("min", "max")
        assert r["official_score"] is not None and r["trials"] >= 1 and r["budget_s"] > 0
    if results:
        assert cli.cmd_show(parser().parse_args(["baselines", "show"])) == 0
        assert next(iter(results)) in capsys.readouterr().out
    assert load_results(RESULTS_DIR / "nowhere") == {}
