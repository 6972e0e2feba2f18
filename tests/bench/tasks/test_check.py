"""`bench tasks check DIR` (bench/conformance/): a task author's conformance suite, on the small data the folder
provides. Run end to end on the two cheapest built-in tasks (T6, T5) and on a broken copy of T6; the judgements
themselves on hand-made process outputs (no training)."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.conformance import promises
from bench.conformance.cases import Bad
from bench.conformance.check import check_main
from bench.errors import InputError

ROOT = Path(__file__).resolve().parents[3]
T6 = ROOT / "tasks" / "t6_time_series_forecasting"
T5 = ROOT / "tasks" / "t5_tabular_prediction"
PROMISES = 6  # source, payload, --eval line, bad inputs, held-out, scorer (T5, T6: the eval split is not val)


def check(folder: Path) -> tuple[int, list[str], str]:
    out, err = io.StringIO(), io.StringIO()
    status = check_main(str(folder), out=out, err=err)
    return status, out.getvalue().splitlines(), err.getvalue()


def pack_copy(tmp_path: Path, source: Path = T6) -> Path:
    return shutil.copytree(source, tmp_path / "pack" / source.name, ignore=shutil.ignore_patterns("__pycache__"))


@pytest.mark.slow
@pytest.mark.parametrize("folder", [T6, T5], ids=["t6", "t5"])
def test_a_built_in_task_keeps_every_promise(folder):
    status, lines, err = check(folder)
    assert status == 0, "\n".join(lines) + err[-3000:]
    assert [line for line in lines if line.startswith("FAIL")] == []
    assert sum(line.startswith("ok    ") for line in lines) == PROMISES, lines
    assert re.fullmatch(rf"t\d: all {PROMISES} promises kept \(\d+ s\)", lines[-1]), lines[-1]
    assert "train.py | " in err  # the training's output is shown as it runs


@pytest.mark.slow
def test_a_pack_without_held_out_and_with_broken_errors_fails_with_the_reasons(tmp_path):
    """A copy of T6 whose task.toml drops held_out (the test rows would reach every workspace) and whose --eval
    answers a missing checkpoint with a traceback and every other bad input with two JSON lines: each broken promise
    is a FAIL line naming what to change; the others still pass."""
    pack = pack_copy(tmp_path)
    toml = (pack / "task.toml").read_text(encoding="utf-8")
    (pack / "task.toml").write_text(re.sub(r"(?m)^held_out = .*\n", "", toml), encoding="utf-8")
    source = (pack / "prepare.py").read_text(encoding="utf-8")
    error_line = '        print(json.dumps({"task": TASK_ID, "error": f"{type(e).__name__}: {e}"}))\n'
    assert source.count(error_line) == 1
    prefix = '        if "no_such" in str(e):\n            raise\n'
    prefix += '        print(json.dumps({"task": TASK_ID, "status": "failed"}))\n'
    (pack / "prepare.py").write_text(source.replace(error_line, prefix + error_line), encoding="utf-8")

    status, lines, err = check(pack)
    assert status == 1, "\n".join(lines) + err[-3000:]
    fails = [line for line in lines if line.startswith("FAIL")]
    held = [line for line in fails if "held_out" in line]
    assert any("held_out is empty" in line for line in held), fails
    assert any("an agent's workspace can score the test split" in line for line in held), fails
    two_lines = [line for line in fails if "printed 2 lines on stdout" in line]
    assert len(two_lines) == 11, fails  # every other bad-input case, named
    assert {re.search(r"bad input (\w+):", line).group(1) for line in two_lines} >= {"extra_key", "no_data"}
    traceback = [line for line in fails if "bad input no_checkpoint" in line]
    assert any("a bare traceback" in line and "FileNotFoundError" in line for line in traceback), fails
    assert any("printed 0 lines on stdout" in line for line in traceback), fails
    ok = [line for line in lines if line.startswith("ok")]
    assert any("checkpoints follow the output contract" in line for line in ok), lines
    assert any("trusted scorer" in line for line in ok), lines
    assert lines[-1].startswith("t6: 2 promise(s) broken, 4 kept"), lines[-1]


def test_a_task_without_smalldata_is_told_to_add_it(tmp_path):
    pack = pack_copy(tmp_path)
    (pack / "smalldata.py").unlink()
    status, lines, _ = check(pack)
    assert status == 1
    assert any(line.startswith("FAIL") and "has no smalldata.py: add one" in line for line in lines), lines


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("TINY = {}\n", "define write_raw(raw: Path)"),
        ("def write_raw(raw):\n    return {}\n", "define TINY: a dict"),
        ("import no_such_module_here\n", "could not be imported: ModuleNotFoundError"),
    ],
)
def test_a_smalldata_that_breaks_the_contract_is_named(tmp_path, source, says):
    pack = pack_copy(tmp_path)
    (pack / "smalldata.py").write_text(source, encoding="utf-8")
    status, lines, _ = check(pack)
    assert status == 1
    fails = [line for line in lines if line.startswith("FAIL")]
    assert len(fails) == 1 and says in fails[0], lines


def test_a_folder_that_is_not_a_task_exits_2_with_what_to_give(tmp_path):
    with pytest.raises(InputError, match="not a task folder"):
        check_main(str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-m", "bench.entrypoint", "tasks", "check", str(tmp_path / "nowhere")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "is not a folder" in proc.stderr


def test_the_workspace_builder_never_copies_smalldata(tmp_path):
    """smalldata.py stays with the task author: the harness's workspace holds only program.md, train.py and the
    locked files (plus data/ and the harness's folders)."""
    from bench.pipeline import workspace
    from bench.tasks import load_task

    data = tmp_path / "data"
    data.mkdir()
    (data / "train.npy").write_bytes(b"x")
    ws = workspace.create(load_task(T6), data, campaign="c", agent="a", repeat=1, root=tmp_path / "runs")
    assert (T6 / "smalldata.py").is_file()
    names = ["prepare.py", "program.md", "task_helpers.py", "train.py"]  # task_helpers.py: locked, shared by the tasks
    assert sorted(p.name for p in ws.path.iterdir() if p.is_file()) == names
    assert not (ws.path / "task_helpers.py").is_symlink()  # the task folder's link is copied as the file's content


# ---------------------------------------------------------------------------
# The judgements on hand-made outputs
# ---------------------------------------------------------------------------


def proc(returncode: int, stdout: str, stderr: str = "") -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess(["prepare.py"], returncode, stdout, stderr)


GOOD_ERROR = json.dumps({"task": "t6", "error": "RuntimeError: Unexpected key(s) in state_dict: zz.weight"}) + "\n"


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (proc(1, GOOD_ERROR), None),
        (proc(1, GOOD_ERROR, "Traceback (most recent call last):\n  ...\nKeyError: 'x'\n"), "a bare traceback"),
        (proc(1, "", "Traceback (most recent call last):\nKeyError: 'x'\n"), "printed 0 lines"),
        (proc(1, GOOD_ERROR + GOOD_ERROR), "printed 2 lines"),
        (proc(0, GOOD_ERROR), "exit status 0, must be 1"),
        (proc(1, json.dumps({"task": "t6", "error": "x", "value": 0.3}) + "\n"), "printed a value (0.3)"),
        (proc(1, json.dumps({"task": "t6", "error": "bad checkpoint"}) + "\n"), "should name 'zz.weight'"),
        (proc(1, json.dumps({"task": "t6"}) + "\n"), "needs an 'error'"),
        (proc(1, "not json\n"), "not JSON"),
    ],
)
def test_a_bad_input_answer_is_judged(answer, says):
    problems = promises.bad_input_problems("extra_key", answer, Bad([], mention=("zz.weight",)), "t6", False)
    if says is None:
        assert problems == []
    else:
        assert problems and any(says in p for p in problems), problems
        assert all(p.startswith("prepare.py --eval, bad input extra_key: ") for p in problems)


def test_held_out_is_judged_from_the_declaration_and_the_workspace():
    toml = {"eval_split": "test", "held_out": ["test.npy"]}
    assert promises.held_out_problems(toml, "val", {"train.npy", "test.npy"}, {"split": "val", "value": 0.4}) == []
    assert promises.held_out_problems({**toml, "eval_split": "val", "held_out": []}, "val", {"val.npy"}, None) == []
    missing = promises.held_out_problems(toml, "val", {"train.npy"}, None)
    assert missing == ["task.toml: held_out names 'test.npy', which prepare.py --prepare does not write"]
    leaked = promises.held_out_problems(toml, "val", {"test.npy"}, {"split": "test", "value": 0.4})
    assert len(leaked) == 1 and "can score the test split" in leaked[0]
    none = promises.held_out_problems({"eval_split": "test"}, "val", {"test.npy"}, None)
    assert len(none) == 1 and "held_out is empty" in none[0]
    # a pack that ships its held-out file in the task folder (an installed pack's folder is in every sandbox)
    files = ("task.toml", "prepare.py", "data/test.npy", "data/train.npy")
    shipped = promises.held_out_problems(toml, "val", {"train.npy", "test.npy"}, None, files)
    assert len(shipped) == 1 and "the task folder ships 'data/test.npy', a held_out file" in shipped[0]
    assert promises.held_out_problems(toml, "val", {"train.npy", "test.npy"}, None, files[:2] + files[3:]) == []
