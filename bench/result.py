"""The result of one agent run: a typed, versioned record, written to ``result.json`` before MLflow is touched.

Everything that reads a run back (the record step, ``bench record``, ``bench run``'s summary, the baseline tuner,
the tests) goes through :class:`RunResult`, never through string keys of a dict, so a field that is missing
or ``null`` is handled once, here. ``result.json`` carries ``schema_version``; files written before it existed
(version 1: one flat dict, no version key) and version 2 (the run's description flat: task, agent, model,
campaign, repeat, budget_s, grace_s, device, task_source) are read by :meth:`RunResult.from_dict` too.

Layout of version 3 (the keys of :meth:`RunResult.to_dict`)::

    schema_version, run: {task, agent, model, campaign, repeat, budget_s,   what ran: the run's description
      grace_s, options, device, limits, max_cost, task_source, ...},         (bench.runspec.RunSpec.to_dict)
    task_name, metric, direction, split, baseline_score,                    under which protocol
    started_at, wall_time_s, budget_utilisation, agent_argv, agent_exit_code,
    timed_out, interrupted, agent_events, device, partial_data, partial_data_notes,
    scripts, launches_observed, checkpoints_found, rejected_checkpoints,    what the watch and collect steps saw
    limits: {settings, enforcement, hit: [{limit, value, ...}]},             the run's limits and those it hit
    evaluations: [{candidate, path, script, val_score, metric, step, saved_s, window, official: {...}}],
    audit: {locked_sha256, violations: [{rule, reason}]},
    outcome: {status, score, reason, best_val_score},
    hardware, sandboxed, hostile_inputs, software (python, torch, numpy, ..., cuda, driver: bench.software),
    workspace, run_dir, mlflow_run_id, tracking_error
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from bench.markup import one_line
from bench.runspec import RunSpec
from bench.tasks import Direction
from bench.tracking.schema import STATUSES

SCHEMA_VERSION = 3  # 3: the run's description embedded (``run``); 2: its fields flat; 1: flat, no version


class ResultError(ValueError):
    """A result.json that cannot be read (not JSON, a newer schema, a missing field)."""


@dataclass(frozen=True)
class Official:
    """What ``prepare.py --eval`` printed for one checkpoint: the official score, or why there is none."""

    value: float | None = None
    error: str | None = None
    raw: dict = field(default_factory=dict)  # the whole JSON object, as printed (plus checkpoint, eval_wall_s)

    @property
    def ok(self) -> bool:
        """A finite score and no error: only then does the checkpoint count."""
        return self.error is None and self.value is not None and math.isfinite(self.value)

    @property
    def why_not(self) -> str:
        """Why the checkpoint has no score (an evaluation JSON may carry ``value: null`` and no error)."""
        if self.error:
            return self.error
        return "prepare.py --eval printed no score" if self.value is None else f"the score is {self.value}"

    @classmethod
    def from_dict(cls, d: dict) -> Official:
        value = d.get("value")
        try:
            value = float(value) if value is not None else None
        except (TypeError, ValueError):
            value, d = None, {**d, "error": d.get("error") or f"the score is not a number: {value!r}"}
        error = d.get("error")
        return cls(value=value, error=str(error) if error is not None else None, raw=dict(d))

    def to_dict(self) -> dict:
        return {**self.raw, "value": self.value, **({"error": self.error} if self.error is not None else {})}


@dataclass(frozen=True)
class Evaluation:
    """One evaluated candidate: which checkpoint, why it was picked (``best`` or ``window-<k>``), its score."""

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
        names = {f.name for f in fields(cls)} - {"official"}
        return cls(**{k: d.get(k) for k in names}, official=Official.from_dict(d.get("official") or {}))

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "official"}
        return {**out, "official": self.official.to_dict()}


DISQUALIFY, FLAG = "disqualify", "flag"  # a finding's verdict: the run is disqualified / a person should look


@dataclass(frozen=True)
class Violation:
    """A finding of the audit: a rule of the paper's §3.4 (``rule`` 1-9), what was found in one sentence, the
    ``verdict`` (:data:`DISQUALIFY` or :data:`FLAG`) and the ``evidence`` (event ids, log lines, paths, hashes)
    a person can check it against."""

    rule: int
    reason: str
    verdict: str = DISQUALIFY
    evidence: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, d: dict) -> Violation:
        return cls(int(d["rule"]), str(d["reason"]), d.get("verdict", DISQUALIFY), tuple(d.get("evidence") or ()))

    def to_dict(self) -> dict:
        return {**asdict(self), "evidence": list(self.evidence)}


@dataclass(frozen=True)
class Audit:
    """What the audit step checked and found: every finding, disqualifying or flagged."""

    locked_sha256: dict[str, str] = field(default_factory=dict)  # locked file -> sha256 at the start
    violations: tuple[Violation, ...] = ()  # all findings, in rule order
    checked: tuple[int, ...] = ()  # the rules the audit had evidence for

    @property
    def disqualifying(self) -> tuple[Violation, ...]:
        return tuple(v for v in self.violations if v.verdict == DISQUALIFY)

    @property
    def flags(self) -> tuple[Violation, ...]:
        return tuple(v for v in self.violations if v.verdict != DISQUALIFY)

    @property
    def passed(self) -> bool:
        return not self.disqualifying

    def to_dict(self) -> dict:
        return {
            "locked_sha256": dict(self.locked_sha256),
            "violations": [v.to_dict() for v in self.violations],
            "checked": list(self.checked),
        }

    @classmethod
    def from_dict(cls, d: dict) -> Audit:
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
    # the agent ran in bench.sandbox; False with --unsandboxed, and for result.json files written before
    # sandboxes existed (they had none: from_dict reads a missing key as False)
    sandboxed: bool = True
    hardware: str = ""  # the evaluation device in words (bench.protocol.describe_hardware); "" in older files
    # bench.tracking.accounting.summary(): launched, by status, runs; "relay": what became of every spool value and
    # checkpoint event (relayed, dropped by reason, merged copies, left unrelayed, unread bytes) and the caps in force
    scripts: dict = field(default_factory=dict)
    launches_observed: list[dict] = field(default_factory=list)
    checkpoints_found: int = 0
    rejected_checkpoints: list[dict] = field(default_factory=list)  # {path, reason}
    # the run's limits (bench.sandbox.resource_limits):
    # {settings, enforcement, hit: [{limit, value, ...what happened}]};
    # hit is empty when the run stayed within all of them ({} in files written before limits existed)
    limits: dict = field(default_factory=dict)
    # what the record step refused to read of the agent's files (bench.untrusted: links, FIFOs, sparse or huge files,
    # floods), counted by kind with a few examples (bench.untrusted.Tally.to_dict); {} when nothing was refused
    hostile_inputs: dict = field(default_factory=dict)
    # the software the scores depend on (bench.software.versions: python, torch, numpy, the scorer's other packages,
    # cuda and the driver where present); {} in files written before it was recorded
    software: dict = field(default_factory=dict)
    mlflow_run_id: str | None = None
    # why MLflow has not recorded the run (the store refused or was unreachable); None once it has. `bench run`
    # exits non-zero while it is set, and `bench record RUN_DIR` records the run and clears it
    tracking_error: str | None = None
    schema_version: int = SCHEMA_VERSION

    # --- what readers ask -------------------------------------------------------------------
    @property
    def task(self) -> str:
        return self.run.task

    @property
    def agent(self) -> str:
        return self.run.agent

    @property
    def model(self) -> str | None:
        return self.run.model

    @property
    def campaign(self) -> str:
        return self.run.campaign

    @property
    def repeat(self) -> int:
        return self.run.repeat

    @property
    def budget_s(self) -> float:
        return float(self.run.budget_s) if self.run.budget_s is not None else 0.0

    @property
    def grace_s(self) -> float:
        return self.run.grace_s

    @property
    def device(self) -> str:
        return self.run.device or ""

    @property
    def task_source(self) -> dict:
        """The task's source (built-in, path or entry-point pack: name, version, origin), its folder and the
        folder's sha256 at the run's start (bench.tasks.packs.provenance); {} in files written before task packs."""
        return dict(self.run.task_source or {})

    @property
    def status(self) -> str:
        return self.outcome.status

    @property
    def score(self) -> float | None:
        return self.outcome.score

    @property
    def reason(self) -> str:
        return self.outcome.reason

    @property
    def best(self) -> Evaluation | None:
        """The evaluation of the best-by-validation checkpoint (the one that sets the official score)."""
        return next((e for e in self.evaluations if e.candidate == "best"), None)

    @property
    def violations(self) -> tuple[Violation, ...]:
        return self.audit.violations

    @property
    def label(self) -> str:
        """``t6-baseline-r1``: the MLflow run name."""
        return f"{self.task}-{self.agent}-r{self.repeat}"

    @property
    def result_file(self) -> Path:
        return Path(self.run_dir) / "result.json"

    # --- JSON -------------------------------------------------------------------------------
    def to_dict(self) -> dict:
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
        """Write ``result.json`` atomically (a killed harness leaves the old file or the new one, never half), without
        the run's secrets (:mod:`bench.redact`: the agent's final message, a reason or a path may quote a key)."""
        from bench import redact

        path = Path(path) if path else self.result_file
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(redact.text(json.dumps(self.to_dict(), indent=2, default=str)))
        os.replace(tmp, path)
        return path

    @classmethod
    def from_dict(cls, d: dict) -> RunResult:
        """Any schema version up to :data:`SCHEMA_VERSION` (version 1 had no version key and was flat)."""
        version = int(d.get("schema_version", 1))
        if version > SCHEMA_VERSION:
            raise ResultError(
                f"result.json has schema_version {version}, newer than this toolkit's {SCHEMA_VERSION}: "
                "upgrade the toolkit to read it"
            )
        d = dict(d)
        if version == 1:
            d = _upgrade_v1(d)
        d.setdefault("sandboxed", False)  # written before sandboxes: the agent ran unsandboxed
        if version < 3:
            d = _upgrade_v2(d)
        try:
            return cls(
                **{f.name: d[f.name] for f in fields(cls) if f.name in d and f.name not in _NESTED},
                run=RunSpec.from_dict(d["run"]),
                direction=Direction(d["direction"]),
                outcome=Outcome(**d["outcome"]),
                audit=Audit.from_dict(d.get("audit") or {}),
                evaluations=[Evaluation.from_dict(e) for e in d.get("evaluations") or ()],
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ResultError(f"result.json lacks or mistypes a field: {e}") from e

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
        try:
            return cls.from_dict(data)
        except ResultError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as e:  # a file of another tool, or edited by hand
            raise ResultError(f"{path} lacks or mistypes a field ({type(e).__name__}: {e})") from e


_NESTED = ("run", "direction", "outcome", "audit", "evaluations", "schema_version")
_V2_RUN = ("task", "agent", "model", "campaign", "repeat", "budget_s", "grace_s", "device", "task_source")


def _upgrade_v2(d: dict) -> dict:
    """Versions 1 and 2: the description's fields flat at the top level; the limits' settings and whether the run
    was sandboxed were kept beside (options, no_weights and max_cost were not: their defaults)."""
    run = {k: d.pop(k) for k in _V2_RUN if k in d}
    settings = (d.get("limits") or {}).get("settings")
    if settings is not None:
        run["limits"] = settings
    run["sandbox"] = bool(d.get("sandboxed"))
    run["task_source"] = run.get("task_source") or None
    return {**d, "run": run}


def _upgrade_v1(d: dict) -> dict:
    """Version 1 (flat): status, score, reason, best_val_score, violations and locked_sha256 at the top level."""
    d["outcome"] = {
        "status": d.pop("status"),
        "reason": d.pop("reason", ""),
        "score": d.pop("score", None),
        "best_val_score": d.pop("best_val_score", None),
    }
    locked = d.pop("locked_sha256", None) or {"prepare.py": d.get("prepare_sha256", "")}
    d["audit"] = {"locked_sha256": locked, "violations": d.pop("violations", [])}
    d.pop("prepare_sha256", None)
    return d
