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

from bench.runspec import RunSpec, limits_of
from bench.sandbox.resource_limits import LimitError, Limits

STATE_FILE = "run.json"
VERSION = 2  # 2: the run's description embedded whole (``spec``); 1: its fields flat beside the launch's


class RunStateError(RuntimeError):
    """run.json is missing, malformed or cannot be written; the message says what to do."""


@dataclass
class RunState:
    """The run's description (:class:`bench.runspec.RunSpec`, as a dict) and what its launch added: the run token,
    the agent's pid and argv, the endpoints, the MLflow run and the harness that ran it."""

    spec: dict  # RunSpec.to_dict() as the run launched (budget, device and task source filled in)
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
    version: int = VERSION

    def harness_alive(self) -> bool:
        """The harness that wrote this file still runs (same pid and same start time: not a reused pid)."""
        started = _create_time(self.harness_pid)
        return started is not None and abs(started - self.harness_started) < 0.05

    def run_spec(self, *, console: bool = True) -> RunSpec:
        """The run's description, rebuilt (checked when the file was read)."""
        return RunSpec.from_dict(self.spec, console=console)

    def run_limits(self) -> Limits | None:
        """The limits the run was launched with (checked when read); None for a run.json that has none (written
        before runs had limits: a resume uses the defaults and says so)."""
        return None if self.spec.get("limits") is None else limits_of(self.spec["limits"])

    # what readers ask of the description
    @property
    def label(self) -> str:
        return f"{self.spec['task']}-{self.spec['agent']}-r{self.spec['repeat']}"

    @property
    def budget_s(self) -> float:
        return float(self.spec["budget_s"])

    @property
    def grace_s(self) -> float:
        return float(self.spec["grace_s"])

    @property
    def max_cost(self) -> float | None:
        return self.spec.get("max_cost")


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
    """The run's state; :class:`RunStateError` (one line) for a missing or malformed run.json. A file of
    version 1 (the description's fields flat) is read too."""
    target = path(run_dir)
    try:
        raw = json.loads(target.read_text())
    except FileNotFoundError:
        raise RunStateError(f"no {STATE_FILE} in {run_dir}: not a run of this version of bench run") from None
    except (OSError, ValueError) as e:
        raise RunStateError(f"{target} cannot be read ({e}); the run's files are still in {run_dir}") from e
    if not isinstance(raw, dict):
        raise RunStateError(f"{target} is not a JSON object")
    if int(raw.get("version", 1)) > VERSION:
        raise RunStateError(f"{target} has version {raw['version']}, newer than this toolkit's {VERSION}: upgrade")
    if int(raw.get("version", 1)) == 1:
        raw = _upgrade_v1(raw)
    names = {f.name for f in fields(RunState)}
    optional = {"harness_pid", "harness_started", "harness_died_at", "watched", "version"}
    missing = sorted(names - set(raw) - optional)
    missing += sorted(f"spec.{k}" for k in _SPEC_KEYS if k not in (raw.get("spec") or {}))
    if missing:
        raise RunStateError(f"{target} lacks {', '.join(missing)}: it was not written by bench run")
    try:
        state = RunState(**{k: v for k, v in raw.items() if k in names})
        state.version = VERSION
        state.agent_pid, state.started_at = int(state.agent_pid), float(state.started_at)
        float(state.spec["budget_s"])
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
    try:
        state.run_spec()
    except (TypeError, ValueError) as e:
        raise RunStateError(f"{target} mistypes a field of the run's description ({e})") from e
    return state


_SPEC_KEYS = ("task", "agent", "campaign", "repeat", "budget_s", "grace_s", "device", "sandbox")
_V1_LAUNCH = {"token", "agent_pid", "started_at", "agent_argv", "endpoints", "mlflow_run_id", "partial_notes"}
_V1_LAUNCH |= {"data_dir", "harness_pid", "harness_started", "harness_died_at", "watched", "version", "label"}


def _upgrade_v1(raw: dict) -> dict:
    """Version 1: the description's fields (task, agent, budget_s, limits, max_cost, ...) flat beside the launch's."""
    spec = {k: v for k, v in raw.items() if k not in _V1_LAUNCH}
    return {**{k: v for k, v in raw.items() if k in _V1_LAUNCH and k != "label"}, "spec": spec}


def disk_error(target: Path, err: OSError, run_dir: Path) -> RunStateError:
    """One line for a file the harness could not write (a full disk, a read-only mount)."""
    why = err.strerror or str(err)
    return RunStateError(
        f"could not write {target} ({why}): free space in {Path(target).parent}, then: bench run --resume {run_dir}"
    )
