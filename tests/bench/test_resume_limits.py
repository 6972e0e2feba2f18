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
from bench.runner import RunSpec, run
from bench.sandbox.resource_limits import GIB, MIB, Limits

# every one of them differs from its default, so that a resume that fell back to the defaults shows
OWN = Limits(memory_bytes=3 * GIB, processes=300, workspace_bytes=7 * GIB, log_bytes=8 * MIB, eval_s=123.0)


SPEC = RunSpec(task="t6", agent="command", campaign="c", budget_s=60.0, grace_s=2.0, device="cpu", limits=OWN)
LAUNCH = {"token": "tok", "agent_pid": 1, "started_at": 0.0, "agent_argv": [], "endpoints": [], "mlflow_run_id": None,
          "partial_notes": [], "data_dir": "/d"}  # fmt: skip
REDO = "finish it with the toolkit version that wrote it, or run it again with this one"


def run_json(**changes) -> dict:
    """A run.json as bench run writes it (version 2), its description's fields changed as given."""
    return {"spec": {**SPEC.to_dict(), **changes}, **LAUNCH, "version": 2}


def test_run_json_embeds_the_description_and_reads_it_back(tmp_path):
    """What bench run writes: the description whole under ``spec``, the launch's fields beside it."""
    state.write(tmp_path, state.RunState(spec=SPEC, **LAUNCH))
    raw = json.loads((tmp_path / "run.json").read_text())
    assert raw["version"] == 2 and raw["spec"]["limits"] == OWN.to_dict() and "limits" not in raw
    assert raw == {**run_json(), "harness_pid": raw["harness_pid"], "harness_started": raw["harness_started"],
                   "harness_died_at": None, "watched": None}  # fmt: skip
    back = state.read(tmp_path)
    assert back.spec == SPEC and back.spec.limits == OWN and back.spec.label == "t6-command-r1"


def _written(folder: Path, raw: dict) -> Path:
    (folder / "run.json").write_text(json.dumps(raw))
    return folder


def test_run_json_keeps_the_limits_and_reads_them_back(tmp_path):
    assert state.read(_written(tmp_path, run_json())).spec.limits == OWN
    off = {**OWN.to_dict(), "memory_bytes": None, "processes": None, "workspace_bytes": None}  # "none" flags
    assert state.read(_written(tmp_path, run_json(limits=off))).spec.limits == Limits(None, None, None, 8 * MIB, 123.0)


def test_a_run_json_of_an_older_toolkit_is_refused_in_one_line(tmp_path):
    """Version 1 (the description's fields flat beside the launch's, as bench run wrote it before the description
    was embedded) and a file without a version: one line naming the version and what to do; the file is kept."""
    flat = {"task": "t6", "agent": "command", "campaign": "c", "repeat": 1, "budget_s": 60, "grace_s": 2,
            "device": "cpu", "sandbox": True, "label": "l", **LAUNCH}  # fmt: skip
    target = tmp_path / "run.json"
    for raw, said in (
        ({**flat, "version": 1}, "has version 1: written by an older toolkit (this one reads 2 only)"),
        (flat, "has no version: written before 0.1's format reset"),
    ):
        text = json.dumps(raw)
        with pytest.raises(state.RunStateError) as e:
            state.read(_written(tmp_path, raw))
        assert str(e.value) == f"{target} {said}; {REDO}"
        assert target.read_text() == text  # read, never rewritten


def test_a_run_json_without_limits_is_refused(tmp_path):
    """Every run.json of this format records its limits: one without is not this toolkit's, and is not resumed under
    the defaults."""
    raw = run_json()
    del raw["spec"]["limits"]
    with pytest.raises(state.RunStateError, match=r"lacks spec\.limits"):
        state.read(_written(tmp_path, raw))


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
    (tmp_path / "run.json").write_text(json.dumps(run_json(limits=limits)))
    with pytest.raises(state.RunStateError) as e:
        state.read(tmp_path)
    message = str(e.value)
    assert "\n" not in message and says in message, message
    assert message.startswith(f"{tmp_path / 'run.json'}: limits: "), message
    assert "run it again with this toolkit" in message


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

    def spy(given):
        seen.append(given.limits)
        return real(given)

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
