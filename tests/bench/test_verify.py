"""``bench verify``: a recorded run re-scored and re-audited from its files; every edit named, exit 0/1/2.

One real T6 run (the command agent, two epochs of the baseline train.py, a 1-minute budget: ~20-30 s) is made once
for the module and never changed; each tampering happens on a copy. The expected values come from the run's own
result.json read as JSON, not from the code under test. The cases that change nothing verify (re-score) once and
share the output; a tampered copy with three independent edits is verified once, and each edit's test looks for
its own line.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.cli import main
from bench.result import Official

ROOT = Path(__file__).resolve().parents[2]
CAMPAIGN = "verify-t6"
COMMAND = 'sed \'s/"epochs": 5/"epochs": 2/\' train.py > run_1.py && python run_1.py'

pytestmark = pytest.mark.xdist_group("verify-run")  # the module's run is made once, on one pytest-xdist worker


def _root_conftest():
    spec = importlib.util.spec_from_file_location("bench_tests_root_conftest_verify", ROOT / "tests" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Recorded:
    run_dir: Path
    result: dict  # result.json as JSON
    tasks: Path  # the task folders it ran (a generated T6)


def _tree(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Recorded:
    """One finished, recorded T6 run (a whole benchmark run: the tests that use it are slow)."""
    helpers = _root_conftest()
    base = tmp_path_factory.mktemp("verify")
    with pytest.MonkeyPatch.context() as mp:
        task = helpers.generated_task(base, mp, "t6_time_series_forecasting", helpers.write_etth1_like)
        helpers.with_prepared_data(task)
        argv = ["run", "--agent", "command", "--agent-command", COMMAND, "--task", "t6", "--budget", "1m"]
        assert main([*argv, "--grace", "5", "--campaign", CAMPAIGN, "--quiet", "--no-summary"]) == 0
        from bench.pipeline import workspace

        (run_dir,) = list(workspace.campaign_dir(CAMPAIGN).iterdir())
        yield Recorded(run_dir, json.loads((run_dir / "result.json").read_text()), base / "tasks")


@pytest.fixture(scope="module")
def untouched(recorded):
    """``bench verify RUN`` on the run as recorded: (exit status, output, the run folder's files before, after)."""
    before = _tree(recorded.run_dir)
    code, out = _verify([str(recorded.run_dir)])
    return code, out, before, _tree(recorded.run_dir)


def _verify(argv: list[str]) -> tuple[int, str]:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["verify", "--quiet", *argv])
    return code, buf.getvalue()


def _best(result: dict) -> dict:
    return next(e for e in result["evaluations"] if e["candidate"] == "best")


@pytest.mark.slow  # uses the module's whole run
def test_untouched_run_verifies_with_every_score_bitwise_equal(recorded, untouched):
    code, out, _, _ = untouched
    assert code == 0, out
    value = repr(float(_best(recorded.result)["official"]["value"]))
    row = next(line for line in out.splitlines() if line.startswith("t6-command-r1") and "best" in line)
    assert row.count(value) == 2, row  # recorded and recomputed: every digit the same
    assert row.rstrip().endswith("yes") and "cpu->cpu" in row
    verdict = next(line for line in out.splitlines() if "verdict" in line and "t6-command" in line)
    assert verdict.count(recorded.result["outcome"]["status"]) == 2 and "score same" in verdict
    assert "1 run(s) recomputed as recorded" in out and "re-computed here" in out and "not proved" in out
    assert "software recorded: python" in out and "the same here" in out  # the versions it scored with, beside these


@pytest.mark.slow
def test_verify_changes_nothing_in_the_run_folder(untouched):
    _, _, before, after = untouched
    assert after == before  # evidence/audit.json included: the audit was re-run without writing it


def _tamper(recorded: Recorded, dest: Path) -> Path:
    """A copy of the run with three edits: a checkpoint byte flipped, result.json's wall time edited, the arrivals
    evidence deleted."""
    copy = dest / recorded.run_dir.name
    shutil.copytree(recorded.run_dir, copy, symlinks=True)
    best = copy / "workspace" / "checkpoints" / Path(_best(recorded.result)["path"]).name
    data = bytearray(best.read_bytes())
    data[len(data) // 2] ^= 0x01
    best.write_bytes(bytes(data))
    result = json.loads((copy / "result.json").read_text())
    result["wall_time_s"] = result["wall_time_s"] + 1.5
    (copy / "result.json").write_text(json.dumps(result))
    (copy / "evidence" / "arrivals.jsonl").unlink()
    return copy


@pytest.fixture(scope="module")
def tampered(recorded, tmp_path_factory):
    copy = _tamper(recorded, tmp_path_factory.mktemp("tampered"))
    code, out = _verify([str(copy)])
    return code, out


@pytest.mark.slow
def test_a_flipped_checkpoint_byte_is_named(recorded, tampered):
    code, out = tampered
    assert code == 1
    name = Path(_best(recorded.result)["path"]).name
    recorded_sha = _best(recorded.result)["official"]["checkpoint_sha256"]
    assert f"checkpoint workspace/checkpoints/{name}: sha256" in out
    assert f"recorded {recorded_sha[:12]}" in out


@pytest.mark.slow
def test_a_metric_edited_in_result_json_is_named(recorded, tampered):
    code, out = tampered
    assert code == 1
    was = recorded.result["wall_time_s"]
    assert f"metric wall_time_s is {float(was)!r} in MLflow, {float(was) + 1.5!r} in result.json" in out


@pytest.mark.slow
def test_a_deleted_artifact_is_named(tampered):
    code, out = tampered
    assert code == 1
    assert "missing: evidence/arrivals.jsonl" in out


@pytest.mark.slow
def test_a_changed_task_folder_is_named_and_nothing_is_rescored(recorded, tmp_path):
    tasks = tmp_path / "tasks"
    shutil.copytree(recorded.tasks, tasks)
    program = tasks / "t6_time_series_forecasting" / "program.md"
    program.write_text(program.read_text() + "\nOne more line.\n")
    code, out = _verify(["--tasks-dir", str(tasks), str(recorded.run_dir)])
    assert code == 1
    want = recorded.result["run"]["task_source"]["sha256"][:12]
    assert f"task folder t6 differs from the recorded hash {want}" in out
    assert "not recomputed" in out


@pytest.fixture(scope="module")
def exported(recorded, tmp_path_factory) -> Path:
    """The module's campaign as a bundle of ``bench export``."""
    archive = tmp_path_factory.mktemp("bundle") / "campaign.tar.gz"
    assert main(["export", CAMPAIGN, str(archive), "--quiet"]) == 0
    return archive


@pytest.mark.slow
def test_a_bundle_verifies_and_an_edit_in_it_is_named(recorded, exported, tmp_path):
    code, out = _verify([str(exported)])
    assert code == 0, out
    value = repr(float(_best(recorded.result)["official"]["value"]))
    assert any(line.count(value) == 2 for line in out.splitlines() if "best" in line), out

    shutil.unpack_archive(exported, tmp_path / "x")
    (top,) = list((tmp_path / "x").iterdir())
    run_id = recorded.result["mlflow_run_id"]
    run_json = top / "mlflow" / "runs" / f"{run_id}.json"
    run = json.loads(run_json.read_text())
    run["metrics"]["score"][-1]["value"] += 0.01
    run_json.write_text(json.dumps(run))
    for copy in (top / "runs").rglob("*.pt"):  # every copy of the scored checkpoint: nothing can be re-scored
        copy.unlink()
    code, out = _verify([str(top)])
    assert code == 1
    assert "metric score" in out and f"mlflow/runs/{run_id}.json" in out
    assert "missing: checkpoint" in out


@pytest.mark.slow
def test_a_bundle_imported_into_a_fresh_store_verifies_against_it(recorded, exported, tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_MLRUNS_DIR", str(tmp_path / "mlruns"))  # a store and a machine's folders of its own
    monkeypatch.setenv("BENCH_WORKSPACES_DIR", str(tmp_path / "workspaces"))
    assert main(["import", str(exported), "--quiet"]) == 0
    code, out = _verify([CAMPAIGN])  # its run folders, and its MLflow runs under their new ids
    assert code == 0, out
    value = repr(float(_best(recorded.result)["official"]["value"]))
    assert any(line.count(value) == 2 for line in out.splitlines() if "best" in line), out

    # a metric edited in this store (its own, so the module's run stays untouched): a later value of the score
    import time

    from bench.bundle import verify_store
    from bench.pipeline import workspace
    from bench.result import RunResult
    from bench.tracking import reader, schema
    from bench.tracking.writer import MlflowWriter

    read = reader.open_reader()
    (agent_id,) = read.runs(list(read.experiments([CAMPAIGN])), schema.KIND_AGENT)["run_id"]
    edited = float(recorded.result["outcome"]["score"]) + 0.001
    MlflowWriter(CAMPAIGN).log_metrics(agent_id, [(schema.SCORE, edited, 0, time.time() + 5)])
    (run_dir,) = list(workspace.campaign_dir(CAMPAIGN).iterdir())
    found = verify_store.differences({run_dir: RunResult.load(run_dir)})[run_dir]
    was = float(recorded.result["outcome"]["score"])
    assert found == [f"MLflow run t6-command-r1: metric score is {edited!r} in MLflow, {was!r} in result.json"]

    # an artifact deleted from this store: the eval run's official.json
    (official,) = list((tmp_path / "mlruns").rglob("official.json"))
    official.unlink()
    found = verify_store.differences({run_dir: RunResult.load(run_dir)})[run_dir]
    name = "eval " + Path(_best(recorded.result)["path"]).name
    assert found[1:] == [f"MLflow {name!r} of t6-command-r1: artifact official.json is missing from the tracking store"]


# --- the fast tier: bad input, and the comparison's rules on their own -----------------------------------------------


def test_bad_input_exits_2(tmp_path, capsys):
    assert main(["verify", "no-such-campaign-or-run"]) == 2
    assert "is no run directory, campaign or bundle" in capsys.readouterr().err
    junk = tmp_path / "notes.txt"
    junk.write_text("not an archive")
    assert main(["verify", str(junk)]) == 2
    assert "not a bundle" in capsys.readouterr().err
    unfinished = tmp_path / "run"
    (unfinished / "workspace").mkdir(parents=True)
    assert main(["verify", str(unfinished)]) == 2
    assert "has no result.json" in capsys.readouterr().err


def _candidate(recorded_value: float, recomputed_value: float):
    from bench.bundle.verify import Candidate

    rec = Official.from_dict({"value": recorded_value, "val_value": 0.5, "n": 10, "checks": ["determinism"]})
    now = Official.from_dict({"value": recomputed_value, "val_value": 0.5, "n": 10, "checks": ["determinism"]})
    return Candidate(["best"], "ckpt.pt", rec, now)


def test_same_device_is_exact_and_another_device_within_the_tolerance():
    from bench.bundle.verify import compare

    a = 0.384
    b = a * (1 + 5e-4)  # 5e-4 relative: within 1e-3, not bitwise
    assert compare(_candidate(a, a), same_device=True, tol=1e-3) == []
    named = f"ckpt.pt (best): value recorded {a!r}, recomputed {b!r}"
    assert compare(_candidate(a, b), same_device=True, tol=1e-3) == [named]
    assert compare(_candidate(a, b), same_device=False, tol=1e-3) == []
    assert compare(_candidate(a, a * (1 + 2e-3)), same_device=False, tol=1e-3) != []


def test_a_failed_recomputation_of_a_scored_candidate_is_named():
    from bench.bundle.verify import Candidate, compare

    rec = Official.from_dict({"value": 0.4})
    now = Official.from_dict({"error": "forward contract broken: x", "violation": "forward contract broken: x"})
    found = compare(Candidate(["best", "window-0"], "c.pt", rec, now), same_device=True, tol=0.0)
    assert found[0] == "c.pt (best,window-0): violation recorded False, recomputed True"
    assert found[1].startswith("c.pt (best,window-0): scored recorded True, recomputed False (forward contract")


def test_the_tolerance_is_the_tasks_or_the_documented_default(tmp_path):
    from bench.bundle.verify import DEFAULT_TOLERANCE, tolerance
    from bench.tasks import TaskError
    from bench.tasks.registry import load_task

    folder = tmp_path / "t6"
    shutil.copytree(ROOT / "tasks" / "t6_time_series_forecasting", folder)
    assert tolerance(load_task(folder)) == DEFAULT_TOLERANCE == 1e-3
    toml = folder / "task.toml"
    base = toml.read_text()
    toml.write_text(base.replace("\n[scoring]\n", "\n[scoring]\nverify_tolerance = 1e-5\n"))  # the task's own table
    assert tolerance(load_task(folder)) == 1e-5
    toml.write_text(base.replace("\n[scoring]\n", "\n[scoring]\nverify_tolerance = 2\n"))
    with pytest.raises(TaskError, match="verify_tolerance must be a number in"):
        tolerance(load_task(folder))


def test_verify_says_what_it_proved_and_what_no_bundle_can_prove_in_its_output_and_the_docs():
    """The closing lines and docs/publishing.md separate (a) what was re-computed here from (b) what a bundle
    cannot prove; no line of the code or the page reads as a proof of (b)."""
    from bench.bundle import verify_cli

    page = " ".join((ROOT / "docs" / "publishing.md").read_text().split())
    for words in (
        "the recorded checkpoint bytes, staged with the recorded code and the task's locked files, score as recorded "
        "under the recorded probes on the reader's own copy of the data",
        "the audit of the recorded evidence gives the recorded verdict",
        "that the checkpoint, the times and the evidence came from a run of that agent within that budget",
        "Whoever produced the files can rewrite them consistently",
        "The published sha256 of the archive proves only which bundle was published",
    ):
        assert words in page, words
    assert "re-computed here" in verify_cli.PROVED and "recorded verdict" in verify_cli.PROVED
    assert "not proved" in verify_cli.NOT_PROVED and "within that budget" in verify_cli.NOT_PROVED
    assert "rewrite them consistently" in verify_cli.NOT_PROVED
    assert "which bundle was published" in verify_cli.NOT_PROVED
    claims = ("should not have to trust", "every recorded score, verdict and audit recomputed", "proves the run")
    for path in [*(ROOT / "bench" / "bundle").glob("*.py"), ROOT / "docs" / "publishing.md", ROOT / "README.md"]:
        text = " ".join(path.read_text().split())
        assert not [c for c in claims if c in text], path
