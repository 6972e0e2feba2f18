"""The result of one agent run.

A typed, versioned record, written to ``result.json`` before MLflow is touched.

Everything that reads a run back (the record step, ``bench record``, ``bench run``'s summary, the
baseline tuner, the tests) goes through :class:`RunResult`, never through string keys of a dict, so
a field that is missing or ``null`` is handled once, here.

``result.json`` has one format: ``schema_version`` :data:`SCHEMA_VERSION` with every key below. A
file of another version, or without one (written before 0.1's format reset), is refused with one
line naming the version that wrote it and what to do (:class:`ResultError`); nothing reads it into
this format. A field added to :class:`RunResult` bumps :data:`SCHEMA_VERSION`, so that a file
without it is refused by its version, not half read.

Layout (the keys of :meth:`RunResult.to_dict`)::

    schema_version,
    run: {task, agent, model, campaign, repeat,      what ran: the run's description
      budget_s, grace_s, options, device, limits,    (bench.runspec.RunSpec.to_dict)
      max_cost, task_source, ...},
    task_name, metric, direction, split,             under which protocol
      baseline_score,
    started_at, wall_time_s, budget_utilisation, agent_argv, agent_exit_code,
    timed_out, interrupted, agent_events, device, partial_data, partial_data_notes,
    scripts, launches_observed, checkpoints_found,   what the watch and collect steps saw
      rejected_checkpoints,
    limits: {settings, enforcement,                  the run's limits and those it hit
      hit: [{limit, value, ...}]},
    evaluations: [{candidate, path, script, val_score, metric, step, saved_s, window,
      official: {...}}],
    audit: {locked_sha256, violations: [{rule, reason}]},
    outcome: {status, score, reason, best_val_score},
    hardware, sandboxed, hostile_inputs,
    software (python, torch, numpy, ..., cuda, driver: bench.software),
    workspace, run_dir, mlflow_run_id, tracking_error
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from bench.errors import BenchError
from bench.markup import one_line
from bench.runspec import RunSpec
from bench.tasks import Direction
from bench.tracking.schema import STATUSES

SCHEMA_VERSION = 3  # the one format read and written (0.1's format reset); another version is refused
REDO = "re-run it with this toolkit, or read it with the toolkit version that wrote it"


class ResultError(BenchError, ValueError):
    """A result.json that cannot be read (not JSON, another format, a missing field).

    The message says what to do.
    """


@dataclass(frozen=True)
class Official:
    """What ``prepare.py --eval`` printed for one checkpoint.

    The official score, or why there is none.
    """

    value: float | None = None
    error: str | None = None
    raw: dict = field(default_factory=dict)  # the whole JSON object, as printed (plus checkpoint, eval_wall_s)

    @property
    def ok(self) -> bool:
        """A finite score and no error: only then does the checkpoint count."""
        return self.error is None and self.value is not None and math.isfinite(self.value)

    @property
    def why_not(self) -> str:
        """Why the checkpoint has no score.

        An evaluation JSON may carry ``value: null`` and no error.
        """
        if self.error:
            return self.error
        return "prepare.py --eval printed no score" if self.value is None else f"the score is {self.value}"

    @classmethod
    def from_dict(cls, d: dict) -> Official:
        """The evaluation's JSON object, read back (a score that is no number becomes the error)."""
        value = d.get("value")
        try:
            value = float(value) if value is not None else None
        except (TypeError, ValueError):
            value, d = None, {**d, "error": d.get("error") or f"the score is not a number: {value!r}"}
        error = d.get("error")
        return cls(value=value, error=str(error) if error is not None else None, raw=dict(d))

    def to_dict(self) -> dict:
        """The JSON object as printed, with the score and the error as read."""
        return {**self.raw, "value": self.value, **({"error": self.error} if self.error is not None else {})}


@dataclass(frozen=True)
class Evaluation:
    """One evaluated candidate.

    Which checkpoint, why it was picked (``best`` or ``window-<k>``), its score.
    """

    candidate: str
    path: str
    script: str
    val_score: float
    metric: str
    step: int | None
    saved_s: float
    window: int
    official: Official

    @classmethod
    def from_dict(cls, d: dict) -> Evaluation:
        """An evaluation as result.json holds it."""
        names = {f.name for f in fields(cls)} - {"official"}
        return cls(**{k: d.get(k) for k in names}, official=Official.from_dict(d.get("official") or {}))

    def to_dict(self) -> dict:
        """The evaluation as result.json holds it."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "official"}
        return {**out, "official": self.official.to_dict()}


DISQUALIFY, FLAG = "disqualify", "flag"  # a finding's verdict: the run is disqualified / a person should look


@dataclass(frozen=True)
class Violation:
    """A finding of the audit.

    A rule of the paper's §3.4 (``rule`` 1-9), what was found in one sentence, the ``verdict``
    (:data:`DISQUALIFY` or :data:`FLAG`) and the ``evidence`` (event ids, log lines, paths, hashes)
    a person can check it against.
    """

    rule: int
    reason: str
    verdict: str = DISQUALIFY
    evidence: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, d: dict) -> Violation:
        """A finding as result.json holds it."""
        return cls(int(d["rule"]), str(d["reason"]), d.get("verdict", DISQUALIFY), tuple(d.get("evidence") or ()))

    def to_dict(self) -> dict:
        """The finding as result.json holds it."""
        return {**asdict(self), "evidence": list(self.evidence)}


@dataclass(frozen=True)
class Audit:
    """What the audit step checked and found: every finding, disqualifying or flagged."""

    locked_sha256: dict[str, str] = field(default_factory=dict)  # locked file -> sha256 at the start
    violations: tuple[Violation, ...] = ()  # all findings, in rule order
    checked: tuple[int, ...] = ()  # the rules the audit had evidence for

    @property
    def disqualifying(self) -> tuple[Violation, ...]:
        """The findings that disqualify the run."""
        return tuple(v for v in self.violations if v.verdict == DISQUALIFY)

    @property
    def flags(self) -> tuple[Violation, ...]:
        """The findings a person should look at (they do not disqualify)."""
        return tuple(v for v in self.violations if v.verdict != DISQUALIFY)

    @property
    def passed(self) -> bool:
        """No finding disqualifies the run."""
        return not self.disqualifying

    def to_dict(self) -> dict:
        """The audit as result.json holds it."""
        return {
            "locked_sha256": dict(self.locked_sha256),
            "violations": [v.to_dict() for v in self.violations],
            "checked": list(self.checked),
        }

    @classmethod
    def from_dict(cls, d: dict) -> Audit:
        """An audit as result.json holds it."""
        found = tuple(Violation.from_dict(v) for v in d.get("violations") or ())
        return cls(dict(d.get("locked_sha256") or {}), found, tuple(d.get("checked") or ()))


@dataclass(frozen=True)
class Outcome:
    """The paper's run status with the official score (success only) and the reason in one line."""

    status: str  # one of STATUSES
    reason: str
    score: float | None = None
    best_val_score: float | None = None  # the self-reported validation score of the scored checkpoint

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ResultError(f"unknown run status {self.status!r}; expected one of {', '.join(STATUSES)}")
        object.__setattr__(self, "reason", one_line(self.reason))  # it quotes agent-chosen text: one plain line


@dataclass
class RunResult:
    """One agent run on one task, from the workspace to the outcome (``result.json``)."""

    run: RunSpec  # what ran: the run's description as launched (bench.runspec)
    task_name: str
    metric: str
    direction: Direction
    split: str
    baseline_score: float
    started_at: float
    wall_time_s: float
    budget_utilisation: float
    agent_argv: list[str]
    agent_exit_code: int | None
    timed_out: bool
    interrupted: bool
    workspace: str
    run_dir: str
    outcome: Outcome
    audit: Audit = field(default_factory=Audit)
    evaluations: list[Evaluation] = field(default_factory=list)
    agent_events: dict = field(default_factory=dict)  # bench.agents.stream.AgentStream.summary()
    partial_data: bool = False
    partial_data_notes: list[str] = field(default_factory=list)
    sandboxed: bool = True  # the agent ran in bench.sandbox; False with --unsandboxed
    hardware: str = ""  # the evaluation device in words (bench.protocol.describe_hardware)
    # bench.tracking.accounting.summary(): launched, by status, runs; "relay": what became of every
    # spool value and checkpoint event (relayed, dropped by reason, merged copies, left unrelayed,
    # unread bytes) and the caps in force
    scripts: dict = field(default_factory=dict)
    launches_observed: list[dict] = field(default_factory=list)
    checkpoints_found: int = 0
    rejected_checkpoints: list[dict] = field(default_factory=list)  # {path, reason}
    # the run's limits (bench.sandbox.resource_limits):
    # {settings, enforcement, hit: [{limit, value, ...what happened}]};
    # hit is empty when the run stayed within all of them
    limits: dict = field(default_factory=dict)
    # what the record step refused to read of the agent's files (bench.untrusted: links, FIFOs,
    # sparse or huge files, floods), counted by kind with a few examples
    # (bench.untrusted.Tally.to_dict); {} when nothing was refused
    hostile_inputs: dict = field(default_factory=dict)
    # the software the scores depend on (bench.software.versions: python, torch, numpy, the scorer's
    # other packages, cuda and the driver where present)
    software: dict = field(default_factory=dict)
    mlflow_run_id: str | None = None
    # why MLflow has not recorded the run (the store refused or was unreachable); None once it has.
    # `bench run` exits non-zero while it is set, and `bench record RUN_DIR` records the run and
    # clears it
    tracking_error: str | None = None
    schema_version: int = SCHEMA_VERSION

    # --- what readers ask (of the outcome and the audit; the description is ``run``) ----------
    @property
    def status(self) -> str:
        """The paper's run status (the outcome's)."""
        return self.outcome.status

    @property
    def score(self) -> float | None:
        """The official score (success only)."""
        return self.outcome.score

    @property
    def reason(self) -> str:
        """Why the run ended as it did, in one line."""
        return self.outcome.reason

    @property
    def best(self) -> Evaluation | None:
        """The evaluation of the best-by-validation checkpoint.

        The one that sets the official score.
        """
        return next((e for e in self.evaluations if e.candidate == "best"), None)

    @property
    def violations(self) -> tuple[Violation, ...]:
        """Every finding of the audit, disqualifying or flagged."""
        return self.audit.violations

    @property
    def result_file(self) -> Path:
        """Where ``result.json`` is written: the run directory."""
        return Path(self.run_dir) / "result.json"

    # --- JSON -------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The one format of ``result.json`` (its keys: the module's layout)."""
        out: dict[str, Any] = {"schema_version": self.schema_version}
        for f in fields(self):
            if f.name == "schema_version":
                continue
            value = getattr(self, f.name)
            if f.name == "evaluations":
                value = [e.to_dict() for e in value]
            elif f.name == "audit":
                value = value.to_dict()
            elif f.name == "outcome":
                value = asdict(value)
            elif f.name == "run":
                value = value.to_dict()
            out[f.name] = value
        return out

    def write(self, path: Path | None = None) -> Path:
        """Write ``result.json`` atomically, without the run's secrets.

        A killed harness leaves the old file or the new one, never half; the secrets are taken out
        by :mod:`bench.redact` (the agent's final message, a reason or a path may quote a key).
        """
        from bench import redact

        path = Path(path) if path else self.result_file
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(redact.text(json.dumps(self.to_dict(), indent=2, default=str)))
        os.replace(tmp, path)
        return path

    @classmethod
    def from_dict(cls, d: dict, where: str = "result.json") -> RunResult:
        """Read the one format (:data:`SCHEMA_VERSION`, every key).

        :class:`ResultError` in one line for another.

        ``where`` names the file in the message (its path, when read from one).
        """
        refuse_other_format(d, where)
        missing = [f.name for f in fields(cls) if f.name not in d]
        if missing:
            raise ResultError(
                f"{where} lacks {', '.join(missing)}: written by an earlier build of schema_version {SCHEMA_VERSION}; "
                f"{REDO}"
            )
        try:
            return cls(
                **{f.name: d[f.name] for f in fields(cls) if f.name not in _NESTED},
                run=RunSpec.from_dict(d["run"]),
                direction=Direction(d["direction"]),
                outcome=Outcome(**d["outcome"]),
                audit=Audit.from_dict(d["audit"] or {}),
                evaluations=[Evaluation.from_dict(e) for e in d["evaluations"] or ()],
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:  # another tool's file, or edited by hand
            raise ResultError(f"{where} lacks or mistypes a field ({type(e).__name__}: {e})") from e

    @classmethod
    def load(cls, path: Path) -> RunResult:
        """Read ``result.json`` (or the run directory holding it)."""
        path = Path(path)
        if path.is_dir():
            path = path / "result.json"
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ResultError(f"no result.json at {path}: is this a run directory of `bench run`?") from None
        except (ValueError, RecursionError) as e:
            raise ResultError(f"{path} is not valid JSON ({e}); the run's files are still in {path.parent}") from e
        if not isinstance(data, dict):
            raise ResultError(f"{path} holds a JSON {type(data).__name__}, not a run's result")
        return cls.from_dict(data, str(path))


def refuse_other_format(d: dict, where: str = "result.json") -> None:
    """Refuse ``d`` unless it is this format.

    :class:`ResultError`, one line naming the version that wrote ``d`` and what to do.
    """
    version = d.get("schema_version")
    if version == SCHEMA_VERSION and type(version) is int:
        return
    if version is None:
        raise ResultError(f"{where} has no schema_version: written before 0.1's format reset; {REDO}")
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise ResultError(
            f"{where} has schema_version {version}, newer than this toolkit's {SCHEMA_VERSION}: upgrade the toolkit "
            "to read it"
        )
    raise ResultError(
        f"{where} has schema_version {version!r}: written by an older toolkit (this one reads {SCHEMA_VERSION} only); "
        f"{REDO}"
    )


_NESTED = ("run", "direction", "outcome", "audit", "evaluations")
