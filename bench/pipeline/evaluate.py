"""Evaluate (pipeline step 5; paper §3.3 step 5 and rule 8).

Each candidate checkpoint scored where no agent can reach.

For each candidate a fresh folder outside the workspace is staged with the task's ORIGINAL locked
files (never the workspace copies), the agent's top-level scripts (for their ``build_model``) and a
copy of the checkpoint, and nothing else. The scripts are those of the checkpoint's time: the
snapshot the harness took when it first saw the checkpoint's content
(:mod:`bench.pipeline.codetime`), so that code written later cannot change what an early checkpoint
scores as; lacking one, the scripts as the run left them (collect placed the candidate after them).
Every agent-made file is read through :mod:`bench.untrusted` (no link followed, regular files only).
The trusted scorer (:mod:`bench.scoring.scorer`, a subprocess) reads the inputs and labels from the
harness's prepared cache, runs the model in a sandboxed predictor that sees only that folder,
computes the task's metric and probes the forward contract; what it prints is the official result.

One time budget covers every candidate of a run (``Limits.eval_s``,
:mod:`bench.sandbox.resource_limits`): each candidate gets what is left of it (at most the scorer's
own ``BENCH_EVAL_TIMEOUT``), and once it is spent the remaining candidates are not scored and say
why. A predictor that sleeps in its forward thus holds the GPU for the budget (plus the last
scorer's minute to report), never for a timeout per candidate. A checkpoint listed twice (the best
and its window's best) is scored once, and its time counts once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from bench import protocol, settings, termination, untrusted
from bench.checksums import sha256
from bench.pipeline import codetime
from bench.pipeline.collect import Checkpoint, NotACheckpoint, Selection, verify_copy
from bench.pipeline.launch import HARNESS_ONLY
from bench.pipeline.workspace import Workspace
from bench.result import Evaluation, Official
from bench.sandbox import evaluation_lock
from bench.sandbox.resource_limits import GIB, KIB, MIB, Limits
from bench.scoring.job import CHECKPOINT, ScoringJob
from bench.tasks import Task, data

SCORER_GRACE_S = 60.0  # after its timeout the scorer may take this long to report before it is killed
MIN_CANDIDATE_S = 10.0  # less than this left of the budget: the candidate is not started
BUDGET_SPENT = "eval_budget_spent"  # key of an official result the run's evaluation budget cut or left unscored


def default_device() -> str:
    """``cuda`` if torch could use a GPU here, else ``cpu``.

    Decided without importing torch (:mod:`bench.protocol`).
    """
    return protocol.default_device()


# a checkpoint is copied whole (its sha256 is checked after), but never through a link, from a FIFO
# or a sparse file
CHECKPOINT_LIMITS = untrusted.Limits(max_bytes=1 << 40)


def stage(
    task: Task,
    workspace: Path,
    dest: Path,
    checkpoint: Path | None = None,
    *,
    code: codetime.Snapshot | None = None,
    store: Path | None = None,
) -> Path:
    """Build the evaluation folder.

    The original locked files + the workspace's scripts (not its locked copies) + the checkpoint as
    ``checkpoint.pt``. ``code``: the snapshot of the checkpoint's time, from ``store`` (the run's
    ``evidence/code``), instead of the scripts as they are now. Only regular files are copied,
    through the boundary: a link cannot point the predictor out. Raises ``OSError`` when the
    checkpoint cannot be staged.
    """
    dest.mkdir(parents=True, exist_ok=True)
    if code is not None:
        if store is None:
            raise ValueError("a code snapshot is staged from its store")
        codetime.stage_snapshot(store, code, dest)
    else:
        codetime.stage_current(Path(workspace), task.locked_files, dest)
    for name in task.locked_files:
        shutil.copyfile(task.file(name), dest / name)
    if checkpoint is not None:
        _copy_checkpoint(Path(checkpoint), Path(workspace), dest / CHECKPOINT)
    return dest


def _copy_checkpoint(checkpoint: Path, workspace: Path, dest: Path) -> None:
    base = workspace if checkpoint.is_relative_to(workspace) else checkpoint.parent
    src = untrusted.open_regular(checkpoint.relative_to(base), base, CHECKPOINT_LIMITS)
    if isinstance(src, untrusted.Finding):
        raise OSError(f"{src}")
    with src, open(dest, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)


def evaluate(job: ScoringJob) -> Official:
    """Score one staged folder with the trusted scorer.

    Its JSON as an :class:`Official`, or why there is none.

    The job (:class:`~bench.scoring.job.ScoringJob`) crosses to the scorer's process on its command
    line. Its ``validate``: also the scorer's own validation score (``val_value``, rule 9's
    evidence); the window candidates, which only draw the anytime curve, skip that pass. ``limits``:
    the run's, whose memory and process limits hold the predictors (the defaults when None); a
    failure that came with a limit hit says so first. ``timeout_s``: None is ``BENCH_EVAL_TIMEOUT``
    (an agent script that trains at import time would hang the evaluation). ``secret``: the probes'
    secret (None: the scorer draws a fresh one); ``bench verify`` gives the one a run recorded, so
    that the same probes are asked again (:mod:`bench.bundle.verify`).
    """
    timeout_s = settings.EVAL_TIMEOUT_S.get() if job.timeout_s is None else job.timeout_s
    # -I: not even the working directory goes on sys.path, so nothing an agent wrote can be imported
    # here
    cmd = [sys.executable, "-I", "-m", "bench.scoring.scorer", *replace(job, timeout_s=timeout_s).argv()]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and k not in HARNESS_ONLY}
    t0 = time.time()
    try:
        proc = subprocess.run(
            cmd, cwd=job.eval_dir.parent, env=env, capture_output=True, text=True, timeout=timeout_s + SCORER_GRACE_S
        )
    except subprocess.TimeoutExpired:
        return Official.from_dict({"error": f"evaluation exceeded {timeout_s:.0f} s"})
    result = _last_json(proc.stdout)
    if result is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        result = {"error": f"the scorer printed no JSON (exit {proc.returncode}): " + " | ".join(tail)}
    elif proc.returncode != 0 and "error" not in result:
        result["error"] = f"the scorer exited {proc.returncode}"
    result["eval_wall_s"] = round(time.time() - t0, 3)
    return Official.from_dict(_limit_reason(result))


PREDICTOR_LIMITS = "predictor_limits"  # the scorer's key: what the predictors' cgroup refused or killed


def _real_hits(result: dict) -> list[dict]:
    """The predictor's limit hits that end a process.

    An out-of-memory kill (a cgroup's count of allocations that met the limit also counts page cache
    it reclaimed, which harms nothing) and forks refused.
    """
    hits = result.get(PREDICTOR_LIMITS) or []
    return [h for h in hits if isinstance(h, dict) and (h.get("oom_kills") or h.get("forks_refused"))]


def _limit_reason(result: dict) -> dict:
    """A failed evaluation whose predictor hit its memory or process limit says so first.

    An out-of-memory kill otherwise reads as 'the predictor ended without an answer (exit -9)'.
    """
    if "error" not in result:
        return result
    why = []
    for hit in _real_hits(result):
        if hit.get("limit") == "memory":
            why.append(f"the predictor passed its memory limit ({fmt_size(hit.get('value'))})")
        elif hit.get("limit") == "processes":
            why.append(f"the predictor passed its process limit ({hit.get('value')} processes and threads)")
    return {**result, "error": "; ".join([*why, str(result["error"])])} if why else result


def fmt_size(n: int | None) -> str:
    """``1.5 GiB``, ``300 MiB``: a limit as a person reads it (``none`` for no limit)."""
    if n is None:
        return "none"
    units = (("TiB", 2**40), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB))
    unit, size = next(((u, b) for u, b in units if n >= b), ("B", 1))
    return f"{n / size:.3g} {unit}"


def predictor_hits(evaluations: list[Evaluation]) -> list[dict]:
    """``result.json``'s lines for the predictor's limits.

    ``predictor-memory`` and ``predictor-processes``: what each limit killed or refused over all
    candidates, and which candidates it failed.
    """
    out: dict[str, dict] = {}
    for e in distinct(evaluations):  # a candidate listed twice (best and its window) was scored once
        for hit in _real_hits(e.official.raw):
            line = out.setdefault(f"predictor-{hit['limit']}", {"limit": f"predictor-{hit['limit']}", "candidates": []})
            line["value"] = hit.get("value")
            for key in ("oom_kills", "refused", "forks_refused"):
                if key in hit:
                    line[key] = line.get(key, 0) + int(hit[key])
            if not e.official.ok:
                line["candidates"].append(e.candidate)
    return list(out.values())


@dataclass(frozen=True)
class EvaluationInput:
    """What the evaluate step scores, and under which limits.

    Built by the runner (``runner.Run``).
    """

    ws: Workspace
    selection: Selection  # the collect step's candidates
    data_dir: Path  # the harness's prepared data (labels included: the scorer's side only)
    device: str = "cpu"  # where the predictors run: cpu or cuda
    console: bool = True  # a line per candidate on the console
    sandboxed: bool = True  # the predictors in the sandbox (the run's own choice)
    budget_s: float | None = None  # the run's evaluation budget (None: ``limits.eval_s``, else ``Limits().eval_s``)
    limits: Limits | None = None  # the run's: memory and processes hold the predictors
    label: str = ""  # the run's label, for the console's line while the evaluation waits


def evaluate_candidates(given: EvaluationInput) -> list[Evaluation]:
    """Official evaluation of each distinct candidate.

    The overall best first, then each window's best.

    No other run's agent is live on this machine meanwhile (:mod:`bench.sandbox.evaluation_lock`;
    each result's ``isolation`` says whether it had that, and how long it waited for it: that wait
    is not taken from the budget).

    The prepared data are verified first: if anything changed them during the run, no candidate is
    scored against them and each evaluation carries the reason instead. When the best cannot be
    built or loaded (not a broken forward contract, which disqualifies), the next checkpoints by
    validation score are scored in turn (at most :data:`MAX_FALLBACKS`): the first that loads is
    labelled ``best``, the ones before it ``best-unloadable``, so that an unusable file does not
    fail a run that saved usable ones.

    The input's ``budget_s`` bounds all of it together: see the module's docstring.
    """
    ws, limits, label = given.ws, given.limits, given.label
    budget = (limits or Limits()).eval_s if given.budget_s is None else float(given.budget_s)
    term = termination.current()  # a signal that comes while it waits stops the wait (bench run --resume finishes)
    seen = len(term.signals) if term is not None else 0
    stopped = (lambda: len(term.signals) > seen) if term is not None else None
    try:
        with evaluation_lock.evaluating(budget, given.console, label, ws.run_dir, stopped) as isolation:
            out = _candidates(given, budget)
    except KeyboardInterrupt:
        print(f"[bench] {label}: stopped while evaluating; finish it with: bench run --resume {ws.run_dir}", flush=True)
        raise
    note = {"isolation": isolation.to_dict()}
    return [replace(e, official=Official.from_dict({**e.official.raw, **note})) for e in out]


def _candidates(given: EvaluationInput, budget: float) -> list[Evaluation]:
    ws, selection = given.ws, given.selection
    deadline = time.monotonic() + budget
    code_store = ws.run_dir / "evidence" / codetime.CODE_DIR
    done: dict[Path, Official] = {}
    try:
        data.verify_prepared(ws.task)
    except data.DataError as e:
        done = {ckpt.path: Official.from_dict({"error": str(e)}) for _, ckpt in selection.candidates()}

    def score(label: str, ckpt: Checkpoint) -> Official:
        left = deadline - time.monotonic()
        if ckpt.path not in done and left < MIN_CANDIDATE_S:
            why = f"not scored: the run's evaluation budget of {budget:.0f} s was spent before this candidate"
            return Official.from_dict({"error": why, BUDGET_SPENT: True})  # not kept: nothing was tried
        if ckpt.path not in done:
            eval_dir = ws.eval_dir / f"{len(done):02d}-{ckpt.path.stem}"[:120]
            if given.console:
                print(f"[bench] evaluating {label}: {ckpt.path.name} (val {ckpt.val_score:.4f})", flush=True)
            try:
                stage(ws.task, ws.path, eval_dir, ckpt.path, code=ckpt.code, store=code_store)
                timed = verify_copy(ckpt, eval_dir / CHECKPOINT)  # the bytes scored are the bytes placed in time
            except OSError as e:  # the checkpoint vanished or cannot be read
                done[ckpt.path] = Official.from_dict({"error": f"cannot stage the checkpoint: {e}", UNLOADABLE: True})
            except NotACheckpoint as e:  # it changed after collect timed it: those bytes have no time, not scored
                done[ckpt.path] = Official.from_dict({"error": str(e), UNLOADABLE: True})
            else:
                timeout = min(settings.EVAL_TIMEOUT_S.get(), left)  # what is left of the run's evaluation budget
                official = evaluate(
                    ScoringJob(
                        ws.task.folder,
                        given.data_dir,
                        eval_dir,
                        ckpt.script,
                        device=given.device,
                        timeout_s=timeout,
                        sandboxed=given.sandboxed,
                        validate=label.startswith("best"),  # the scored one (rule 9), not the anytime curve's
                        limits=given.limits,
                    )
                )
                extra = _budget_note(official, timeout, deadline, budget)
                done[ckpt.path] = Official.from_dict(
                    {
                        **official.to_dict(),
                        **_provenance(ckpt.path, eval_dir, ckpt.script),
                        **_code_provenance(ckpt),
                        "checkpoint_sha256": timed,
                        **extra,
                    }
                )
        return done[ckpt.path]

    out: list[Evaluation] = []
    for label, ckpt in selection.candidates():
        if label == "best":
            out += _best_that_loads(ckpt, selection.ranked, score)
        else:
            out.append(Evaluation(candidate=label, official=score(label, ckpt), **ckpt.to_dict()))
    return out


def _budget_note(official: Official, timeout: float, deadline: float, budget: float) -> dict:
    """The keys that say a failed candidate ran until the evaluation budget ran out.

    Empty otherwise.
    """
    if official.ok or timeout >= settings.EVAL_TIMEOUT_S.get() or deadline - time.monotonic() >= MIN_CANDIDATE_S:
        return {}
    return {BUDGET_SPENT: True, "error": f"{official.why_not} (the run's evaluation budget of {budget:.0f} s ran out)"}


def distinct(evaluations: list[Evaluation]) -> list[Evaluation]:
    """Each evaluation once.

    A checkpoint listed twice (the best and its window's best, or an unloadable best that is also a
    window's) was scored once, and its time and limits count once. Known by its file and its result,
    so that the evaluations read back from ``result.json`` (one object each) count the same.
    """
    seen: set[tuple[str, str]] = set()
    out = []
    for e in evaluations:
        key = (e.path, json.dumps(e.official.raw, sort_keys=True, default=str))
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


def budget_hit(evaluations: list[Evaluation], budget_s: float) -> dict | None:
    """``result.json``'s line for the evaluation budget when it cut or skipped a candidate.

    None: it did not.
    """
    scored = distinct(evaluations)
    cut = [e for e in scored if e.official.raw.get(BUDGET_SPENT)]
    if not cut:
        return None
    spent = sum(float(e.official.raw.get("eval_wall_s") or 0) for e in scored)
    return {"limit": "evaluation", "value": budget_s, "candidates_cut": len(cut), "spent_s": round(spent, 1)}


MAX_FALLBACKS = 5  # checkpoints scored after an unloadable best, at most
UNLOADABLE = "unloadable"  # the key of an official result whose model could not be built or loaded (scorer.py)


def unloadable(official: Official) -> bool:
    """The evaluation failed because the model could not be built or the checkpoint loaded.

    Not a forward-contract violation (which disqualifies) and not the prepared data changing (which
    no other checkpoint escapes).
    """
    return bool(official.raw.get(UNLOADABLE)) and not official.raw.get("violation") and not official.ok


def _best_that_loads(
    best: Checkpoint, ranked: tuple[Checkpoint, ...], score: Callable[[str, Checkpoint], Official]
) -> list[Evaluation]:
    """The best, and while the one scored could not be loaded, the next by validation score.

    The first that loads is ``best`` (listed first), each unloadable one before it
    ``best-unloadable``.
    """
    ckpt, official = best, score("best", best)
    failed: list[Evaluation] = []
    for nxt in [c for c in ranked if c.path != best.path][:MAX_FALLBACKS]:
        if not unloadable(official):
            break
        failed.append(Evaluation(candidate="best-unloadable", official=official, **ckpt.to_dict()))
        ckpt, official = nxt, score("best (next candidate)", nxt)
    return [Evaluation(candidate="best", official=official, **ckpt.to_dict()), *failed]


def _code_provenance(ckpt: Checkpoint) -> dict:
    """Which scripts were staged.

    The snapshot of the checkpoint's time (``code_snapshot``, the sha256 of its list in
    ``evidence/code/``), or why the scripts as the run left them were (``code_fallback``: the audit
    flags it).
    """
    if ckpt.code is not None:
        return {"code_snapshot": ckpt.code.digest, "code_files": len(ckpt.code.files)}
    return {"code_fallback": ckpt.code_note} if ckpt.code_note else {}


def _provenance(checkpoint: Path, eval_dir: Path, script: str) -> dict:
    """Where the score came from.

    The checkpoint, the staged folder the predictor ran, and the sha256 of the exact source whose
    ``build_model`` it ran (the record step makes that file the eval run's artifact).
    """
    source = eval_dir / script
    found = {"checkpoint": str(checkpoint), "staged": str(eval_dir)}
    if source.is_file():
        found["script_sha256"] = sha256(source)
    return found


def _last_json(stdout: str) -> dict | None:
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None
