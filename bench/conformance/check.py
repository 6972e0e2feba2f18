"""``bench tasks check DIR``: the conformance suite as a command for a task author.

It runs the task folder the way the harness does, on the small GENERATED data its ``smalldata.py``
writes (:mod:`bench.tasks.smalldata`), in a temporary folder (the author's folder is only read):
``prepare.py --prepare`` on the raw files; a real agent workspace built by the harness's own builder
(:mod:`bench.pipeline.workspace`: the held-out files left out); the baseline ``train.py`` trained
there with the ``TINY`` config on the CPU (its output shown as it trains); its checkpoints against
the output contract; ``prepare.py --eval`` (the one JSON line), the bad inputs
(:mod:`bench.conformance.cases`), ``--eval`` from inside the workspace (which must not reach the
eval split's labels), and the trusted scorer with its probes (:mod:`bench.pipeline.evaluate`,
sandboxed where bubblewrap works). Each broken promise is one ``FAIL`` line saying what to change
(:mod:`bench.conformance.promises`); exit 0 when every promise holds, 1 otherwise, 2 for a folder
that is not a task.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from bench.conformance import cases, promises
from bench.errors import BenchError, InputError
from bench.tasks import Task, TaskError, load_task, smalldata

NOT_COPIED = shutil.ignore_patterns("data", "checkpoints", "weights", "__pycache__")
TRAIN_TIMEOUT_S = 1800
# Runs train.main(dict(train.CONFIG, **TINY)) as `python train.py` would name itself (the payload's
# script), and writes the config it was given first (the payload must carry it).
DRIVER = """\
import copy, json, sys, time
sys.path.insert(0, ".")
sys.argv = ["train.py"]
import train
config = dict(train.CONFIG, **json.loads(sys.stdin.read()))
with open(OUT, "w") as f:
    json.dump({"config": copy.deepcopy(config), "started": time.time()}, f)
train.main(config)
"""


class StepFailed(BenchError, RuntimeError):
    """The task's own code (``prepare.py``, ``train.py``) failed a step; the message says how."""


class Broken(BenchError):
    """A promise broken so early that nothing after it can be checked (no data, no checkpoint)."""


class Check:
    """One check of one folder: the promises kept and broken, printed as they are judged."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out, self.err, self.broken, self.kept = out, err, 0, 0

    def say(self, text: str) -> None:
        """A progress line, on the error stream (the verdicts go to the output stream)."""
        print(text, file=self.err, flush=True)

    def promise(self, title: str, problems: list[str]) -> None:
        """Print the promise's verdict: each problem as a FAIL line, or ``ok`` when none."""
        for line in problems:
            print(f"FAIL  {line}", file=self.out, flush=True)
        if problems:
            self.broken += 1
        else:
            self.kept += 1
            print(f"ok    {title}", file=self.out, flush=True)

    def step(self, title: str, fn: Callable[[], object]) -> object:
        """Run one step with its time shown; an exception is the step's broken promise (Broken)."""
        self.say(f"... {title}")
        t0 = time.monotonic()
        try:
            value = fn()
        except Broken:
            raise
        except Exception as e:  # the task's own code failed: say where, then stop
            self.promise(title, [f"{title}: {type(e).__name__}: {e}"])
            raise Broken from e
        self.say(f"    {title}: {time.monotonic() - t0:.1f} s")
        return value


def _run(cmd: list[str], cwd: Path, timeout: float = 900, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, **kw)


def _tail(proc: subprocess.CompletedProcess) -> str:
    return " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-4:])[-600:]


def _prepare(folder: Path, work: Path, small: smalldata.SmallData) -> Path:
    raw, data = work / "raw", work / "data"
    raw.mkdir()
    small.write_raw(raw)
    copy = shutil.copytree(folder, work / "task", ignore=NOT_COPIED)  # --prepare writes nothing in the author's folder
    proc = _run([sys.executable, "prepare.py", "--prepare", "--raw-dir", str(raw), "--data-dir", str(data)], copy)
    if proc.returncode != 0:
        raise StepFailed(f"prepare.py --prepare failed on the small data (exit {proc.returncode}): {_tail(proc)}")
    return data


def _train(ws: Path, work: Path, small: smalldata.SmallData, check: Check) -> dict:
    """The baseline on the CPU, output shown.

    CUDA hidden: its self-reported scores are the CPU evaluator's.
    """
    given = work / "given.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONPATH", None)
    code = f"OUT = {str(given)!r}\n" + DRIVER
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ws, env=env, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    proc.stdin.write(json.dumps(small.tiny))
    proc.stdin.close()
    lines: list[str] = []
    timer = threading.Timer(TRAIN_TIMEOUT_S, proc.kill)  # a silent, hung training ends too
    timer.start()
    try:
        for line in proc.stdout:
            lines.append(line.rstrip())
            check.say(f"    train.py | {line.rstrip()[:160]}")
        status, finished = proc.wait(), time.time()
    finally:
        timer.cancel()
    if status != 0 and time.monotonic() - t0 >= TRAIN_TIMEOUT_S:
        raise StepFailed(f"train.py with TINY {small.tiny} ran past {TRAIN_TIMEOUT_S} s: make TINY smaller")
    if status != 0:
        raise StepFailed(f"train.py with TINY {small.tiny} exited {status}: " + " | ".join(lines[-4:])[-600:])
    ckpts = sorted((ws / "checkpoints").glob("*.pt"), key=lambda p: (p.stat().st_mtime_ns, p.name))
    if not ckpts:
        raise StepFailed(f"train.py saved no checkpoint with TINY {small.tiny}: make TINY train until it saves one")
    return {**json.loads(given.read_text(encoding="utf-8")), "finished": finished, "checkpoints": ckpts}


def _payloads(task: Task, toml: dict, trained: dict) -> tuple[list[str], float]:
    import torch

    from bench.pipeline.collect import read

    problems = []
    if "def save_checkpoint" not in task.file("prepare.py").read_text(encoding="utf-8"):
        problems.append("prepare.py defines no save_checkpoint(): the locked helper every script saves through")
    if "save_checkpoint" not in task.file("train.py").read_text(encoding="utf-8"):
        problems.append("train.py does not call prepare.save_checkpoint(): save checkpoints through the locked helper")
    val = float("nan")
    for ckpt in trained["checkpoints"]:
        try:
            payload = torch.load(ckpt, map_location="cpu", weights_only=True)
            read(ckpt, started_at=0.0)  # the harness's own reader accepts it
        except Exception as e:  # NotACheckpoint, or torch refused it
            problems.append(f"checkpoint {ckpt.name}: not readable as the harness reads it: {type(e).__name__}: {e}")
            continue
        problems += promises.payload_problems(
            ckpt.name, payload, toml, trained["config"], trained["started"], trained["finished"]
        )
        val = payload.get("val_score", val) if isinstance(payload, dict) else val
    return problems, val


def _eval(ws: Path, ckpt: Path, data: Path | None) -> tuple[subprocess.CompletedProcess, float]:
    cmd = [sys.executable, "prepare.py", "--eval", str(ckpt.relative_to(ws)), "--device", "cpu"]
    t0 = time.perf_counter()
    proc = _run(cmd + (["--data-dir", str(data)] if data else []), ws)
    return proc, time.perf_counter() - t0


def _bad_inputs(task: Task, ws: Path, ckpt: Path, data: Path, work: Path) -> list[str]:
    folder = work / "bad"
    folder.mkdir()
    bad = cases.bad_inputs(ckpt, folder, data_dir=data)
    commands = {case: [*b.args, "--device", "cpu"] for case, b in bad.items()}
    runs = cases.run_forked(ws, {**commands, "help": ["--help"]}, folder)
    problems = promises.help_problems(runs["help"])
    for case, b in bad.items():
        ran = case == "code_in_pickle" and (folder / cases.CODE_RAN).exists()
        problems += promises.bad_input_problems(case, runs[case], b, task.id, ran)
    return problems


def _scorer(task: Task, ws: Path, ckpt: Path, data: Path, work: Path, check: Check) -> dict:
    from bench.pipeline.evaluate import evaluate, stage
    from bench.sandbox.bwrap import probe
    from bench.scoring.job import ScoringJob

    why = probe()
    if why is not None:
        check.say(f"    the scorer runs unsandboxed here: {why}")
    eval_dir = stage(task, ws, work / "eval" / "candidate", ckpt)
    return evaluate(ScoringJob(task.folder, data, eval_dir, "train.py", sandboxed=why is None)).to_dict()


def check_folder(folder: Path, work: Path, check: Check) -> None:
    """Every promise of the task folder, judged into ``check``.

    ``work``: an empty folder of the check's own.
    """
    from bench.pipeline import workspace

    task = load_task(folder)
    with open(folder / "task.toml", "rb") as f:
        toml = tomllib.load(f)  # what the author wrote, beside the registry's reading of it
    try:
        small = smalldata.load(folder)
    except FileNotFoundError:
        check.promise("small data", [f"{folder} has no smalldata.py: add one (write_raw, TINY; docs/extending.md)"])
        return
    except smalldata.SmallDataError as e:
        check.promise("small data", [str(e)])
        return
    except Exception as e:  # a smalldata.py that does not even import
        check.promise("small data", [f"{folder}/smalldata.py could not be imported: {type(e).__name__}: {e}"])
        return
    check.promise("the baseline train.py asks for nothing the audit forbids", promises.source_problems(
        task.file("train.py").read_text(encoding="utf-8")))  # fmt: skip
    data = check.step("prepare.py --prepare on the small data", lambda: _prepare(folder, work, small))
    ws = check.step("an agent workspace (bench/pipeline/workspace.py)", lambda: workspace.create(
        task, data, campaign="check", agent="check", repeat=1, root=work / "runs").path)  # fmt: skip
    if small.setup is not None:
        check.step("smalldata.setup(workspace)", lambda: small.setup(ws))
    trained = check.step(f"training the baseline in an agent workspace with TINY {small.tiny}",
                         lambda: _train(ws, work, small, check))  # fmt: skip
    problems, reported = _payloads(task, toml, trained)
    check.promise("the baseline's checkpoints follow the output contract", problems)
    ckpt = trained["checkpoints"][-1]
    proc, wall = check.step("prepare.py --eval", lambda: _eval(ws, ckpt, data))
    check.promise("prepare.py --eval prints the contract's one JSON line",
                  promises.eval_line_problems(proc, toml, ws, ckpt, wall))  # fmt: skip
    line, _ = promises.one_json_line(proc.stdout)
    value = line.get("value") if line and proc.returncode == 0 else None
    if small.val_split == toml.get("eval_split") and isinstance(value, float):
        agree = promises.close(reported, value)
        check.promise("the self-reported val_score is --eval's score on the validation split", [] if agree else [
            f"the baseline's val_score {reported!r} is not prepare.py --eval's {value!r} on the same (validation) "
            "split: report the evaluator's own score"])  # fmt: skip
    bad = check.step("the bad inputs", lambda: _bad_inputs(task, ws, ckpt, data, work))
    check.promise("every bad input gets one JSON error line, exit 1, no score, no traceback", bad)
    inside = None
    if small.val_split != toml.get("eval_split"):
        proc_ws, _ = check.step("prepare.py --eval inside the agent's workspace", lambda: _eval(ws, ckpt, None))
        inside, _ = promises.one_json_line(proc_ws.stdout)
    prepared = {p.relative_to(data).as_posix() for p in data.rglob("*") if p.is_file()}
    split = toml.get("eval_split")
    title = f"the {split} labels stay out of the workspace (held_out)"
    if split == small.val_split:
        title = f"nothing to hold out: the task is scored on its validation split ({split}), which agents have"
    shipped = tuple(p.relative_to(task.folder).as_posix() for p in task.folder.rglob("*") if p.is_file())
    check.promise(title,
                  promises.held_out_problems(toml, small.val_split, prepared, inside, shipped))  # fmt: skip
    official = check.step("the trusted scorer and its probes", lambda: _scorer(task, ws, ckpt, data, work, check))
    check.promise("the trusted scorer gives --eval's number; the baseline passes the probes and rule 9",
                  promises.scorer_problems(official, value, toml, reported))  # fmt: skip


def check_main(folder: str, *, keep: bool = False, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """``bench tasks check DIR``.

    0 when every promise holds, 1 when one is broken (InputError: not a task).
    """
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise InputError(f"{folder} is not a folder: give a task folder (with task.toml)")
    try:
        task = load_task(path.resolve())
    except (TaskError, tomllib.TOMLDecodeError) as e:
        raise InputError(f"{folder} is not a task folder: {e}") from e
    check = Check(out, err)
    work = Path(tempfile.mkdtemp(prefix=f"bench-check-{task.id}-"))
    check.say(f"checking {task.id} ({path.resolve()}) in {work}")
    t0 = time.monotonic()
    try:
        check_folder(path.resolve(), work, check)
    except Broken:
        pass
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    took = time.monotonic() - t0
    if check.broken:
        print(f"{task.id}: {check.broken} promise(s) broken, {check.kept} kept ({took:.0f} s)", file=out)
        return 1
    print(f"{task.id}: all {check.kept} promises kept ({took:.0f} s)", file=out)
    return 0
