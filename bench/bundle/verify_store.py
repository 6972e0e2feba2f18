"""``bench verify``'s look at the tracking store.

Does each run's MLflow record still say what its result.json says?

A leaderboard is read from MLflow (``bench report``, the UI), a verification from the run directory;
a metric edited in one and not the other would make them tell two stories. The metrics compared are
the ones the record step derives from ``result.json``
(:func:`bench.bundle.archive.expected_metrics`, shared with the bundle's own check, so there is one
list): the agent run's outcome (score, success, wall time, ...) and each eval run's validation and
official scores. Read through :mod:`bench.tracking.reader` (the latest value of each metric, as the
UI and the reports show it).
"""

from __future__ import annotations

import math
from pathlib import Path

from bench.bundle import archive as bundle
from bench.pipeline import record
from bench.result import RunResult
from bench.tracking import reader, schema, whole_runs

PARENT, NAME = "mlflow.parentRunId", "mlflow.runName"  # MLflow's own tags: an eval run's agent run and its name


def differences(results: dict[Path, RunResult], experiment: str | None = None) -> dict[Path, list[str]]:
    """Per run directory, every metric of its MLflow runs that differs from its result.json.

    And every MLflow run it should have that the store lacks (a run never recorded: ``bench record
    RUN_DIR``). ``experiment``: the one to look in when it is not the one each result.json names (a
    campaign imported under another name). A run imported from a bundle (``bench import``) is found
    by the id it had where it was recorded (the tag ``schema.SOURCE_RUN``).
    """
    out: dict[Path, list[str]] = {path: [] for path in results}
    read = reader.open_reader()
    for campaign in sorted({r.run.campaign for r in results.values()}):
        ids = list(read.experiments([experiment or campaign]))  # imported --as another name: that experiment
        agents = _rows(read.runs(ids, schema.KIND_AGENT)) if ids else {}
        evals = list(_rows(read.runs(ids, schema.KIND_EVAL)).values()) if ids else []
        for path, result in results.items():
            if result.run.campaign == campaign:
                out[path] = _one(path, result, agents, evals)
    return out


def _rows(frame) -> dict[str, dict]:
    return {row["run_id"]: row for row in frame.to_dict("records")}


def _one(run_dir: Path, result: RunResult, agents: dict[str, dict], evals: list[dict]) -> list[str]:
    run_id = result.mlflow_run_id
    if not run_id:
        return [f"{result.run.label}: not recorded in MLflow (bench record {result.run_dir})"]
    # a store the run was imported into (bench import) holds it under a new id, tagged with the one
    # recorded
    imported = [row for row in agents.values() if row.get(f"t:{schema.SOURCE_RUN}") == run_id]
    agent = agents.get(run_id) or (imported[0] if imported else None)
    if agent is None:
        return [f"{result.run.label}: its MLflow run {run_id} is not in the tracking store"]
    run_id = agent["run_id"]
    out = _metrics(f"MLflow run {result.run.label}", agent, bundle.expected_metrics(result, _as_run(agent)))
    out += _artifacts(f"MLflow run {result.run.label}", run_id, _agent_artifacts(run_dir))
    children = {str(r.get(f"t:{NAME}")): r for r in evals if r.get(f"t:{PARENT}") == run_id}
    for name in dict.fromkeys(f"eval {Path(e.path).name}"[:250] for e in result.evaluations):
        row = children.get(name)
        if row is None:
            out.append(f"MLflow run {result.run.label}: its eval run {name!r} is missing")
            continue
        where = f"MLflow {name!r} of {result.run.label}"
        out += _metrics(where, row, bundle.expected_metrics(result, _as_run(row)))
        out += _artifacts(where, row["run_id"], ["official.json"])
    return out


def _agent_artifacts(run_dir: Path) -> list[str]:
    """What the record step always logs on the agent run.

    Result.json, the audit, and each evidence file the run directory holds (of those it uploads).
    """
    evidence = Path(run_dir) / "evidence"
    kept = [f"evidence/{n}" for n in record.EVIDENCE_ARTIFACTS if (evidence / n).is_file()]
    return ["result.json", schema.AUDIT_ARTIFACT, *kept]


def _artifacts(where: str, run_id: str, expected: list[str]) -> list[str]:
    have = set(whole_runs.artifact_paths(run_id))
    return [f"{where}: artifact {name} is missing from the tracking store" for name in expected if name not in have]


def _as_run(row: dict) -> dict:
    """A reader's row as the run dict :func:`bench.bundle.archive.expected_metrics` reads.

    Its kind and name.
    """
    return {"tags": {schema.KIND: row.get(f"t:{schema.KIND}")}, "run_name": row.get(f"t:{NAME}")}


def _metrics(where: str, row: dict, expected: dict[str, float | None]) -> list[str]:
    out = []
    for key, want in expected.items():
        got = row.get(f"m:{key}")  # NaN: the run has no such metric (another run of the frame has)
        got = None if got is None or (isinstance(got, float) and math.isnan(got)) else float(got)
        want = None if want is None or math.isnan(float(want)) else float(want)
        if got != want:  # exact: MLflow keeps the float64 the record step logged
            out.append(f"{where}: metric {key} is {got!r} in MLflow, {want!r} in result.json")
    return out
