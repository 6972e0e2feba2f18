r"""The trusted scorer: the official number of one checkpoint, computed where no agent code runs.

    python -I -m bench.scoring.scorer --task-dir tasks/t6_... --data-dir CACHE \
        --eval-dir STAGED --checkpoint checkpoint.pt --script run_1.py \
        [--device cpu|cuda] [--timeout S] [--unsandboxed] [--no-val]

That is the command line of a :class:`~bench.scoring.job.ScoringJob` (its ``argv``).

It imports the task's ORIGINAL ``prepare.py`` (from the task folder, never from the workspace) for
three things the locked file defines once: ``eval_batches`` (inputs and labels, batched and ordered
so that no input reveals a label before the outputs for it are returned), ``score`` (the metric) and
the feed constants. It never imports, unpickles or executes anything from the workspace: the model
runs in a sandboxed predictor process (:mod:`bench.scoring.predictor`) that receives inputs over a
pipe and returns outputs. A second, fresh predictor answers the forward-contract probes
(:mod:`bench.scoring.checks`): cold replays of stretches of the feed and batches shaped like the
feed's, at positions drawn from a secret no predictor sees; it runs the agent's code only after the
scored one has ended, so that the two never talk. Prints one JSON object, the official result (task,
metric, value, val_value, direction, split, checkpoint, script, seconds, n, checks, and ``probes``:
the secret and every position it gave, published only now); on any failure the same object with
``error`` (and ``violation`` with ``probes`` when the forward contract is broken, ``unloadable:
true`` when the model could not be built or the checkpoint not loaded into it) and no value. Both
carry ``predictor_limits``: what the predictors' cgroup refused or killed
(``--memory``/``--max-processes``, the run's limits:
:func:`bench.sandbox.resource_limits.predictor_limits`), read before it is removed, since an
out-of-memory kill otherwise reads as a predictor that ended without an answer.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import sys
import time
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bench import settings
from bench.errors import BenchError, InputError
from bench.scoring import checks, leakage
from bench.scoring.job import ScoringJob
from bench.scoring.session import LoadError, PredictorError, Session

if TYPE_CHECKING:
    from bench.sandbox.resource_limits import Limits


class ContractViolation(BenchError, RuntimeError):
    """The model broke the forward contract (rule 7).

    The run is disqualified, not merely unscored. ``probes``: the plan's evidence (its secret and
    positions), recorded with the violation.
    """

    def __init__(self, message: str, probes: dict | None = None) -> None:
        super().__init__(message)
        self.probes = probes or {}


def load_task_module(task_dir: Path):
    """The task's original prepare.py, imported from the task folder.

    Trusted, read-only to every agent; the folder goes on sys.path for its other locked files (T4's
    molecules.py), never the evaluation folder.
    """
    sys.path.insert(0, str(task_dir))
    sys.dont_write_bytecode = True  # no __pycache__ in the task folder
    spec = importlib.util.spec_from_file_location("_task_prepare", task_dir / "prepare.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # before exec: dataclasses look their module up there (T4's GraphBatch)
    spec.loader.exec_module(module)
    return module


def sandbox_wrap(eval_dir: Path, device: str = "cpu", limits: Limits | None = None):
    """The predictor's sandbox.

    The allow-list's system and Python, the predictor's own files and the staged folder readable
    (bench.sandbox.view: no repository, no data cache, no other run, no CLI), nothing writable, no
    network, its own PID namespace, no cgroup tree, and the predictors' seccomp filter (no file
    lock, lease or watch, no page-cache residency, no other process read:
    :mod:`bench.sandbox.seccomp`).
    """
    from bench.sandbox import Policy, Sandbox, default_hidden, default_readable
    from bench.sandbox.resource_limits import predictor_limits

    readable = (*default_readable("predictor"), eval_dir)
    policy = Policy(
        cwd=eval_dir,
        writable=(),
        readable=readable,
        hidden=default_hidden(),
        endpoints=(),
        seccomp="predictor",
        own_cgroup=False,
    )
    return Sandbox(policy, limits=predictor_limits(device, limits))  # memory, processes: resource_limits


def score_checkpoint(job: ScoringJob) -> dict:
    """Feed every evaluation batch to a predictor, score its outputs, probe the forward contract.

    The result dict.

    The scored predictor starts first, so that building the model overlaps with loading the task and
    its labels. The prober runs the agent's code only once the scored predictor has ENDED (issue
    29): two processes running the agent's model at once can talk (a record lock on a shared file
    crossed every namespace), and one that is dead can say nothing (its locks die with it; nothing
    in its sandbox was writable). Its inputs are known in advance, so nothing is lost but the
    overlap: it is started once the scored one is ready, held before any agent code (Python, numpy
    and torch imported while the feed runs, :class:`Session` ``hold``), and let go after the scored
    one is closed. The probes' positions follow from the job's ``secret`` (drawn here,
    :func:`checks.draw_secret`, unless a test or ``bench verify`` gives one), which stays in this
    process until the result records it. ``job``: everything the harness asked
    (:class:`~bench.scoring.job.ScoringJob`, read from the command line by :func:`main`).
    """
    t0 = time.time()
    task_dir, data_dir, eval_dir, device = job.task_dir, job.data_dir, job.eval_dir, job.device
    timeout_s = settings.EVAL_TIMEOUT_S.get() if job.timeout_s is None else job.timeout_s
    log = eval_dir.with_suffix(".predictor.log")  # the predictors' stderr, beside the staged folder
    sandbox = sandbox_wrap(eval_dir, device, job.limits) if job.sandboxed else None
    hits: list[dict] = []  # what the predictors' group refused or killed (read before it is removed)
    cache_notes: list[str | None] = []  # why the predictors' page cache could not be dropped (None: it was)
    wrap = sandbox.wrap if sandbox is not None else None
    secret = job.secret or checks.draw_secret()

    def session(hold: bool = False) -> Session:
        return Session(
            eval_dir, job.checkpoint, job.script, device=device, timeout_s=timeout_s, log=log, wrap=wrap, hold=hold
        )

    try:
        with session() as scored:
            task = load_task_module(task_dir)
            feed = task.eval_batches(task.EVAL_SPLIT, str(data_dir), task.FEED_BATCH_SIZE)
            inputs, targets = [x for x, _ in feed], [y for _, y in feed]
            found = checks.plan(inputs, getattr(task, "CAUSAL_INPUT", None), secret)
            scored.ready()
            # held: its start-up overlaps the feed's round trips instead of the scored one's
            # start-up
            with session(hold=True) as prober:
                outputs = [scored.predict(x) for x in inputs]
                # after the scored feed, so that it cannot have shaped it; rule 9 reads it for the
                # scored checkpoint
                val_value = _validation(task, scored, data_dir) if job.validate else None
                scored.close()  # ended (and waited for) before the prober runs any agent code: no channel between them
                # nor through the page cache: the pages it was the first to load are dropped (issue
                # 38)
                cache_notes.append(sandbox.limits.drop_page_cache() if sandbox is not None else None)
                result = task.score(outputs, targets)
                value = float(result[task.METRIC])
                if not math.isfinite(value):
                    raise PredictorError(f"the {task.METRIC} is {value}")
                answers, failure = _answers(prober, found)
                prober.close()
                asked = dataclasses.replace(found, probes=found.probes[: len(answers)])
                broken = checks.judge(asked, answers, outputs, device, task_tolerance(task_dir, device))
                if broken:  # judged even when the prober then failed: a crash at the last probe hides no broken replay
                    raise ContractViolation("forward contract broken: " + "; ".join(broken), found.evidence())
                if failure is not None:
                    raise failure
    except Exception as e:  # an out-of-memory kill reads as a predictor that ended without an answer: say why
        e.predictor_limits = sandbox.limits.hits() if sandbox is not None else []
        raise
    finally:
        if sandbox is not None:
            hits = sandbox.limits.hits()
            cache_notes.append(sandbox.limits.drop_page_cache())  # before the next evaluation's predictors start
            sandbox.close()
            sandbox.limits.remove()
    return {
        "label_scan": label_scan(task_dir, task, data_dir, eval_dir, job.checkpoint, targets),
        "value": value,
        "val_value": val_value if val_value is not None else (value if task.EVAL_SPLIT == "val" else None),
        "n": int(result.get("n", sum(len(y) for y in targets))),
        "n_params": scored.n_params,
        "checks": found.promises,
        "probes": found.evidence(),
        "seconds": round(time.time() - t0, 3),
        "predictor_limits": hits,
        "page_cache": next((n for n in cache_notes if n), "dropped" if cache_notes else "not sandboxed"),
    }


def label_scan(task_dir: Path, task, data_dir: Path, eval_dir: Path, checkpoint: str, targets: list) -> dict:
    """The targets looked for in the staged folder (:mod:`bench.scoring.leakage`).

    The checkpoint and the agent's scripts (the task's own files, staged as they are in the task
    folder, are not searched). Its ``found`` is what the audit disqualifies
    (:mod:`bench.rules.labels`); a scan that fails says why instead (flagged).
    """
    try:
        kind = task_scoring(task_dir).get("targets", leakage.LABELS)
        vocab = None
        if kind == leakage.TEXT and hasattr(task, "load_meta"):
            vocab = task.load_meta(str(data_dir)).get("vocab")
        own = {f.name for f in eval_dir.iterdir() if f.is_file() and _same_file(f, task_dir / f.name)}
        return leakage.scan(eval_dir, checkpoint, kind, targets, vocab=vocab, skip=own)
    except Exception as e:  # the score stands; the audit flags a scan that could not look
        return {"error": f"{type(e).__name__}: {e}"}


def _same_file(a: Path, b: Path) -> bool:
    return b.is_file() and a.stat().st_size == b.stat().st_size and a.read_bytes() == b.read_bytes()


def task_scoring(task_dir: Path) -> dict:
    """task.toml's ``[scoring]`` table (empty when there is none)."""
    with open(task_dir / "task.toml", "rb") as f:
        table = tomllib.load(f).get("scoring", {})
    return table if isinstance(table, dict) else {}


def task_tolerance(task_dir: Path, device: str) -> checks.Tolerance:
    """The replays' tolerance for this task on ``device``.

    On a GPU, task.toml's ``[scoring] cuda_replay_tolerance`` (the epsilon the GPU proof kit
    measured for the task: ``bench selftest``'s ``replay_epsilon``) or, without one,
    :data:`checks.CUDA_REPLAY_DEFAULT`; on a CPU the fixed 1e-4 (deterministic CPU kernels agree
    bitwise).
    """
    try:
        with open(task_dir / "task.toml", "rb") as f:
            given = tomllib.load(f).get("scoring", {}).get("cuda_replay_tolerance")
    except (OSError, tomllib.TOMLDecodeError):
        given = None
    if given is not None and not (isinstance(given, int | float) and 0 <= given < 1):
        raise InputError(f"task.toml's [scoring] cuda_replay_tolerance must be a number in [0, 1), not {given!r}")
    return checks.tolerance(device, given)


def _answers(prober: Session, found: checks.Plan) -> tuple[list[np.ndarray], PredictorError | None]:
    """The prober's answers to the plan's probes, and the error that stopped it early.

    Asked in the plan's order (after the scored predictor ended); the error is None when every probe
    was answered. The caller judges what was answered first.

    A predictor that failed on a request shaped like the feed's (its own batches replayed, a
    causality block), after the scored one answered them all, broke the contract: crashing where it
    guesses it is probed must not turn a disqualification into a mere failure. Timeouts, load errors
    and a predictor killed by a signal (a memory limit's kill is one) stay errors, as does a failure
    on the batch probe (a batch size the feed never had).
    """
    answers: list[np.ndarray] = []
    try:
        for probe in found.probes:
            answers.append(prober.predict(probe.inputs))
    except PredictorError as error:
        if not isinstance(error, LoadError):
            probe = found.probes[len(answers)]
            killed = (prober.proc.poll() or 0) < 0
            if not prober.timed_out and not killed and probe.promise != checks.BATCH:
                why = f"a fresh predictor failed on a request the scored one answered ({probe.where}): {error}"
                raise ContractViolation(f"forward contract broken: {why}", found.evidence()) from error
        return answers, error
    return answers, None


def _validation(task, scored: Session, data_dir: Path) -> float | None:
    """The harness's own validation score of the checkpoint.

    Rule 9 compares the script's self-reported one with it; None when the official split is the
    validation split (the official value is it). The validation inputs are the agent's own data, so
    sending them to its model reveals nothing.
    """
    if task.EVAL_SPLIT == "val":
        return None
    feed = task.eval_batches("val", str(data_dir), task.FEED_BATCH_SIZE)
    return float(task.score([scored.predict(x) for x, _ in feed], [y for _, y in feed])[task.METRIC])


def main(argv: list[str] | None = None) -> int:
    """The scorer's process.

    Score the job its command line names, print one JSON object; 0 when scored.
    """
    job = ScoringJob.parse(argv)
    with open(job.task_dir / "task.toml", "rb") as f:  # the names only: prepare.py (and torch) load later
        toml = tomllib.load(f)
    head = {"task": toml["id"], "metric": toml["metric"], "direction": toml["direction"], "split": toml["eval_split"]}
    head.update(checkpoint=job.checkpoint, script=job.script, sandboxed=job.sandboxed, device=job.device)
    t0 = time.time()
    try:
        result = score_checkpoint(job)
    except ContractViolation as e:
        seconds = round(time.time() - t0, 3)
        head["predictor_limits"] = getattr(e, "predictor_limits", [])
        print(json.dumps({**head, "error": str(e), "violation": str(e), "probes": e.probes, "seconds": seconds}))
        return 1
    except LoadError as e:
        head["predictor_limits"] = getattr(e, "predictor_limits", [])
        print(json.dumps({**head, "error": str(e), "unloadable": True, "seconds": round(time.time() - t0, 3)}))
        return 1
    except (PredictorError, ValueError, TypeError) as e:
        head["predictor_limits"] = getattr(e, "predictor_limits", [])
        print(json.dumps({**head, "error": str(e), "seconds": round(time.time() - t0, 3)}))
        return 1
    print(json.dumps({**head, **result}, default=_plain))
    return 0


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON: {type(value).__name__}")


if __name__ == "__main__":
    code = main()
    # Everything is closed and printed; skip the interpreter's teardown, which takes 0.6-0.8 s once
    # torch is loaded (measured on a 2-core CPU): a tenth of a T6 evaluation.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
