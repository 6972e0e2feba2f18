"""A resumed run keeps the limits it was launched with (run.json's ``limits``), and run.json's limits are checked
when read: a run whose harness died evaluates under its own evaluation budget, and its result.json shows the
settings of its launch, not the defaults of whoever resumes it."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from bench.cli import main
from bench.pipeline import evaluate, state
from bench.result import RunResult
from bench.resume import OLD_LIMITS_NOTE
from bench.runner import RunSpec, run
from bench.sandbox.resource_limits import GIB, MIB, Limits

# every one of them differs from its default, so that a resume that fell back to the defaults shows
OWN = Limits(memory_bytes=3 * GIB, processes=300, workspace_bytes=7 * GIB, log_bytes=8 * MIB, eval_s=123.0)


def v1_state(**changes) -> dict:
    """A run.json of version 1, as bench run wrote it before the run's description was embedded: the description's
    fields flat beside the launch's. Still read (state._upgrade_v1)."""
    st = {"task": "t6", "agent": "command", "campaign": "c", "repeat": 1, "budget_s": 60, "grace_s": 2, "model": None,
          "options": {}, "device": "cpu", "no_weights": False, "sandbox": True, "label": "l", "token": "tok",
          "agent_pid": 1, "started_at": 0.0, "agent_argv": [], "endpoints": [], "mlflow_run_id": None,
          "partial_notes": [], "data_dir": "/d", "version": 1}  # fmt: skip
    return {**st, **changes}


def _state(**changes) -> dict:
    return v1_state(**{"limits": OWN.to_dict(), **changes})


def test_run_json_of_version_2_embeds_the_description_and_reads_it_back(tmp_path):
    """What bench run writes now: the description whole under ``spec``, the launch's fields beside it."""
    spec = RunSpec(task="t6", agent="command", campaign="c", budget_s=60.0, grace_s=2.0, device="cpu", limits=OWN)
    st = state.RunState(spec=spec.to_dict(), token="tok", agent_pid=1, started_at=0.0, agent_argv=[], endpoints=[],
                        mlflow_run_id=None, partial_notes=[], data_dir="/d")  # fmt: skip
    state.write(tmp_path, st)
    raw = json.loads((tmp_path / "run.json").read_text())
    assert raw["version"] == 2 and raw["spec"]["limits"] == OWN.to_dict() and "limits" not in raw
    back = state.read(tmp_path)
    assert back.run_spec() == spec and back.run_limits() == OWN and back.label == "t6-command-r1"
    old = state.read(_written(tmp_path, _state()))  # version 1: the same description
    assert old.run_spec() == spec and old.version == 2


def _written(folder: Path, raw: dict) -> Path:
    (folder / "run.json").write_text(json.dumps(raw))
    return folder


def test_run_json_keeps_the_limits_and_reads_them_back(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps(_state()))
    assert state.read(tmp_path).run_limits() == OWN
    off = {**OWN.to_dict(), "memory_bytes": None, "processes": None, "workspace_bytes": None}  # "none" flags
    (tmp_path / "run.json").write_text(json.dumps(_state(limits=off)))
    assert state.read(tmp_path).run_limits() == Limits(None, None, None, 8 * MIB, 123.0)
    old = _state()
    del old["limits"]  # a run.json from before runs had limits: still read, no limits
    (tmp_path / "run.json").write_text(json.dumps(old))
    assert state.read(tmp_path).run_limits() is None


@pytest.mark.parametrize(
    ("limits", "says"),
    [
        ("64G", "limits: must be a table (got '64G')"),
        ({**OWN.to_dict(), "swap_bytes": 1}, "swap_bytes: unknown key; did you mean"),
        ({k: v for k, v in OWN.to_dict().items() if k != "eval_s"}, "lacks eval_s"),
        ({**OWN.to_dict(), "memory_bytes": "3G"}, "memory_bytes must be a whole number or null"),
        ({**OWN.to_dict(), "processes": True}, "processes must be a whole number"),
        ({**OWN.to_dict(), "log_bytes": None}, "log_bytes must be a whole number"),
        ({**OWN.to_dict(), "eval_s": "1h"}, "eval_s must be a number of seconds"),
        ({**OWN.to_dict(), "memory_bytes": 1000}, "memory_bytes 1000 is too small"),
        ({**OWN.to_dict(), "eval_s": 0}, "eval_s 0 s cannot score a checkpoint"),
    ],
)
def test_malformed_limits_in_run_json_are_one_clear_line(tmp_path, limits, says):
    (tmp_path / "run.json").write_text(json.dumps(_state(limits=limits)))
    with pytest.raises(state.RunStateError) as e:
        state.read(tmp_path)
    message = str(e.value)
    assert "\n" not in message and says in message, message
    assert message.startswith(f"{tmp_path / 'run.json'}: limits: "), message
    assert "remove the key" in message


def _unfinished(task, limits: Limits) -> Path:
    return unfinished_run(task, limits=limits)


def unfinished_run(task, **spec_fields) -> Path:
    """A run (an agent that does nothing, unsandboxed: fast) whose harness 'died' while the agent ran: run.json
    and no result.json, its harness pid gone; ``spec_fields`` set on its RunSpec (limits, max_cost, ...)."""
    spec = RunSpec(task, "command", campaign=f"test-{uuid.uuid4().hex[:8]}", budget_s=30, grace_s=1, console=False)
    spec.options, spec.sandbox = {"command": "true"}, False
    for name, value in spec_fields.items():
        setattr(spec, name, value)
    done = run(spec)
    run_dir = Path(done.run_dir)
    Path(done.result_file).unlink()
    gone = subprocess.Popen(["true"])
    gone.wait()
    st = state.read(run_dir)
    st.harness_pid, st.harness_started, st.watched = gone.pid, 0.0, None
    state.write(run_dir, st)
    return run_dir


def _limits_seen(monkeypatch) -> list[Limits]:
    """The limits each evaluate_candidates call got (its evaluation budget, the predictors' memory and processes)."""
    seen, real = [], evaluate.evaluate_candidates

    def spy(*args, **kwargs):
        seen.append(kwargs["limits"])
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluate, "evaluate_candidates", spy)
    return seen


@pytest.mark.slow  # a whole benchmark run, killed and resumed
def test_a_resumed_run_keeps_its_own_limits(generated_t6, monkeypatch, capsys):
    run_dir = _unfinished(generated_t6, OWN)
    assert json.loads((run_dir / "run.json").read_text())["spec"]["limits"] == OWN.to_dict()  # written at the launch
    seen = _limits_seen(monkeypatch)
    assert main(["run", "--resume", str(run_dir), "--quiet"]) == 1  # no checkpoint: not a success
    resumed = RunResult.load(run_dir)
    assert resumed.status == "interrupted", resumed.reason
    assert seen == [OWN]  # the run's own evaluation budget (123 s, not the default hour), memory and processes
    assert resumed.limits["settings"] == OWN.to_dict()
    assert "note" not in resumed.limits
    assert OLD_LIMITS_NOTE not in capsys.readouterr().out


@pytest.mark.slow  # a whole benchmark run, killed and resumed
def test_a_run_json_from_before_limits_resumes_with_the_defaults_and_says_so(generated_t6, monkeypatch, capsys):
    run_dir = _unfinished(generated_t6, OWN)
    raw = json.loads((run_dir / "run.json").read_text())
    del raw["spec"]["limits"]  # as an older bench wrote it
    (run_dir / "run.json").write_text(json.dumps(raw))
    seen = _limits_seen(monkeypatch)
    capsys.readouterr()
    assert main(["run", "--resume", str(run_dir), "--quiet"]) == 1
    resumed = RunResult.load(run_dir)
    assert [limits.eval_s for limits in seen] == [3600.0]  # Limits' default: one hour for all candidates
    assert resumed.limits["settings"] == Limits().to_dict()
    assert resumed.limits["note"] == OLD_LIMITS_NOTE
    assert f"{OLD_LIMITS_NOTE} (evaluation budget 3600 s)" in capsys.readouterr().out


@pytest.mark.slow  # a whole benchmark run, killed and resumed
def test_a_resume_refuses_a_run_json_with_malformed_limits_in_one_line(generated_t6, capsys):
    run_dir = _unfinished(generated_t6, OWN)
    raw = json.loads((run_dir / "run.json").read_text())
    raw["spec"]["limits"]["eval_s"] = -5
    (run_dir / "run.json").write_text(json.dumps(raw))
    capsys.readouterr()
    assert main(["run", "--resume", str(run_dir)]) != 0
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "limits: eval_s -5 s cannot score a checkpoint" in err, err
    assert not (run_dir / "result.json").exists()
