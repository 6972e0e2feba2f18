"""A cell whose run was stopped on a refused key (bench.gateway.refusals) is not run again until the key changes
(bench.campaign.job.blocked): no retry in the invocation that ran it, none at the next ``resume``, and ``status`` says
what to do. Once the credential's fingerprint differs from the one the run recorded, the cell runs again. Fast: the
run's result.json is written here as the gateway's record makes it (the whole run: tests/bench/agents/test_clis.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from bench import rundir
from bench.agents import credentials
from bench.campaign import cli, job, spec
from bench.campaign.retry import Attempts, last_events
from bench.campaign.view import table
from tests.bench.campaign.conftest import campaign_file

RESULT = Path(__file__).parents[1] / "fixtures" / "results" / "v3_t6_baseline.json"
MODEL = "claude-sonnet-4-6"
KEY = "sk-ant-api03-refused-key-0123456789abcdef"


def refused_run(c, key, access: str | None, heals: bool = False) -> Path:
    """The cell's run directory holding a final run stopped on a 401 (as bench.gateway.metering.refused records it)."""
    doc = json.loads(RESULT.read_text())
    run_dir = c.run_dir(key)
    run_dir.mkdir(parents=True)
    failure = {"kind": "auth", "status": 401, "error": "authentication_error: invalid x-api-key", "errors": 1,
               "why": "the model API refused the run's credential: 401 authentication_error: invalid x-api-key "
                      "(POST /v1/messages); it cannot heal: the run was stopped at once", "access": access}  # fmt: skip
    if not heals:
        failure["heals"] = False
    doc["run"].update(agent="claude-code", model=MODEL, campaign=c.name)
    doc["outcome"].update(status="interrupted", score=None, reason=f"infrastructure failure: {failure['why']}")
    doc.update(run_dir=str(run_dir), evaluations=[])
    doc["agent_events"] = {**doc["agent_events"], "api_failure": failure}
    (run_dir / "result.json").write_text(json.dumps(doc))
    return run_dir


@pytest.fixture
def cell(task_folders, tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    for var in ("ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    path, _ = campaign_file(
        tmp_path, f'tasks = ["t6"]\nretries = 2\n[[agents]]\nname = "claude-code"\nmodel = "{MODEL}"\n'
    )
    c = spec.load(path)
    (key,) = c.runs()
    return c, key


def test_the_fingerprint_names_the_credential_without_holding_it(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    fp = credentials.fingerprint("claude-code", MODEL)
    assert fp.startswith("sha256:") and len(fp) == len("sha256:") + 12 and KEY not in fp
    assert hashlib.sha256(KEY.encode()).hexdigest()[:12] not in fp  # not the key's own hash either: its context's
    monkeypatch.setenv("UNRELATED_SETTING", "x")
    assert credentials.fingerprint("claude-code", MODEL) == fp
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY + "-rotated")
    assert credentials.fingerprint("claude-code", MODEL) != fp
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://llm-gateway.example.org")  # another endpoint: another access
    assert credentials.fingerprint("claude-code", MODEL) != fp


def test_a_cell_refused_its_key_is_not_retried_until_the_key_changes(cell, monkeypatch, capsys):
    c, key = cell
    run_dir = refused_run(c, key, credentials.fingerprint("claude-code", MODEL))
    seen = rundir.inspect(run_dir)
    assert seen.state == "final" and job.infra_failure(seen.result)  # an infrastructure failure, as today...

    # ...but the job's end is not a retry: the run stays, the log says why and what to do
    attempts = Attempts(c)
    assert attempts.ended(key, "exit 1", 1) == "blocked"
    assert run_dir.is_dir() and not (c.folder / ".campaign" / "retired").exists()
    why = attempts.gave_up[key.run_id]
    assert "401 authentication_error: invalid x-api-key" in why and "fix ANTHROPIC_API_KEY" in why
    assert why.endswith("then bench campaign resume") and KEY not in why
    assert last_events(c)[key.run_id] == {**last_events(c)[key.run_id], "event": "blocked", "why": why}
    assert attempts.ended(key, "exit 1", 1) == "blocked" and not attempts.failures[key.run_id]  # never "gave up"

    # the next bench campaign resume leaves it, and its end says so (exit 1: a cell is not measured)
    seen_all = {key: seen}
    assert cli._retire_infra_failures(c, seen_all) == {} and run_dir.is_dir()
    assert cli._blocked(seen_all) == {key.run_id: why}
    assert why in table(c, seen_all, last_events(c), {}, cli._blocked(seen_all))

    # the key is fixed: the same cell is an infrastructure failure like any other, set aside and run again
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY + "-new")
    assert job.blocked(key, seen.result) is None and cli._blocked(seen_all) == {}
    again = cli._retire_infra_failures(c, seen_all)
    assert again[key].state == "pending" and not run_dir.exists()
    assert "the credential changed since" in capsys.readouterr().out
    assert (c.folder / ".campaign" / "retired" / f"{run_dir.name}.1" / "result.json").is_file()


def test_failures_that_may_heal_and_runs_without_a_fingerprint_are_retried_as_before(cell):
    c, key = cell
    run_dir = refused_run(c, key, credentials.fingerprint("claude-code", MODEL), heals=True)  # the health window's
    assert job.blocked(key, rundir.inspect(run_dir).result) is None
    assert Attempts(c).ended(key, "exit 1", 1) == "retry" and not run_dir.exists()
    run_dir = refused_run(c, key, None)  # no fingerprint recorded: whether the key changed cannot be told
    assert job.blocked(key, rundir.inspect(run_dir).result) is None
