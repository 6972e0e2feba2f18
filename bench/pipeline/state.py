"""Run state (beside the launch step): ``<run_dir>/run.json``, what is needed to finish a run without its harness.

Written atomically once the agent is launched. If the harness dies (SIGKILL, an out-of-memory kill, a lost
node), ``bench run --resume RUN_DIR`` (:mod:`bench.resume`) reads it to end what of the run is still alive (the
run token finds it), relay the spool, then collect, evaluate, audit and record as the harness would have. The
harness's own pid and process start time tell a resume whether that harness is in fact still running.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import psutil

from bench.sandbox.resource_limits import FLAGS, LimitError, Limits

STATE_FILE = "run.json"
VERSION = 1


class RunStateError(RuntimeError):
    """run.json is missing, malformed or cannot be written; the message says what to do."""


@dataclass
class RunState:
    """The run's spec (task id, not the Task), its launch, its tracking and the harness that ran it."""

    task: str
    agent: str
    campaign: str
    repeat: int
    budget_s: float
    grace_s: float
    model: str | None
    options: dict[str, str]
    device: str
    no_weights: bool
    sandbox: bool
    label: str
    token: str  # BENCH_RUN_TOKEN: every process of the run carries it
    agent_pid: int
    started_at: float
    agent_argv: list[str]
    endpoints: list[str]
    mlflow_run_id: str | None
    partial_notes: list[str]
    data_dir: str
    harness_pid: int = field(default_factory=os.getpid)
    harness_started: float = field(default_factory=lambda: _create_time(os.getpid()) or 0.0)
    harness_died_at: float | None = None  # set by the first --resume: the harness's last sign of life
    watched: dict | None = None  # how the agent's time ended (watch.Watched), once it has; None while the agent runs
    # the run's limits (Limits.to_dict(): memory, processes, workspace, log, evaluation budget), so that a resume
    # evaluates under the run's own; None in files written before runs had limits (a resume uses the defaults)
    limits: dict | None = None
    # where the task came from and its folder's sha256 (bench.tasks.packs.provenance); None in older files
    task_source: dict | None = None
    # the run's API budget in USD (--max-cost, the campaign's max_cost), so that a resume records it as the run did;
    # None: none, or a file written before runs kept it
    max_cost: float | None = None
    version: int = VERSION

    def harness_alive(self) -> bool:
        """The harness that wrote this file still runs (same pid and same start time: not a reused pid)."""
        started = _create_time(self.harness_pid)
        return started is not None and abs(started - self.harness_started) < 0.05

    def run_limits(self) -> Limits | None:
        """The limits the run was launched with (checked when read); None for a run.json that has none."""
        return None if self.limits is None else limits_of(self.limits)


def _create_time(pid: int) -> float | None:
    try:
        proc = psutil.Process(pid)
        return None if proc.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD) else proc.create_time()
    except psutil.Error:
        return None


def path(run_dir: Path) -> Path:
    return Path(run_dir) / STATE_FILE


def write(run_dir: Path, state: RunState) -> Path:
    """Write run.json atomically (tmp + rename); :class:`RunStateError` saying what to do if the disk refuses."""
    target = path(run_dir)
    tmp = target.with_name(f".{STATE_FILE}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(asdict(state), indent=1))
        os.replace(tmp, target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise disk_error(target, e, run_dir) from e
    return target


def read(run_dir: Path) -> RunState:
    """The run's state; :class:`RunStateError` (one line) for a missing or malformed run.json."""
    target = path(run_dir)
    try:
        raw = json.loads(target.read_text())
    except FileNotFoundError:
        raise RunStateError(f"no {STATE_FILE} in {run_dir}: not a run of this version of bench run") from None
    except (OSError, ValueError) as e:
        raise RunStateError(f"{target} cannot be read ({e}); the run's files are still in {run_dir}") from e
    if not isinstance(raw, dict):
        raise RunStateError(f"{target} is not a JSON object")
    if int(raw.get("version", VERSION)) > VERSION:
        raise RunStateError(f"{target} has version {raw['version']}, newer than this toolkit's {VERSION}: upgrade")
    names = {f.name for f in fields(RunState)}
    optional = {"harness_pid", "harness_started", "harness_died_at", "watched", "limits", "task_source", "version"}
    optional |= {"max_cost"}
    missing = sorted(names - set(raw) - optional)
    if missing:
        raise RunStateError(f"{target} lacks {', '.join(missing)}: it was not written by bench run")
    try:
        state = RunState(**{k: v for k, v in raw.items() if k in names})
        state.repeat, state.agent_pid = int(state.repeat), int(state.agent_pid)
        state.budget_s, state.grace_s, state.started_at = map(float, (state.budget_s, state.grace_s, state.started_at))
        if state.watched is not None:  # what a resume rebuilds the watch's outcome from: checked here, not there
            from bench.pipeline.watch import Watched

            Watched(**state.watched)
    except (TypeError, ValueError) as e:
        raise RunStateError(f"{target} mistypes a field ({e})") from e
    cap = state.max_cost
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int | float) or not 0 < cap < float("inf")):
        raise RunStateError(
            f"{target}: max_cost must be a positive amount in USD or null (got {cap!r}); fix it or remove the key "
            "(a resume then records no API budget)"
        )
    try:  # what a resume evaluates under: a hand-edited or foreign value is refused here, not used
        state.run_limits()
    except LimitError as e:
        raise RunStateError(f"{target}: limits: {e}; fix it or remove the key (a resume then uses the defaults)") from e
    return state


def limits_of(raw: object) -> Limits:
    """The limits a run recorded (``Limits.to_dict()``), checked: LimitError naming the field for a missing or
    unknown key, a wrong type or a value no run can live with (a hand edit, a newer toolkit), so that a resume
    never runs under limits nobody set."""
    if not isinstance(raw, dict):
        raise LimitError(f"not a table of limits (got {raw!r})")
    if extra := sorted(set(raw) - set(FLAGS)):
        raise LimitError(f"unknown limit {extra[0]!r}; known: {', '.join(sorted(FLAGS))}")
    if missing := sorted(set(FLAGS) - set(raw)):
        raise LimitError(f"lacks {', '.join(missing)}")
    for key in ("memory_bytes", "processes", "workspace_bytes", "log_bytes"):
        value, may_be_off = raw[key], key != "log_bytes"  # null: switched off ("none"); agent.log always has one
        if not (value is None and may_be_off) and (isinstance(value, bool) or not isinstance(value, int)):
            raise LimitError(f"{key} must be a whole number{' or null' if may_be_off else ''} (got {value!r})")
    if isinstance(raw["eval_s"], bool) or not isinstance(raw["eval_s"], int | float):
        raise LimitError(f"eval_s must be a number of seconds (got {raw['eval_s']!r})")
    limits = Limits(**{**raw, "eval_s": float(raw["eval_s"])})
    limits.check(names={k: k for k in FLAGS})
    return limits


def disk_error(target: Path, err: OSError, run_dir: Path) -> RunStateError:
    """One line for a file the harness could not write (a full disk, a read-only mount)."""
    why = err.strerror or str(err)
    return RunStateError(
        f"could not write {target} ({why}): free space in {Path(target).parent}, then: bench run --resume {run_dir}"
    )
