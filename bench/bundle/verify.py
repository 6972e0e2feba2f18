"""``bench verify``: one finished run checked again from what it recorded, by the pipeline's steps.

What this proves, and what it cannot. Everything a score rests on is in the run directory: each
scored candidate's checkpoint (and the sha256 of the bytes that were timed and scored), the scripts
of its time (``evidence/code/``, :mod:`bench.pipeline.codetime`), the probe secret the scorer drew
(in the official result), the task folder's content hash, and the evidence the audit judged. This
module re-does steps 5 and 6 from those files alone, with the same functions the run used and no
second scorer, so a reader learns that *the recorded checkpoint bytes, staged with the recorded code
and the task's locked files, score as recorded under the recorded probes on the reader's own data,
and that the audit of the recorded evidence gives the recorded verdict*. It cannot show that the
checkpoint, the times or the evidence came from a run of that agent within that budget: whoever
produced the files can rewrite them consistently (a checkpoint that carries the test targets is
looked for separately by the scorer's label scan). The steps:

* the task folder is the one whose content hash (:func:`bench.checksums.tree_sha256`) equals the
  recorded one, among the folders :mod:`bench.tasks.packs` finds (``BENCH_TASKS_DIR``, packs); none:
  named, nothing re-scored;
* each distinct scored candidate is staged afresh (:func:`bench.pipeline.evaluate.stage`: the task's
  originals, the recorded snapshot of the scripts, the recorded checkpoint) in a new temporary
  folder and scored by the trusted scorer in a fresh sandboxed predictor
  (:func:`bench.pipeline.evaluate.evaluate`) with the recorded secret, so the very same probes are
  asked again;
* the audit's nine rules run again on the recorded evidence (:func:`bench.pipeline.audit.audit`, not
  written back), and the outcome is decided again (:func:`bench.outcome.decide`).

Recorded and recomputed must be identical on the same kind of device (floats compared exactly: a CPU
scores bitwise the same), and within the task's tolerance across kinds (:func:`tolerance`). Every
difference is one line naming the file, candidate or field. The MLflow side is
:mod:`bench.bundle.verify_store`; the command, :mod:`bench.bundle.verify_cli`; the recorded files,
found in a copy of the run directory, :mod:`bench.bundle.verify_files`.
"""

from __future__ import annotations

import math
import tempfile
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from bench import outcome, protocol, settings, software
from bench.agents import AgentError, get_agent
from bench.bundle.verify_files import local_checkpoint, match_task, missing_files, snapshot
from bench.checksums import sha256
from bench.evidence import Evidence
from bench.markup import one_line
from bench.pipeline import audit, codetime, evaluate, state, workspace
from bench.result import Evaluation, Official, RunResult
from bench.rules import labels
from bench.sandbox import evaluation_lock
from bench.scoring.job import ScoringJob
from bench.tasks import Task, TaskError, data

# across device kinds (a CPU run verified on a GPU, or the reverse) a score may move by float
# rounding: relative difference allowed when the task's task.toml gives none ([scoring]
# verify_tolerance)
DEFAULT_TOLERANCE = 1e-3
_PREPARE = threading.Lock()
NOT_SCORED = "not scored at the run"  # a candidate the run's evaluation never gave to the scorer: nothing to redo
# a candidate's re-scoring may take this many times its recorded evaluation (at least VERIFY_MIN_S,
# at most the reader's BENCH_EVAL_TIMEOUT) on the same kind of device: a bundle cannot hold a
# reader's verify for the reader's whole evaluation timeout per candidate. Across device kinds (a
# GPU run checked on a CPU) the reader's timeout holds.
VERIFY_FACTOR = 5
VERIFY_MIN_S = 60.0
SCORED_KEYS = ("value", "val_value", "n", "checks", "probes")  # the scorer's answer, field by field (probes: the
# positions the recorded secret gives: the same probes were asked again)


@dataclass
class Candidate:
    """One distinct checkpoint the run scored.

    Its labels (best, window-k), the recorded and recomputed results.
    """

    labels: list[str]
    name: str  # the checkpoint's file name (agent-chosen: printed through one_line)
    recorded: Official
    recomputed: Official | None = None  # None: not re-scored (``note`` says why)
    note: str = ""


@dataclass
class RunCheck:
    """A run's verification.

    Recorded vs recomputed status and score, its candidates, and every difference.
    """

    label: str
    run_dir: Path
    recorded_status: str
    recorded_score: float | None
    status: str | None = None  # recomputed (None: not recomputed)
    score: float | None = None
    device: str = ""  # where it was re-scored
    recorded_device: str = ""
    candidates: list[Candidate] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)
    score_ok: bool = False  # the official score recomputed as recorded (within the tolerance across device kinds)
    versions: list[str] = field(default_factory=list)  # software that differs from the recorded (bench.software)
    software: dict = field(default_factory=dict)  # what the run recorded (result.json's software)
    seconds: float = 0.0

    flags: list[str] = field(default_factory=list)  # the score checks' findings (bench.rules.labels), recomputed

    @property
    def ok(self) -> bool:
        """Nothing differs and no score check flagged the run."""
        return not self.differences and not self.flags


def tolerance(task: Task) -> float:
    """The relative difference a score may show when re-scored on another kind of device.

    ``task.toml``'s ``[scoring] verify_tolerance``, else :data:`DEFAULT_TOLERANCE`. On the same kind
    of device nothing may differ.
    """
    try:
        with open(task.folder / "task.toml", "rb") as f:
            given = tomllib.load(f).get("scoring", {}).get("verify_tolerance")
    except (OSError, tomllib.TOMLDecodeError):
        given = None
    if given is None:
        return DEFAULT_TOLERANCE
    if not (isinstance(given, int | float) and 0 <= given < 1):
        why = f"[scoring] verify_tolerance must be a number in [0, 1), not {given!r}"
        raise TaskError(f"{task.folder}/task.toml: {why}")
    return float(given)


def timeout_s(recorded_s: object, same_device: bool) -> float:
    """The time one candidate's re-scoring may take.

    :data:`VERIFY_FACTOR` times its recorded evaluation time, at least :data:`VERIFY_MIN_S`, at most
    the reader's ``BENCH_EVAL_TIMEOUT``; that timeout itself across device kinds or when the run
    recorded no time.
    """
    ceiling = settings.EVAL_TIMEOUT_S.get()
    if not same_device or not isinstance(recorded_s, int | float) or not math.isfinite(recorded_s) or recorded_s < 0:
        return ceiling
    return min(ceiling, max(VERIFY_MIN_S, VERIFY_FACTOR * float(recorded_s)))


def expected_s(result: RunResult, same_device: bool) -> tuple[float, float]:
    """(the recorded evaluation time of the candidates verify re-scores, the most it may take).

    What verify says before it starts.
    """
    seen, spent, most = set(), 0.0, 0.0
    for e in result.evaluations:
        raw = e.official.raw
        if e.path in seen or (not raw.get("checkpoint_sha256") and "eval_wall_s" not in raw):
            continue
        seen.add(e.path)
        wall = raw.get("eval_wall_s")
        spent += float(wall) if isinstance(wall, int | float) and math.isfinite(wall) and wall > 0 else 0.0
        most += timeout_s(wall, same_device)
    return spent, most


def same_kind(result: RunResult, device: str, recorded_device: str) -> bool:
    """Whether ``device`` here is the recorded kind.

    A CPU, or the same GPU model (another model runs other kernels).
    """
    return device == recorded_device and (device == "cpu" or protocol.describe_hardware(device) == result.hardware)


def recorded_device_of(result: RunResult) -> str:
    """The device the run's evaluation scored on."""
    found = (str(e.official.raw["device"]) for e in result.evaluations if e.official.raw.get("device"))
    return next(found, result.run.device or "cpu")


def rescore(
    result: RunResult, run_dir: Path, task: Task, data_dir: Path, device: str, tmp: Path, same_device: bool = True
) -> tuple[list[Candidate], list[Evaluation], list[str]]:
    """Each distinct candidate staged and scored again, each within :func:`timeout_s`.

    Returns the candidates, the recomputed evaluations in the recorded order and the differences
    found while staging; :func:`timeout_s` is of each candidate's recorded time.
    """
    by_path: dict[str, Candidate] = {}
    diffs: list[str] = []
    ws, store = run_dir / "workspace", run_dir / "evidence" / codetime.CODE_DIR
    for e in result.evaluations:
        if e.path in by_path:
            by_path[e.path].labels.append(e.candidate)
            continue
        cand = by_path[e.path] = Candidate([e.candidate], Path(e.path).name, e.official)
        raw = e.official.raw
        if not raw.get("checkpoint_sha256") and "eval_wall_s" not in raw:  # the run never reached the scorer with
            cand.note = f"{NOT_SCORED}: {one_line(e.official.why_not, 160)}"  # it (budget spent, not stageable)
            continue
        ckpt = local_checkpoint(run_dir, result, e.path, str(raw.get("staged") or ""))
        if not ckpt.is_file():
            diffs.append(f"missing: checkpoint {_rel(run_dir, ckpt)} ({cand.labels[0]})")
            cand.note = "checkpoint missing"
            continue
        dest = tmp / f"{len(by_path):02d}-{Path(e.path).stem}"[:120]
        try:
            code = snapshot(run_dir, raw["code_snapshot"]) if raw.get("code_snapshot") else None
            evaluate.stage(task, ws, dest, ckpt, code=code, store=store)
        except (OSError, ValueError, KeyError, TypeError) as err:
            diffs.append(f"{cand.name}: cannot be staged as recorded: {one_line(err, 300)}")
            cand.note = "not staged"
            continue
        now = sha256(dest / evaluate.CHECKPOINT)
        if raw.get("checkpoint_sha256") and now != raw["checkpoint_sha256"]:  # a run of an older harness kept none
            diffs.append(
                f"checkpoint {_rel(run_dir, ckpt)}: sha256 {now[:12]}, recorded {raw['checkpoint_sha256'][:12]} "
                "(the bytes scored at the run are not these)"
            )
        job = ScoringJob(
            task.folder,
            data_dir,
            dest,
            e.script,
            device=device,
            timeout_s=timeout_s(raw.get("eval_wall_s"), same_device),
            sandboxed=True,  # always: the verifier runs someone else's code (the run's own choice is not theirs)
            validate=e.candidate.startswith("best"),
            limits=result.run.limits,
            secret=(raw.get("probes") or {}).get("secret"),
        )
        official = evaluate.evaluate(job)
        kept = {k: raw[k] for k in ("code_snapshot", "code_files", "code_fallback") if k in raw}
        cand.recomputed = Official.from_dict({**official.to_dict(), **kept, "checkpoint_sha256": now})
    evals = [
        e if by_path[e.path].recomputed is None else _with(e, by_path[e.path].recomputed) for e in result.evaluations
    ]
    return list(by_path.values()), evals, diffs


def _with(e: Evaluation, official: Official) -> Evaluation:
    return Evaluation(**{**{k: getattr(e, k) for k in e.__dataclass_fields__}, "official": official})


def _rel(run_dir: Path, path: Path) -> str:
    try:
        return path.relative_to(run_dir).as_posix()
    except ValueError:
        return str(path)


def compare(cand: Candidate, same_device: bool, tol: float) -> list[str]:
    """How the recomputed result of one candidate differs from the recorded one.

    Empty: it does not.
    """
    rec, now = cand.recorded.raw, cand.recomputed.raw if cand.recomputed else {}
    where = f"{one_line(cand.name, 120)} ({','.join(cand.labels)})"
    if cand.recomputed is None:
        return []
    out = []
    for kind in ("violation", "unloadable"):
        if bool(rec.get(kind)) != bool(now.get(kind)):
            out.append(f"{where}: {kind} recorded {bool(rec.get(kind))}, recomputed {bool(now.get(kind))}")
    if cand.recorded.ok != cand.recomputed.ok:
        why = one_line(cand.recomputed.why_not if cand.recorded.ok else cand.recorded.why_not, 300)
        out.append(f"{where}: scored recorded {cand.recorded.ok}, recomputed {cand.recomputed.ok} ({why})")
        return out
    for key in SCORED_KEYS:
        a, b = rec.get(key), now.get(key)
        if key not in rec or a == b:
            continue
        if isinstance(a, int | float) and isinstance(b, int | float) and not same_device and _close(a, b, tol):
            continue
        out.append(f"{where}: {key} recorded {one_line(repr(a), 160)}, recomputed {one_line(repr(b), 160)}")
    return out


def _close(a: float, b: float, tol: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= tol * max(abs(a), abs(b))


def reaudit(result: RunResult, run_dir: Path, task: Task, evaluations: list[Evaluation]):
    """The nine rules on the recorded evidence, with the recomputed evaluations.

    evidence/audit.json is left untouched.
    """
    endpoints: list[str] = []
    try:
        endpoints = list(state.read(run_dir).endpoints)
    except state.RunStateError:
        pass  # named by missing_files
    try:
        own_hosts = get_agent(result.run.agent).own_hosts
    except AgentError:  # an agent this toolkit does not know: no hosts of its own
        own_hosts = ()
    given = audit.AuditInput(
        ws=workspace.Workspace(run_dir, task),
        locked_sha256=Evidence(run_dir).locked_at_start(task.locked_files),
        evaluations=tuple(evaluations),
        started_at=result.started_at,
        budget_s=result.run.budget_s,
        agent_argv=tuple(result.agent_argv),
        rejected=tuple(result.rejected_checkpoints),
        offline=not endpoints,
        own_hosts=tuple(own_hosts),
        keep=False,
        recorded_workspace=Path(result.workspace) if result.workspace else None,  # judged where the run ran
    )
    return audit.audit(given)


def _findings(violations) -> list[tuple[int, str]]:
    """(rule, verdict) of each finding, sorted.

    The harness's own (rule 0: a step that failed) are left out.
    """
    return sorted((v.rule, v.verdict) for v in violations if v.rule != 0)


def verify_run(run_dir: Path, result: RunResult, *, device: str | None = None) -> RunCheck:
    """Re-score every scored candidate of one finished run and re-run its audit.

    The differences named.
    """
    t0 = time.monotonic()
    run_dir = Path(run_dir)
    recorded_device = recorded_device_of(result)
    if device is None:
        device = recorded_device if recorded_device == "cpu" or protocol.default_device() != "cpu" else "cpu"
    label = result.run.label
    check = RunCheck(label, run_dir, result.status, result.score, device=device, recorded_device=recorded_device)
    check.differences += missing_files(run_dir, result)
    task, why = match_task(result)
    if task is None:
        check.differences.append(why)
        check.seconds = round(time.monotonic() - t0, 1)
        return check
    try:
        with _PREPARE:  # runs verified side by side (--jobs) prepare a task's data once
            data_dir = data.prepare(task, progress=False)  # the verifier's own copy, verified against its content list
    except data.DataError as e:  # no data here (offline, no mirror) or a changed copy: this run cannot be re-scored
        check.differences.append(f"the task's data cannot be prepared here, nothing re-scored: {one_line(e, 400)}")
        check.seconds = round(time.monotonic() - t0, 1)
        return check
    same = same_kind(result, device, recorded_device)
    # alone on this machine, as a run's evaluation is (no other run's live agent:
    # bench.sandbox.evaluation_lock)
    with (
        tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp,
        evaluation_lock.evaluating(result.run.limits.eval_s, console=False),
    ):
        check.candidates, evals, diffs = rescore(result, run_dir, task, data_dir, device, Path(tmp), same)
    check.differences += diffs
    tol = tolerance(task)
    for cand in check.candidates:
        check.differences += compare(cand, same, tol)
    audited = reaudit(result, run_dir, task, evals)
    # a score that carries its labels, or one outside what the task allows: recomputed here, and a
    # reason to exit 1 even when the run recorded the same finding (evidence for a person to read)
    check.flags = [f"rule {v.rule} {v.verdict}: {one_line(v.reason, 400)}" for v in labels.score_findings(audited)]
    if _findings(audited.violations) != _findings(result.audit.violations):
        rec = "; ".join(f"rule {r} {v}" for r, v in _findings(result.audit.violations)) or "no finding"
        now = "; ".join(f"rule {v.rule} {v.verdict}: {one_line(v.reason, 200)}" for v in audited.violations) or "none"
        check.differences.append(f"audit: recorded {rec}; recomputed {now}")
    decided = outcome.decide(
        evals,
        audited,
        interrupted=result.interrupted,
        timed_out=result.timed_out,
        agent_events=result.agent_events,
        rejected=result.rejected_checkpoints,
    )
    check.status, check.score = decided.status, decided.score
    if decided.status != result.status:
        check.differences.append(f"verdict: recorded {result.status}, recomputed {decided.status}")
    check.score_ok = check.score == check.recorded_score or (
        not same and None not in (check.score, check.recorded_score) and _close(check.score, check.recorded_score, tol)
    )
    if not check.score_ok:
        check.differences.append(f"official score: recorded {check.recorded_score!r}, recomputed {check.score!r}")
    if check.differences and (other := software.differences(result.software, software.versions())):
        check.versions = other  # a number that moved may have moved with them: said beside the differences
    check.seconds = round(time.monotonic() - t0, 1)
    return check
