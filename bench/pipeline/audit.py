"""Audit (pipeline step 6; paper §3.4).

The nine rules checked after the run, from evidence the agent cannot rewrite.

This step gathers what the checks read (:class:`bench.rules.Context`: the run directory's
``evidence/``, its ``events.jsonl``, the evaluations and the collect step's rejections, the state of
the scorer's inputs) and runs every check of :mod:`bench.rules`. Each finding carries its rule, its
evidence and a verdict: a ``disqualify`` finding disqualifies the run (:mod:`bench.outcome`), a
``flag`` is recorded for a person to look at. The findings go to ``result.json``, to
``evidence/audit.json`` and to the MLflow run (tags and the ``audit.json`` artifact). It runs the
same way for a run finished by ``bench run --resume``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.checksums import sha256
from bench.evidence import Evidence
from bench.pipeline.workspace import Workspace
from bench.result import Audit, Evaluation
from bench.rules import Context, run_all
from bench.tasks import Task, data


def scorer_inputs(task: Task) -> dict[str, str]:
    """The sha256 of the task's own files the scorer and the staging read.

    Its locked files and task.toml: taken at the start, compared at the audit (rule 8). The prepared
    data carry their own content list (``verify_prepared``).
    """
    names = [*task.locked_files, "task.toml"]
    return {f"task/{name}": sha256(task.file(name)) for name in names if task.file(name).is_file()}


def _originals_changed(task: Task, evidence: Evidence) -> list[str]:
    recorded = evidence.read_json("inputs.json")
    now = scorer_inputs(task)
    return [f"{k}: sha256 {v[:12]} at the start, {now.get(k, 'missing')[:12]} now" for k, v in recorded.items()
            if now.get(k) != v]  # fmt: skip


def _data_error(task: Task) -> str | None:
    try:
        data.verify_prepared(task)
    except data.DataError as e:
        return str(e)
    return None


@dataclass(frozen=True)
class AuditInput:
    """What the audit judges beside the run's evidence.

    Built by the runner (``runner.Run``), or by ``bench verify`` from what a finished run recorded.
    """

    ws: Workspace
    locked_sha256: Mapping[str, str]  # each locked file's sha256 at the start
    evaluations: tuple[Evaluation, ...] = ()
    started_at: float = 0.0  # when the agent started (epoch seconds)
    budget_s: float = float("inf")
    agent_argv: tuple[str, ...] = ()
    # the collect step's rejections: objects with ``path`` and ``reason``, or the dicts result.json
    # keeps
    rejected: tuple = ()
    offline: bool = False  # the agent declared no endpoint: any request its sandbox saw came from the run's code
    # hosts its CLI asks by itself (:attr:`bench.agents.base.Agent.own_hosts`): their refused
    # requests are no finding
    own_hosts: tuple[str, ...] = ()
    keep: bool = True  # write evidence/audit.json (False: bench verify leaves the recorded evidence alone)
    # where the workspace was when the run ran, when the run folder has moved since (bench verify of
    # a bundle or an imported campaign): the recorded paths are judged against it
    recorded_workspace: Path | None = None


def audit(given: AuditInput) -> Audit:
    """Every check of :mod:`bench.rules`, on the run's evidence and the :class:`AuditInput`."""
    ws, locked_sha256 = given.ws, given.locked_sha256
    evidence = Evidence(ws.run_dir)
    recorded = evidence.path("inputs.json").is_file()  # a run of the pipeline (a bare workspace has no evidence)
    start = evidence.read_json("manifest-start.json")
    ctx = Context(
        workspace=ws.path,
        run_dir=ws.run_dir,
        task_id=ws.task.id,
        locked=tuple(ws.task.locked_files),
        locked_sha256=dict(locked_sha256),
        evaluations=list(given.evaluations),
        started_at=given.started_at,
        budget_s=given.budget_s,
        agent_argv=list(given.agent_argv),
        rejected=[r if isinstance(r, dict) else {"path": str(r.path), "reason": r.reason} for r in given.rejected],
        offline=given.offline,
        own_hosts=tuple(given.own_hosts),
        provided={k: e for k, e in start.items() if k.startswith("weights/")},
        data_error=_data_error(ws.task) if recorded else None,
        originals_changed=_originals_changed(ws.task, evidence) if recorded else [],
        recorded_workspace=given.recorded_workspace,
        task_dir=ws.task.folder,
    )
    found = run_all(ctx)
    # without the run's evidence (a workspace audited on its own) only the rules read from files and
    # scores apply
    checked = tuple(range(1, 10)) if recorded else (1, 5, 7, 9)
    result = Audit(locked_sha256=dict(locked_sha256), violations=found, checked=checked)
    if given.keep and ws.run_dir.is_dir():
        evidence.write_json("audit.json", result.to_dict())
    return result


def summary(audited: Audit) -> str:
    """One line for people: 'no finding', or the findings by rule with their verdicts."""
    if not audited.violations:
        return "audit: no finding (rules 1-9 checked)"
    parts = [f"rule {v.rule} {v.verdict}: {v.reason}" for v in audited.violations]
    return "audit: " + " | ".join(parts)
