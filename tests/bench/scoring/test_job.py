"""The scorer's input (bench/scoring/job.py) crosses to the scorer's process whole, through its command line.

The harness builds a ScoringJob and runs ``python -I -m bench.scoring.scorer`` with the job's arguments; the scorer
reads the same job back. A field added to the job without its flag would be lost on the way: the round trip below
names every field, so such a field fails it.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

from bench.pipeline import evaluate
from bench.sandbox.resource_limits import Limits
from bench.scoring.job import CHECKPOINT, ScoringJob

# every field with a value its default is not: the round trip then shows that each one crosses
GIVEN = {
    "task_dir": Path("/tasks/t6"),
    "data_dir": Path("/cache/t6"),
    "eval_dir": Path("/runs/r/eval/00-best"),
    "script": "run_2.py",
    "checkpoint": "other.pt",
    "device": "cuda",
    "timeout_s": 42.5,
    "sandboxed": False,
    "validate": False,
    "secret": "ab" * 16,
    "limits": Limits(memory_bytes=3 << 30, processes=77),
}


def test_every_field_of_the_job_crosses_the_command_line() -> None:
    assert {f.name for f in dataclasses.fields(ScoringJob)} == set(GIVEN), "a new field: give it a value here"
    job = ScoringJob(**GIVEN)
    assert ScoringJob.parse(job.argv()) == job


def test_the_defaults_cross_as_defaults() -> None:
    job = ScoringJob(Path("/t"), Path("/d"), Path("/e"), "train.py")
    back = ScoringJob.parse(job.argv())
    assert back == job
    assert (back.checkpoint, back.device, back.sandboxed, back.validate) == (CHECKPOINT, "cpu", True, True)
    assert back.timeout_s is None and back.secret is None and back.limits is None


def test_no_limit_crosses_as_none() -> None:
    job = ScoringJob(Path("/t"), Path("/d"), Path("/e"), "train.py", limits=Limits(memory_bytes=None, processes=None))
    assert job.argv()[-4:] == ["--memory", "none", "--max-processes", "none"]
    assert ScoringJob.parse(job.argv()).limits == Limits(memory_bytes=None, processes=None)


def test_the_harness_runs_the_scorer_with_the_jobs_arguments(tmp_path, monkeypatch) -> None:
    """evaluate.evaluate hands the scorer the job it was given (its timeout resolved), and reads back its JSON."""
    seen: list[list[str]] = []

    def scorer(cmd, **kwargs):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout="log line\n" + json.dumps({"value": 0.25}) + "\n", stderr="")

    monkeypatch.setattr(evaluate.subprocess, "run", scorer)
    job = ScoringJob(**{**GIVEN, "eval_dir": tmp_path / "eval"})
    official = evaluate.evaluate(job)
    assert official.ok and official.value == 0.25
    (cmd,) = seen
    assert cmd[1:4] == ["-I", "-m", "bench.scoring.scorer"]
    assert ScoringJob.parse(cmd[4:]) == job
    # no timeout given: the scorer is told BENCH_EVAL_TIMEOUT's, the one the harness waits for
    monkeypatch.setenv("BENCH_EVAL_TIMEOUT", "77")
    evaluate.evaluate(dataclasses.replace(job, timeout_s=None))
    assert ScoringJob.parse(seen[-1][4:]).timeout_s == 77.0
