"""The scorer's input.

One staged checkpoint to score, as the harness hands it to the scorer's process.

:func:`bench.pipeline.evaluate.evaluate` builds a :class:`ScoringJob` and passes it on the scorer's
command line (:meth:`ScoringJob.argv`); the scorer's process reads it back
(:meth:`ScoringJob.parse`) and :func:`bench.scoring.scorer.score_checkpoint` takes it whole. An
option the scorer needs is a field here and its flag in :meth:`~ScoringJob.argv` and :func:`parser`;
no signature between the harness and the scorer changes (``tests/bench/scoring/test_job.py`` checks
that every field crosses the command line).

Standard library only: the harness builds a job without importing numpy or the scorer.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from bench.sandbox.resource_limits import Limits

CHECKPOINT = "checkpoint.pt"  # the candidate's name inside its evaluation folder


@dataclass(frozen=True)
class ScoringJob:
    """One checkpoint to score.

    Where the task, the labels and the staged folder are, and how to score it.
    """

    task_dir: Path  # the task's folder: its ORIGINAL prepare.py and task.toml (never the workspace's copies)
    data_dir: Path  # the harness's prepared data: the inputs and labels, read by the scorer only
    eval_dir: Path  # the staged folder: the locked files, the scripts, the checkpoint; all the predictor sees
    script: str  # the file in ``eval_dir`` whose ``build_model`` rebuilds the model
    checkpoint: str = CHECKPOINT  # the checkpoint's file name in ``eval_dir``
    device: str = "cpu"  # cpu or cuda
    timeout_s: float | None = None  # None: BENCH_EVAL_TIMEOUT (bench.settings)
    sandboxed: bool = True  # the predictors in the sandbox (False: tests and unsandboxed runs)
    validate: bool = True  # also the harness's validation score (rule 9); window candidates skip it
    secret: str | None = None  # the probes' secret (None: the scorer draws one); bench verify gives the recorded
    # the run's limits; only the predictors' share (memory, processes) crosses to the scorer; None:
    # the defaults
    limits: Limits | None = None

    def argv(self) -> list[str]:
        """The scorer's command-line arguments that carry this job.

        :meth:`parse` reads them back.
        """
        out = ["--task-dir", str(self.task_dir), "--data-dir", str(self.data_dir), "--eval-dir", str(self.eval_dir)]
        out += ["--checkpoint", self.checkpoint, "--script", self.script, "--device", self.device]
        if self.timeout_s is not None:
            out += ["--timeout", repr(float(self.timeout_s))]
        if not self.sandboxed:
            out.append("--unsandboxed")
        if not self.validate:
            out.append("--no-val")
        if self.secret is not None:
            out += ["--secret", self.secret]
        if self.limits is not None:
            memory, processes = self.limits.memory_bytes, self.limits.processes
            out += ["--memory", str(memory or "none"), "--max-processes", str(processes or "none")]
        return out

    @classmethod
    def parse(cls, argv: list[str] | None = None) -> ScoringJob:
        """The job the scorer's command line names.

        ``argv``: :meth:`argv`'s, or ``sys.argv`` when None.
        """
        args = parser().parse_args(argv)
        given = {k: v for k, v in (("memory_bytes", args.memory), ("processes", args.max_processes)) if v != ""}
        return cls(
            task_dir=args.task_dir,
            data_dir=args.data_dir,
            eval_dir=args.eval_dir,
            script=args.script,
            checkpoint=args.checkpoint,
            device=args.device,
            timeout_s=args.timeout,
            sandboxed=not args.unsandboxed,
            validate=not args.no_val,
            secret=args.secret,
            limits=Limits(**given) if given else None,
        )


def parser() -> argparse.ArgumentParser:
    """The scorer's command line (``python -I -m bench.scoring.scorer --help``)."""
    out = argparse.ArgumentParser(description="the official score of one checkpoint (trusted side)")
    out.add_argument("--task-dir", type=Path, required=True)
    out.add_argument("--data-dir", type=Path, required=True)
    out.add_argument("--eval-dir", type=Path, required=True)
    out.add_argument("--checkpoint", default=CHECKPOINT, help="file name inside --eval-dir")
    out.add_argument("--script", required=True, help="file name inside --eval-dir")
    out.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    out.add_argument("--timeout", type=float, help="seconds (default: BENCH_EVAL_TIMEOUT, 15 min)")
    out.add_argument("--unsandboxed", action="store_true")
    out.add_argument("--no-val", action="store_true", help="skip the validation pass (a window candidate)")
    out.add_argument("--memory", type=_limit, default="", help="the run's memory limit in bytes, or none")
    out.add_argument("--max-processes", type=_limit, default="", help="the run's process limit, or none")
    out.add_argument("--secret", help="the probes' secret (default: a fresh one); bench verify gives the recorded")
    return out


def _limit(text: str) -> int | None | str:
    """``--memory``/``--max-processes``.

    A whole number, ``none`` (no limit), or "" (the default).
    """
    return None if text == "none" else "" if text == "" else int(text)
