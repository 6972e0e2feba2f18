"""Audit (pipeline step 6; paper §3.4): the nine rules checked after the run, from evidence the agent cannot rewrite.

This step gathers what the checks read (:class:`bench.rules.Context`: the run directory's ``evidence/``, its
``events.jsonl``, the evaluations and the collect step's rejections, the state of the scorer's inputs) and runs
every check of :mod:`bench.rules`. Each finding carries its rule, its evidence and a verdict: a ``disqualify``
finding disqualifies the run (:mod:`bench.outcome`), a ``flag`` is recorded for a person to look at. The findings
go to ``result.json``, to ``evidence/audit.json`` and to the MLflow run (tags and the ``audit.json`` artifact).
It runs the same way for a run finished by ``bench run --resume``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from bench.checksums import sha256
from bench.evidence import Evidence
from bench.pipeline.workspace import Workspace
from bench.result import Audit, Evaluation
from bench.rules import Context, run_all
from bench.tasks import Task, data


def scorer_inputs(task: Task) -> dict[str, str]:
    """sha256 of the task's own files the scorer and the staging read (its locked files, task.toml): taken at the
    start, compared at the audit (rule 8). The prepared data carry their own content list (``verify_prepared``)."""
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


def audit(
    ws: Workspace,
    locked_sha256: dict[str, str],
    evaluations: Iterable[Evaluation] = (),
    *,
    started_at: float = 0.0,
    budget_s: float = float("inf"),
    agent_argv: Iterable[str] = (),
    rejected: Iterable = (),
    offline: bool = False,
    own_hosts: Iterable[str] = (),
    keep: bool = True,
    recorded_workspace: Path | None = None,
) -> Audit:
    """Every check of :mod:`bench.rules`; ``locked_sha256`` maps each locked file to its hash at the start.

    ``rejected``: the collect step's rejections (objects with ``path`` and ``reason``, or dicts); ``offline``: the
    agent declared no endpoint, so any request its sandbox saw came from the run's own code; ``own_hosts``: hosts its
    CLI asks by itself (:attr:`bench.agents.base.Agent.own_hosts`), whose refused requests are not findings. ``keep``:
    write ``evidence/audit.json`` (False: ``bench verify`` re-runs the audit and leaves the recorded evidence alone).
    ``recorded_workspace``: where the workspace was when the run ran, when the run folder has moved since (``bench
    verify`` of a bundle or an imported campaign): the recorded paths are judged against it."""
    evidence = Evidence(ws.run_dir)
    recorded = evidence.path("inputs.json").is_file()  # a run of the pipeline (a bare workspace has no evidence)
    start = evidence.read_json("manifest-start.json")
    ctx = Context(
        workspace=ws.path,
        run_dir=ws.run_dir,
        task_id=ws.task.id,
        locked=tuple(ws.task.locked_files),
        locked_sha256=dict(locked_sha256),
        evaluations=list(evaluations),
        started_at=started_at,
        budget_s=budget_s,
        agent_argv=list(agent_argv),
        rejected=[r if isinstance(r, dict) else {"path": str(r.path), "reason": r.reason} for r in rejected],
        offline=offline,
        own_hosts=tuple(own_hosts),
        provided={k: e for k, e in start.items() if k.startswith("weights/")},
        data_error=_data_error(ws.task) if recorded else None,
        originals_changed=_originals_changed(ws.task, evidence) if recorded else [],
        recorded_workspace=recorded_workspace,
        task_dir=ws.task.folder,
    )
    found = run_all(ctx)
    # without the run's evidence (a workspace audited on its own) only the rules read from files and scores apply
    checked = tuple(range(1, 10)) if recorded else (1, 5, 7, 9)
    result = Audit(locked_sha256=dict(locked_sha256), violations=found, checked=checked)
    if keep and ws.run_dir.is_dir():
        evidence.write_json("audit.json", result.to_dict())
    return result


def summary(audited: Audit) -> str:
    """One line for people: 'no finding', or the findings by rule with their verdicts."""
    if not audited.violations:
        return "audit: no finding (rules 1-9 checked)"
    parts = [f"rule {v.rule} {v.verdict}: {v.reason}" for v in audited.violations]
    return "audit: " + " | ".join(parts)
