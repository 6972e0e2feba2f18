"""The bad inputs every task's ``prepare.py --eval`` must answer with one JSON error line (exit 1).

Never a score and never a bare traceback. They are built from a trained checkpoint, so that each
differs from a good one in one way.

Shared by ``bench tasks check`` and tests/tasks/test_conformance.py, which run them the same way
(forked_cli.py).
"""

from __future__ import annotations

import json
import pickle
import random
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import torch

from bench.errors import BenchError


class DriverFailed(BenchError, RuntimeError):
    """The forked driver could not import ``prepare.py`` in the workspace, so no case was run."""


EXTRA_KEY = "zz_not_in_the_model.weight"
FORKED_CLI = Path(__file__).resolve().parent / "forked_cli.py"
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
CODE_RAN = "code-ran"  # the file that unpickling the code_in_pickle case creates


class RunsCodeWhenUnpickled:
    """Unpickling this creates `path`.

    A checkpoint must be loaded without running code (weights_only).
    """

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


class Bad(NamedTuple):
    """One bad input to `prepare.py --eval`.

    Its arguments, and what its error message must (not) say.
    """

    args: list[str]
    mention: tuple[str, ...] = ()
    avoid: tuple[str, ...] = ()


def bad_inputs(ckpt: Path, folder: Path, data_dir: Path | None = None) -> dict[str, Bad]:
    """Every bad-input case for the trained checkpoint `ckpt`, its files written into `folder`.

    ``data_dir``: the prepared data every case but no_data reads (the default data/ of the folder it
    runs in when None).
    """
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
    cases = {
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
            ["--eval", saved("code.pt", {**payload, "config": RunsCodeWhenUnpickled(folder / CODE_RAN)})]
        ),
    }
    if data_dir is not None:
        cases = {
            k: v if k == "no_data" else v._replace(args=[*v.args, "--data-dir", str(data_dir)])
            for k, v in cases.items()
        }
    return cases


def run_forked(workspace: Path, commands: dict[str, list[str]], folder: Path) -> dict[str, subprocess.CompletedProcess]:
    """Each ``python prepare.py ARGS`` of ``commands``, run in ``workspace`` by forks of one driver.

    Returns {case: the process as if run alone}. DriverFailed (a RuntimeError) when the driver
    itself fails.
    """
    (folder / "cases.json").write_text(json.dumps(commands), encoding="utf-8")
    driver = subprocess.run(
        [sys.executable, str(FORKED_CLI), str(folder / "cases.json"), str(folder / "results.json")],
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if driver.returncode != 0:
        raise DriverFailed(
            f"prepare.py could not be imported in {workspace}: {(driver.stderr or driver.stdout)[-2000:]}"
        )
    results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    return {
        case: subprocess.CompletedProcess(commands[case], r["returncode"], r["stdout"], r["stderr"])
        for case, r in results.items()
    }
