"""What every task folder promises, checked for each one on small GENERATED data (tests/tasks/smalldata.py).

The contracts that cross folders (between a task folder and the harness; ARCHITECTURE.md names the modules on the
harness's side, steps 5 and 7 of its tables):
  * checkpoint: a file in checkpoints/ whose payload holds the state dict, the config for build_model, the script
    name, the self-reported validation score, the metric name and a timestamp, saved through the locked
    prepare.save_checkpoint(), so that the baseline train.py already follows it;
  * official result: `prepare.py --eval` prints one JSON object (task, metric, value, direction, split, checkpoint,
    script, seconds), rebuilds the model with build_model(config) and loads the state dict with strict=True;
  * every bad input gives one JSON line with an error (exit status 1), never a score and never a bare traceback;
  * the val_score a script reports is the evaluator's own score on the validation split, so that ranking checkpoints
    by it (the harness's selection) ranks them by the metric.

The suite is parametrized over every folder bench.tasks.all_tasks() finds: a new task folder is covered at once, and
its tests fail until smalldata.FACTORIES has an entry for it. task.toml is read here with tomllib, independently of
the registry under test. Each task's baseline is trained once per session (the `small` fixture, on the CPU), and the
bad-input evaluations of a task run in forks of one interpreter (forked_cli.py), not one interpreter start-up each.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch

from bench.conformance import promises
from bench.conformance.cases import CASES, CODE_RAN, bad_inputs, run_forked
from bench.conformance.promises import CONTRACT_KEYS, REL
from bench.tasks import all_tasks
from tests.tasks.smalldata import FACTORIES, factory
from tests.tasks.taskfolder import PROBES, expected_probes, last_json, run_prepare, task_modules

FOLDERS = {t.name: t.folder for t in all_tasks()}
NAMES = sorted(FOLDERS)


def declared(name: str) -> dict:
    """The task's task.toml, read here (not through bench.tasks)."""
    with open(FOLDERS[name] / "task.toml", "rb") as f:
        return tomllib.load(f)


def only_json_line(stdout: str) -> dict:
    lines = stdout.splitlines()
    assert len(lines) == 1, f"expected exactly one line (a JSON object) on stdout, got {len(lines)}:\n{stdout}"
    result = json.loads(lines[0])
    assert isinstance(result, dict), f"not a JSON object: {lines[0]}"
    return result


# ---------------------------------------------------------------------------
# Every task folder has a small-data factory
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_task_folder_has_a_small_data_factory(name):
    spec = factory(name)  # fails (never skips) with what to add
    assert spec.tiny and spec.val_split


def test_every_factory_names_a_task_folder():
    assert set(FACTORIES) <= set(NAMES), f"factories without a task folder: {sorted(set(FACTORIES) - set(NAMES))}"


def test_a_task_without_a_factory_fails_with_what_to_add():
    expected = r"'t8_new_task' has no small-data factory: add smalldata.py to the task folder"
    with pytest.raises(pytest.fail.Exception, match=expected):
        factory("t8_new_task")


# ---------------------------------------------------------------------------
# The output contract: the baseline's checkpoints
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_baseline_checkpoints_follow_the_output_contract(small, name):
    """Each checkpoint's payload (the judgement `bench tasks check` prints: bench.conformance.promises)."""
    ws, trained = small.prepared(name)["ws"], small.trained(name)
    toml = declared(name)
    for ckpt in trained["checkpoints"]:
        assert ckpt.parent == ws / "checkpoints" and ckpt.suffix == ".pt", ckpt
        payload = torch.load(ckpt, map_location="cpu", weights_only=True)  # tensors and plain values only
        started, finished = trained["started"], trained["finished"]
        assert promises.payload_problems(ckpt.name, payload, toml, trained["config"], started, finished) == []
        assert payload["script"] == "train.py" and payload["metric"] == toml["metric"]  # the judge's basis, directly


# ---------------------------------------------------------------------------
# The official result: one JSON object
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_eval_prints_one_json_object(small, name):
    ws, run = small.prepared(name)["ws"], small.official(name)
    proc = run["proc"]
    assert promises.eval_line_problems(proc, declared(name), ws, run["checkpoint"], run["wall"]) == [], proc.stderr
    result = only_json_line(proc.stdout)
    assert CONTRACT_KEYS <= result.keys() and result["task"] == declared(name)["id"], sorted(result)
    assert type(result["value"]) is float and math.isfinite(result["value"])


@pytest.mark.parametrize("name", NAMES)
def test_self_reported_val_score_is_the_evaluators_score_on_val(small, name):
    spec, toml, run = factory(name), declared(name), small.official(name)
    payload = torch.load(run["checkpoint"], map_location="cpu", weights_only=True)
    if spec.val_split == toml["eval_split"]:
        value = last_json(run["proc"])["value"]  # the official evaluation is on the validation split itself
    else:
        # prepare.py --eval scores the eval split only (it has no option for another split): its evaluate(), the
        # function --eval calls, on the validation split
        with task_modules(small.prepared(name)["ws"]) as (prepare, _):
            model = prepare.rebuild_model(payload, "train.py")
            value = prepare.evaluate(model, spec.val_split)[toml["metric"]]
    assert payload["val_score"] == pytest.approx(value, rel=REL, abs=0)


# ---------------------------------------------------------------------------
# Bad input: one JSON error line, exit status 1, never a score
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli_runs(small, tmp_path_factory):
    """Per task, every bad-input case (bench.conformance.cases) and `--help`, each `python prepare.py ARGS` in the
    workspace (forks of one interpreter: bench/conformance/forked_cli.py)."""
    done: dict[str, dict] = {}

    def runs(name: str) -> dict:
        if name not in done:
            ws, ckpt = small.prepared(name)["ws"], small.trained(name)["checkpoints"][-1]
            folder = tmp_path_factory.mktemp(f"{name}-bad")
            cases = bad_inputs(ckpt, folder)
            assert sorted(cases) == sorted(CASES)
            commands = {case: [*bad.args, "--device", "cpu"] for case, bad in cases.items()}
            procs = run_forked(ws, {**commands, "help": ["--help"]}, folder)
            done[name] = {case: {"proc": proc, "bad": cases.get(case)} for case, proc in procs.items()}
            done[name]["code_in_pickle"]["ran"] = (folder / CODE_RAN).exists()
        return done[name]

    return runs


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", NAMES)
def test_eval_answers_bad_input_with_one_json_error(cli_runs, name, case):
    """Exit 1, one JSON line with the task and an error naming what is wrong, no value, no traceback, no code run
    from a pickle (the judgement `bench tasks check` prints, bench.conformance.promises)."""
    factory(name)
    run = cli_runs(name)[case]
    problems = promises.bad_input_problems(case, run["proc"], run["bad"], declared(name)["id"], run.get("ran", False))
    assert problems == [], (problems, run["proc"].stdout, run["proc"].stderr[-2000:])
    assert run["proc"].returncode == 1 and "error" in only_json_line(run["proc"].stdout)  # the judge's own basis


@pytest.mark.parametrize("name", NAMES)
def test_prepare_py_documents_its_command_line(cli_runs, name):
    factory(name)
    proc = cli_runs(name)["help"]["proc"]
    assert promises.help_problems(proc) == []
    assert "--eval" in proc.stdout and "--data-dir" in proc.stdout


def test_forked_cli_gives_what_python_prepare_py_gives(small, cli_runs):
    """The bad-input cases run in forks of one interpreter (forked_cli.py): for two of them, a real `python
    prepare.py` process prints the same, with the same exit status."""
    name = "t6_time_series_forecasting" if "t6_time_series_forecasting" in NAMES else NAMES[0]
    factory(name)
    for case in ("help", "no_checkpoint"):
        forked = cli_runs(name)[case]["proc"]
        real = run_prepare(small.prepared(name)["ws"], *forked.args)
        assert (forked.returncode, forked.stdout) == (real.returncode, real.stdout), case


# ---------------------------------------------------------------------------
# The official path: the harness's trusted scorer and sandboxed predictor (bench/scoring)
# ---------------------------------------------------------------------------


def official_through_the_scorer(
    ws: Path, ckpt: Path, folder: Path, name: str, script: str = "train.py"
) -> tuple[dict, subprocess.CompletedProcess]:
    """Stage an evaluation folder as the harness does (the task's original locked files, the workspace's train.py,
    the checkpoint) and score it with `python -I -m bench.scoring.scorer`, sandboxed where bwrap works here."""
    from bench.pipeline.evaluate import CHECKPOINT, stage
    from bench.sandbox import probe
    from bench.tasks import all_tasks

    task = next(t for t in all_tasks() if t.name == name)
    eval_dir = stage(task, ws, folder / "eval", ckpt)
    cmd = [sys.executable, "-I", "-m", "bench.scoring.scorer", "--task-dir", str(FOLDERS[name])]
    cmd += ["--data-dir", str(ws / "data"), "--eval-dir", str(eval_dir), "--checkpoint", CHECKPOINT]
    cmd += ["--script", script, "--device", "cpu"]
    if probe() is not None:
        cmd.append("--unsandboxed")
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=900)
    return only_json_line(proc.stdout), proc


@pytest.mark.parametrize("name", NAMES)
def test_official_score_through_the_scorer_is_the_tasks_metric(small, name, tmp_path):
    """The scorer (labels on its side, the model in a sandboxed predictor) prints the contract's JSON with the same
    number the task's own evaluate() gives on the eval split, and the honest baseline passes every probe."""
    ws, run = small.prepared(name)["ws"], small.official(name)
    result, proc = official_through_the_scorer(ws, run["checkpoint"], tmp_path, name)
    assert proc.returncode == 0 and "error" not in result, (result, proc.stderr[-2000:])
    toml = declared(name)
    assert (result["task"], result["metric"], result["direction"], result["split"]) == (
        toml["id"],
        toml["metric"],
        toml["direction"],
        toml["eval_split"],
    )
    assert CONTRACT_KEYS <= result.keys()
    assert result["value"] == pytest.approx(last_json(run["proc"])["value"], rel=REL, abs=1e-12)
    # every probe the feed allows: history independence needs more than one batch (the small data's eval split
    # fits in one for T2-T5 and T7)
    assert set(expected_probes(1)) <= set(result["checks"]) <= {*PROBES, "causality"}
    # no false positive of the rule-9 audit: the harness's own validation score of the honest checkpoint agrees
    # with the one its script reported, within the audit's stated tolerance
    from bench.pipeline.collect import read
    from bench.rules.scoring import VAL_ABS_TOL, VAL_REL_TOL

    reported = read(run["checkpoint"], started_at=0.0).val_score
    assert abs(reported - result["val_value"]) <= max(VAL_ABS_TOL, VAL_REL_TOL * abs(result["val_value"])), (
        reported,
        result["val_value"],
    )
    if toml["eval_split"] == "val":
        assert result["val_value"] == result["value"]
    # the same judgement, as `bench tasks check` prints it
    assert promises.scorer_problems(result, last_json(run["proc"])["value"], toml, reported) == []


@pytest.mark.parametrize("name", NAMES)
def test_the_baseline_source_asks_for_nothing_the_audit_forbids(name):
    """No false positive of the rules read from code (2 pretrained weights, 3 internet, 4 installs): each task's
    baseline train.py, which agents copy, matches none of the audit's patterns (T3 loads its provided DINOv3 file
    with torch.load)."""
    assert promises.source_problems((FOLDERS[name] / "train.py").read_text()) == []


SCORER_BAD = ("extra_key", "compiled_state_dict", "no_build_model", "random_bytes", "code_in_pickle")


@pytest.mark.parametrize("case", SCORER_BAD)
def test_the_scorer_answers_a_bad_checkpoint_with_an_error_and_no_score(small, case, tmp_path):
    """The predictor's side of the official path is the same for every task: T6 stands for all of them."""
    name = "t6_time_series_forecasting"
    ws, ckpt = small.prepared(name)["ws"], small.trained(name)["checkpoints"][-1]
    bad = bad_inputs(ckpt, tmp_path)[case]
    path, script = Path(bad.args[1]), bad.args[3] if "--script" in bad.args else None
    if script:  # the scored script has no build_model
        shutil.copyfile(script, ws / Path(script).name)
    try:
        named = Path(script).name if script else "train.py"
        result, proc = official_through_the_scorer(ws, path, tmp_path, name, named)
    finally:
        if script:
            (ws / Path(script).name).unlink()
    assert proc.returncode == 1 and "value" not in result, result
    assert isinstance(result.get("error"), str) and result["error"].strip()
    for text in bad.mention:
        assert text in result["error"], (text, result["error"])
    assert not (tmp_path / "code-ran").exists(), "loading the checkpoint ran code from its pickle"
