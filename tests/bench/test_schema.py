"""One validated schema: a field added to the run's description with ONE declaration is read from its ``bench run``
flag, a campaign file's key and ``run.json``/``result.json``, and judged by the same rules on each way in.

The declaration is a subclass of :class:`bench.runspec.RunSpec` with one field (``note``); the test puts it where
``RunSpec`` is (every module that bound the name), as editing ``bench/runspec.py`` would, and changes no other
code. The expected values are the ones the test writes in.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
from pydantic import ConfigDict
from pydantic.dataclasses import dataclass

from bench.campaign.file import run_layer
from bench.cli import main
from bench.errors import InputError
from bench.runspec import RunSpec, given

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "results" / "v3_t6_baseline.json"


@dataclass(config=ConfigDict(extra="forbid", revalidate_instances="always"))
class Noted(RunSpec):
    """The run's description with one more field: the declaration under test."""

    note: str | None = given(flag="--note", key="note", arg="str", strict=True, help="a note on the run")


@pytest.fixture
def noted(monkeypatch: pytest.MonkeyPatch) -> type[Noted]:
    """``Noted`` wherever ``RunSpec`` is (as if the field were declared in bench/runspec.py)."""
    import bench.campaign.job  # noqa: F401  (the modules that bind the name, loaded before it is replaced)
    import bench.pipeline.state  # noqa: F401
    import bench.result  # noqa: F401

    original = RunSpec  # this module's name is replaced too, on the way
    for module in list(sys.modules.values()):
        if getattr(module, "RunSpec", None) is original:
            monkeypatch.setattr(module, "RunSpec", Noted)
    return Noted


def test_the_flag_reads_the_new_field(noted, monkeypatch, capsys):
    from bench import preflight

    seen = []

    def stop(tasks, spec, **kw):  # the machine's checks: the description as bench run built it, then stop
        seen.append(spec)
        raise InputError("stopped by the test")

    monkeypatch.setattr(preflight, "check_run", stop)
    argv = ["run", "--agent", "command", "--agent-command", "true", "--task", "t6", "--note", "from the flag"]
    assert main(argv) == 2 and "stopped by the test" in capsys.readouterr().err
    assert type(seen[0]) is Noted and seen[0].note == "from the flag"


def test_the_campaign_file_reads_the_new_field_and_names_a_typo(noted, tmp_path, capsys):
    from bench.campaign import spec
    from bench.campaign.job import spec_of

    body = 'name = "noted"\ntasks = ["t6"]\nnote = "from the file"\n[[agents]]\nname = "baseline"\n'
    (tmp_path / "c.toml").write_text(body)
    campaign = spec.load(tmp_path / "c.toml")
    assert spec_of(campaign, campaign.runs()[0]).note == "from the file"
    (tmp_path / "typo.toml").write_text(body.replace("note =", "notes ="))
    with pytest.raises(InputError, match=r"typo.toml: notes: unknown key; did you mean note\?$"):
        spec.load(tmp_path / "typo.toml")
    (tmp_path / "typed.toml").write_text(body.replace('"from the file"', "3"))
    with pytest.raises(InputError, match=r"typed.toml: note: must be a string \(got 3\)$"):
        spec.load(tmp_path / "typed.toml")


def test_run_json_and_result_json_carry_the_new_field(noted, tmp_path):
    from bench.pipeline import state
    from bench.result import RunResult

    spec = Noted("t6", "command", budget_s=60.0, note="from run.json")
    st = state.RunState(spec=spec, token="t", agent_pid=1, started_at=0.0, agent_argv=[], endpoints=[],
                        mlflow_run_id=None, partial_notes=[], data_dir="/d")  # fmt: skip
    state.write(tmp_path, st)
    assert json.loads((tmp_path / "run.json").read_text())["spec"]["note"] == "from run.json"
    assert state.read(tmp_path).spec.note == "from run.json"

    base = RunResult.load(FIXTURE)
    run = Noted.from_dict({**base.run.to_dict(), "note": "from result.json"})
    dataclasses.replace(base, run=run).write(tmp_path / "result.json")
    assert RunResult.load(tmp_path / "result.json").run.note == "from result.json"


def test_the_same_rules_on_every_way_in():
    """A value refused on the command line is refused in a campaign file and in run.json, each named as given."""
    with pytest.raises(InputError, match=r"^--max-cost must be a positive amount in USD"):
        RunSpec.build("t6", "command", {"max_cost": -1.0})
    with pytest.raises(InputError, match=r"^c.toml: max_cost: must be a positive amount in USD"):
        run_layer({"max_cost": -1.0}, "c.toml", RunSpec)
    with pytest.raises(InputError, match=r"^max_cost must be a positive amount in USD"):
        RunSpec.from_dict({**RunSpec("t6", "command").to_dict(), "max_cost": -1.0})
    # the API budget needs the sandbox: a description rebuilt from run.json for --resume meets the rule too
    with pytest.raises(InputError, match=r"^--max-cost is enforced by the sandbox's metering gateway"):
        RunSpec.build("t6", "command", {"max_cost": 5.0, "sandbox": False})
    with pytest.raises(InputError, match=r"^max_cost is enforced by the sandbox's metering gateway"):
        RunSpec.from_dict({**RunSpec("t6", "command").to_dict(), "max_cost": 5.0, "sandbox": False})
    with pytest.raises(InputError, match=r"^budgett: unknown key; did you mean budget_s\?"):
        RunSpec.from_dict({**RunSpec("t6", "command").to_dict(), "budgett": 5.0})
