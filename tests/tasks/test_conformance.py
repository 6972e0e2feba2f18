"""What every task folder promises, checked for each one on small GENERATED data (tests/tasks/smalldata.py).

The contracts that cross folders (../shared/docs/DESIGN.md):
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
import pickle
import random
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

from bench.tasks import all_tasks
from tests.tasks.smalldata import FACTORIES, factory
from tests.tasks.taskfolder import PROBES, expected_probes, last_json, run_prepare, task_modules

FOLDERS = {t.name: t.folder for t in all_tasks()}
NAMES = sorted(FOLDERS)
CONTRACT_KEYS = {"task", "metric", "value", "direction", "split", "checkpoint", "script", "seconds"}
PAYLOAD_KEYS = {"state_dict", "config", "script", "val_score", "metric", "time"}
# The val_score a baseline reports is computed in its training process by the same evaluation code as
# `prepare.py --eval`, on the same CPU (the `small` fixture hides CUDA while training, so no bf16 autocast or TF32
# enters a self-reported score), but with its own evaluation batch size: float32 results of differently
# shaped matrix products may differ in the last bits (float32 eps = 1.2e-7), and the per-sample losses are then
# summed in float64. 1e-6 relative allows ~8 ulps; counted metrics (accuracy, AUROC, mIoU) must match exactly in
# practice, since one sample or pixel moves them by far more than that.
REL = 1e-6
EXTRA_KEY = "zz_not_in_the_model.weight"
FORKED_CLI = Path(__file__).resolve().parent / "forked_cli.py"


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
    with pytest.raises(pytest.fail.Exception, match=r"'t8_new_task' has no small-data factory: add one to FACTORIES"):
        factory("t8_new_task")


# ---------------------------------------------------------------------------
# The output contract: the baseline's checkpoints
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_baseline_checkpoints_follow_the_output_contract(small, name):
    ws, trained = small.prepared(name)["ws"], small.trained(name)
    toml = declared(name)
    for ckpt in trained["checkpoints"]:
        assert ckpt.parent == ws / "checkpoints" and ckpt.suffix == ".pt", ckpt
        payload = torch.load(ckpt, map_location="cpu", weights_only=True)  # tensors and plain values only
        assert isinstance(payload, dict) and PAYLOAD_KEYS <= payload.keys(), (ckpt.name, sorted(payload))
        state = payload["state_dict"]
        assert state and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items())
        assert not any(k.startswith("_orig_mod.") for k in state)
        config = payload["config"]
        json.dumps(config)  # plain values: the harness records it as MLflow params
        assert {k: config.get(k) for k in trained["config"]} == trained["config"]  # what train.main() was given
        assert payload["script"] == "train.py"  # the name the script ran under (sys.argv[0])
        assert type(payload["val_score"]) is float and math.isfinite(payload["val_score"])
        assert payload["metric"] == toml["metric"]
        assert trained["started"] <= payload["time"] <= trained["finished"]  # a timestamp of when it was saved


# ---------------------------------------------------------------------------
# The official result: one JSON object
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_eval_prints_one_json_object(small, name):
    ws, run = small.prepared(name)["ws"], small.official(name)
    proc = run["proc"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = only_json_line(proc.stdout)
    assert CONTRACT_KEYS <= result.keys(), sorted(result)
    toml = declared(name)
    assert (result["task"], result["metric"], result["direction"], result["split"]) == (
        toml["id"],
        toml["metric"],
        toml["direction"],
        toml["eval_split"],
    )
    assert type(result["value"]) is float and math.isfinite(result["value"])
    assert (ws / result["checkpoint"]).resolve() == run["checkpoint"].resolve()
    assert (ws / result["script"]).resolve() == (ws / "train.py").resolve()
    assert type(result["seconds"]) in (int, float) and 0 <= result["seconds"] <= run["wall"]


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


class RunsCodeWhenUnpickled:
    """Unpickling this creates `path`: a checkpoint must be loaded without running code (weights_only)."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


class Bad(NamedTuple):
    """One bad input to `prepare.py --eval`: its arguments, and what its error message must (not) say."""

    args: list[str]
    mention: tuple[str, ...] = ()
    avoid: tuple[str, ...] = ()


def bad_inputs(ckpt: Path, folder: Path) -> dict[str, Bad]:
    """Every bad-input case for the trained checkpoint `ckpt`, its files written into `folder`."""
    payload = torch.load(ckpt, map_location="cpu", weights_only=True)
    state = payload["state_dict"]
    last_key = list(state)[-1]

    def saved(file: str, obj) -> str:
        torch.save(obj, folder / file)
        return str(folder / file)

    def written(file: str, blob: bytes) -> str:
        (folder / file).write_bytes(blob)
        return str(folder / file)

    good, nobuild = str(ckpt), written("run_nobuild.py", b"CONFIG = {}\n")
    compiled = {"_orig_mod." + k: v for k, v in state.items()}
    return {
        # strict loading; the torch.compile hint where it applies, and only there
        "extra_key": Bad(
            ["--eval", saved("extra.pt", {**payload, "state_dict": {**state, EXTRA_KEY: torch.zeros(1)}})],
            mention=(EXTRA_KEY,),
            avoid=("torch.compile",),
        ),
        "missing_key": Bad(
            ["--eval", saved("missing.pt", {**payload, "state_dict": {k: state[k] for k in state if k != last_key}})],
            mention=(last_key,),
            avoid=("torch.compile",),
        ),
        "compiled_state_dict": Bad(
            ["--eval", saved("compiled.pt", {**payload, "state_dict": compiled})],
            mention=("_orig_mod.", "torch.compile"),  # says what happened, not only which keys differ
        ),
        "missing_script": Bad(
            ["--eval", saved("no_script.pt", {**payload, "script": "run_missing.py"})], mention=("run_missing.py",)
        ),
        "no_build_model": Bad(["--eval", good, "--script", nobuild], mention=("build_model",)),
        "no_checkpoint": Bad(["--eval", str(folder / "no_such.pt")], mention=("no_such.pt",)),
        "no_data": Bad(["--eval", good, "--data-dir", str(folder / "nowhere")], mention=("nowhere",)),
        # garbage files
        "random_bytes": Bad(["--eval", written("random.pt", random.Random(0).randbytes(4096))]),
        "empty_file": Bad(["--eval", written("empty.pt", b"")]),
        "pickle_not_a_dict": Bad(["--eval", written("list.pkl", pickle.dumps(["state_dict", "config"]))]),
        "torch_file_not_a_dict": Bad(["--eval", saved("list.pt", ["state_dict", "config"])]),
        "code_in_pickle": Bad(
            ["--eval", saved("code.pt", {**payload, "config": RunsCodeWhenUnpickled(folder / "code-ran")})]
        ),
    }


CASES = [
    "extra_key",
    "missing_key",
    "compiled_state_dict",
    "missing_script",
    "no_build_model",
    "no_checkpoint",
    "no_data",
    "random_bytes",
    "empty_file",
    "pickle_not_a_dict",
    "torch_file_not_a_dict",
    "code_in_pickle",
]


@pytest.fixture(scope="module")
def cli_runs(small, tmp_path_factory):
    """Per task, every bad-input case and `--help`, each `python prepare.py ARGS` in the workspace (forked_cli.py)."""
    done: dict[str, dict] = {}

    def runs(name: str) -> dict:
        if name not in done:
            ws, ckpt = small.prepared(name)["ws"], small.trained(name)["checkpoints"][-1]
            folder = tmp_path_factory.mktemp(f"{name}-bad")
            cases = bad_inputs(ckpt, folder)
            assert sorted(cases) == sorted(CASES)
            commands = {case: [*bad.args, "--device", "cpu"] for case, bad in cases.items()}
            commands["help"] = ["--help"]
            (folder / "cases.json").write_text(json.dumps(commands), encoding="utf-8")
            driver = subprocess.run(
                [sys.executable, str(FORKED_CLI), str(folder / "cases.json"), str(folder / "results.json")],
                cwd=ws,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert driver.returncode == 0, driver.stdout + driver.stderr
            results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
            done[name] = {
                case: {"proc": subprocess.CompletedProcess(commands[case], r["returncode"], r["stdout"], r["stderr"])}
                for case, r in results.items()
            }
            for case, bad in cases.items():
                done[name][case].update(mention=bad.mention, avoid=bad.avoid)
            done[name]["code_in_pickle"]["ran"] = (folder / "code-ran").exists()
        return done[name]

    return runs


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", NAMES)
def test_eval_answers_bad_input_with_one_json_error(cli_runs, name, case):
    factory(name)
    run = cli_runs(name)[case]
    proc = run["proc"]
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    result = only_json_line(proc.stdout)
    assert result["task"] == declared(name)["id"] and "value" not in result, result
    assert isinstance(result.get("error"), str) and result["error"].strip(), result
    assert "Traceback" not in proc.stderr, proc.stderr
    for text in run["mention"]:
        assert text in result["error"], (text, result["error"])
    for text in run["avoid"]:
        assert text not in result["error"], (text, result["error"])
    if case == "code_in_pickle":
        assert not run["ran"], "loading the checkpoint ran code from its pickle"


@pytest.mark.parametrize("name", NAMES)
def test_prepare_py_documents_its_command_line(cli_runs, name):
    factory(name)
    proc = cli_runs(name)["help"]["proc"]
    assert proc.returncode == 0, proc.stderr
    for option in ("--prepare", "--raw-dir", "--data-dir", "--eval", "--script", "--device"):
        assert option in proc.stdout, f"{name}/prepare.py --help does not document {option}"


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


@pytest.mark.parametrize("name", NAMES)
def test_the_baseline_source_asks_for_nothing_the_audit_forbids(name):
    """No false positive of the rules read from code (2 pretrained weights, 3 internet, 4 installs): each task's
    baseline train.py, which agents copy, matches none of the audit's patterns (T3 loads its provided DINOv3 file
    with torch.load)."""
    from bench.rules.conduct import FETCH, INSTALL, PRETRAINED, PYTHON_FETCH

    source = (FOLDERS[name] / "train.py").read_text()
    for pattern in (PRETRAINED, PYTHON_FETCH, FETCH, INSTALL):
        hits = [line for line in source.splitlines() if pattern.search(line) and not line.lstrip().startswith("#")]
        assert not hits, (pattern.pattern[:40], hits)


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
