"""Run state (beside the launch step).

``<run_dir>/run.json``, what is needed to finish a run without its harness.

Written atomically once the agent is launched. If the harness dies (SIGKILL, an out-of-memory kill,
a lost node), ``bench run --resume RUN_DIR`` (:mod:`bench.resume`) reads it to end what of the run
is still alive (the run token finds it), relay the spool, then collect, evaluate, audit and record
as the harness would have. The harness's own pid and process start time tell a resume whether that
harness is in fact still running.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

import psutil

from bench.errors import BenchError, InputError
from bench.runspec import RunSpec
from bench.sandbox.resource_limits import LimitError

STATE_FILE = "run.json"
VERSION = 2  # the one format read and written (0.1's format reset): the run's description embedded whole (``spec``)
REDO = "finish it with the toolkit version that wrote it, or run it again with this one"


class RunStateError(BenchError, RuntimeError):
    """run.json is missing, malformed, of another format or cannot be written.

    The message says what to do.
    """


@dataclass
class RunState:
    """The run's description and what its launch added.

    The description (:class:`bench.runspec.RunSpec`, read as ``state.spec.<field>``) as the run
    launched (budget, device and task source filled in); the launch added the run token, the agent's
    pid and argv, the endpoints, the MLflow run and the harness that ran it.
    """

    spec: RunSpec
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
        """The harness that wrote this file still runs.

        Same pid and same start time, not a reused pid.
        """
        started = _create_time(self.harness_pid)
        return started is not None and abs(started - self.harness_started) < 0.05


def _create_time(pid: int) -> float | None:
    try:
        proc = psutil.Process(pid)
        return None if proc.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD) else proc.create_time()
    except psutil.Error:
        return None


def path(run_dir: Path) -> Path:
    """Where a run directory's ``run.json`` is."""
    return Path(run_dir) / STATE_FILE


def write(run_dir: Path, state: RunState) -> Path:
    """Write run.json atomically (tmp + rename).

    :class:`RunStateError` saying what to do if the disk refuses.
    """
    target = path(run_dir)
    tmp = target.with_name(f".{STATE_FILE}.{os.getpid()}.tmp")
    raw = {f.name: getattr(state, f.name) for f in fields(state)}
    try:
        tmp.write_text(json.dumps({**raw, "spec": state.spec.to_dict()}, indent=1))
        os.replace(tmp, target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise disk_error(target, e, run_dir) from e
    return target


def read(run_dir: Path) -> RunState:
    """The run's state.

    :class:`RunStateError` (one line) for a missing, malformed or other-format run.json.
    """
    target = path(run_dir)
    try:
        raw = json.loads(target.read_text())
    except FileNotFoundError:
        raise RunStateError(f"no {STATE_FILE} in {run_dir}: not a run of this version of bench run") from None
    except (OSError, ValueError) as e:
        raise RunStateError(f"{target} cannot be read ({e}); the run's files are still in {run_dir}") from e
    if not isinstance(raw, dict):
        raise RunStateError(f"{target} is not a JSON object")
    _refuse_other_format(raw, target)
    names = {f.name for f in fields(RunState)}
    optional = {"harness_pid", "harness_started", "harness_died_at", "watched"}
    missing = sorted(names - set(raw) - optional)
    missing += sorted(f"spec.{k}" for k in _SPEC_KEYS if k not in (raw.get("spec") or {}))
    if missing:
        raise RunStateError(f"{target} lacks {', '.join(missing)}: it was not written by bench run")
    try:  # the description as the run launched: a hand-edited or foreign value is refused here, not used
        spec = RunSpec.from_dict(raw["spec"])
    except LimitError as e:
        raise RunStateError(f"{target}: limits: {e}; fix it, or run it again with this toolkit") from e
    except InputError as e:  # the model's rules, the same as for the flags: one line per problem
        why = "; ".join(getattr(e, "lines", None) or [str(e)])
        raise RunStateError(
            f"{target}: {why}; fix the value or remove the key (an optional one then takes its default), or run it "
            "again with this toolkit"
        ) from e
    except (TypeError, ValueError, AttributeError) as e:
        raise RunStateError(f"{target} mistypes a field of the run's description ({e})") from e
    try:
        state = RunState(**{k: v for k, v in raw.items() if k in names and k != "spec"}, spec=spec)
        state.agent_pid, state.started_at = int(state.agent_pid), float(state.started_at)
        float(spec.budget_s)  # filled at the launch: a resume's time is counted against it
        if state.watched is not None:  # what a resume rebuilds the watch's outcome from: checked here, not there
            from bench.pipeline.watch import Watched

            Watched(**state.watched)
    except (TypeError, ValueError) as e:
        raise RunStateError(f"{target} mistypes a field ({e})") from e
    return state


def _refuse_other_format(raw: dict, target: Path) -> None:
    """Refuse ``raw`` unless it is :data:`VERSION`: one line naming its version and what to do."""
    version = raw.get("version")
    if version == VERSION and type(version) is int:
        return
    if version is None:
        why = "has no version: written before 0.1's format reset"
    elif isinstance(version, int) and not isinstance(version, bool) and version > VERSION:
        raise RunStateError(f"{target} has version {version}, newer than this toolkit's {VERSION}: upgrade the toolkit")
    else:
        why = f"has version {version!r}: written by an older toolkit (this one reads {VERSION} only)"
    raise RunStateError(f"{target} {why}; {REDO}")


_SPEC_KEYS = ("task", "agent", "campaign", "repeat", "budget_s", "grace_s", "device", "sandbox", "limits")


def disk_error(target: Path, err: OSError, run_dir: Path) -> RunStateError:
    """One line for a file the harness could not write (a full disk, a read-only mount)."""
    why = err.strerror or str(err)
    return RunStateError(
        f"could not write {target} ({why}): free space in {Path(target).parent}, then: bench run --resume {run_dir}"
    )
