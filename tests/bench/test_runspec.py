"""bench.runspec: the run's description, its one constructor, and ``--tag KEY=VALUE`` / a campaign's ``tags`` as
the proof that a field added there reaches run.json, result.json, MLflow, a resume and the report unaided."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from bench import run_flags
from bench.cli import main
from bench.errors import InputError
from bench.runspec import GRACE_S, RunSpec
from bench.sandbox.resource_limits import MIB, Limits


def test_tag_parses_key_value_pairs() -> None:
    assert run_flags.tag("team=vision") == ("team", "vision")
    assert run_flags.tag("note=a=b") == ("note", "a=b")  # the first = splits
    assert run_flags.tag("sweep/id=lr 3e-4") == ("sweep/id", "lr 3e-4")
    assert run_flags.tag("empty=") == ("empty", "")


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("team", "expected KEY=VALUE, got 'team'"),
        ("=vision", "a key is 1-100 letters"),
        ("te;am=x", "a key is 1-100 letters"),
        ("k=" + "x" * 501, "a value is one line of at most 500 characters"),
    ],
)
def test_a_bad_tag_is_one_clear_error_and_exit_2(given, says, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["run", "--agent", "command", "--agent-command", "true", "--task", "t6", "--tag", given])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "argument --tag" in err and says in err, err


def test_the_description_round_trips_and_the_layers_take_precedence_in_order() -> None:
    spec = RunSpec("t6", "command", budget_s=60.0, limits=Limits(None, 64, None, 8 * MIB, 90.0), tags={"a": "1"})
    assert RunSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    assert RunSpec("t6", "command").grace_s == GRACE_S == 30.0
    file = {"budget_s": 60.0, "grace_s": 5.0, "tags": {"team": "vision"}}
    flags = {"budget_s": 90.0, "grace_s": None, "device": "cpu"}  # None: left to the layer below
    built = RunSpec.build("t6", "command", file, flags)
    assert (built.budget_s, built.grace_s, built.device, built.tags) == (90.0, 5.0, "cpu", {"team": "vision"})
    with pytest.raises(InputError, match=r"^--tag b;=x: a key is"):
        RunSpec.build("t6", "command", {"tags": {"b;": "x"}})
    with pytest.raises(InputError, match=r"^camp.toml: grace: must be a number of seconds >= 0"):
        RunSpec.build("t6", "command", {"grace_s": -1.0}, names=lambda f: f"camp.toml: {f[:-2]}:")


def test_whole_seconds_read_the_same_after_a_trip_through_json() -> None:
    """grace_s=3 given by a program became "3" in MLflow at the run's record and "3.0" when `bench record` logged the
    description read back from result.json: MLflow refuses a param changed, and the second record failed."""
    spec = RunSpec("t6", "command", budget_s=30, grace_s=3)
    back = RunSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert (str(spec.grace_s), str(spec.budget_s)) == (str(back.grace_s), str(back.budget_s)) == ("3.0", "30.0")


def test_a_campaign_files_tags_table_is_read_and_checked(tmp_path) -> None:
    from bench.campaign import spec

    agents = '[[agents]]\nname = "baseline"\n'
    good = tmp_path / "good.toml"
    good.write_text(f'name = "tagged"\ntasks = ["t6"]\ntags = {{ team = "vision", sweep = "a1" }}\n{agents}')
    campaign = spec.load(good)
    from bench.campaign.job import spec_of

    assert spec_of(campaign, campaign.runs()[0]).tags == {"team": "vision", "sweep": "a1"}
    bad = tmp_path / "bad.toml"
    bad.write_text(f'name = "tagged"\ntasks = ["t6"]\ntags = {{ team = 1 }}\n{agents}')
    with pytest.raises(InputError, match=r"bad.toml: tags: must be a table of strings"):
        spec.load(bad)


@pytest.mark.slow  # a whole run (the command agent, unsandboxed: seconds) and its resume
def test_a_tag_reaches_run_json_result_json_mlflow_the_resume_and_the_report(generated_t6, tmp_path, capsys):
    import mlflow

    from bench.pipeline import state, workspace
    from bench.result import RunResult
    from bench.tracking import schema

    name = f"tags-{uuid.uuid4().hex[:8]}"
    expected = {"team": "vision", "sweep": "lr 3e-4"}
    argv = ["run", "--agent", "command", "--agent-command", "true", "--task", "t6", "--budget", "30s", "--grace", "1",
            "--campaign", name, "--quiet", "--unsandboxed", "--tag", "team=vision",
            "--tag", "sweep=lr 3e-4"]  # fmt: skip
    assert main(argv) == 1  # no checkpoint: failed (recorded all the same)
    (run_dir,) = workspace.campaign_dir(name).iterdir()
    assert json.loads((run_dir / "run.json").read_text())["spec"]["tags"] == expected
    assert json.loads((run_dir / "result.json").read_text())["run"]["tags"] == expected
    client = mlflow.tracking.MlflowClient()
    run_id = RunResult.load(run_dir).mlflow_run_id

    def labels(run: str) -> dict[str, str]:
        tags = client.get_run(run).data.tags
        return {k[len(schema.TAG_PREFIX) :]: v for k, v in tags.items() if k.startswith(schema.TAG_PREFIX)}

    assert labels(run_id) == expected
    exp = client.get_experiment_by_name(name).experiment_id
    (summary,) = client.search_runs([exp], f"tags.`{schema.KIND}` = '{schema.KIND_SUMMARY}'")
    assert labels(summary.info.run_id) == expected  # bench run wrote the campaign summary at its end

    # the harness 'dies' before the result: the resume finishes the run from run.json, its tags with it
    (run_dir / "result.json").unlink()
    gone = subprocess.Popen(["true"])
    gone.wait()
    st = state.read(run_dir)
    st.harness_pid, st.harness_started, st.watched = gone.pid, 0.0, None
    state.write(run_dir, st)
    client.delete_tag(run_id, f"{schema.TAG_PREFIX}team")  # only the resume's record can set it again
    assert main(["run", "--resume", str(run_dir), "--quiet", "--no-summary"]) == 1
    resumed = RunResult.load(run_dir)
    assert resumed.run.tags == expected and "finished by bench run --resume" in resumed.reason
    assert labels(run_id) == expected

    out = tmp_path / "report"
    assert main(["report", "--experiment", name, "--out", str(out)]) == 0
    index = next(p for p in out.rglob("*.md") if "Tags of T6" in p.read_text())
    assert f"Tags of T6 command r1 ({name}): sweep=lr 3e-4, team=vision." in index.read_text()
