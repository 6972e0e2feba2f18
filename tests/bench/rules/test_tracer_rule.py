"""Rule 7's reporting side (bench/rules/tracer.py) on hand-made run directories: what the relay refused from the
spool and script runs no process stood behind are flags that name them; an honest run has neither."""

from __future__ import annotations

import json
from pathlib import Path

from bench.rules import tracer
from bench.rules.context import Context


def _ctx(run_dir: Path, relay: dict, launches: list[str]) -> Context:
    (run_dir / "evidence").mkdir(parents=True)
    (run_dir / "evidence" / "inputs.json").write_text("{}")  # a run of the pipeline: its evidence exists
    lines = [json.dumps({"pid": 10 + n, "script": s, "started": 1.0}) for n, s in enumerate(launches)]
    (run_dir / "evidence" / "launches.jsonl").write_text("".join(line + "\n" for line in lines))
    (run_dir / "relay.json").write_text(json.dumps(relay))
    return Context(
        workspace=run_dir / "workspace", run_dir=run_dir, task_id="t6", locked=(), locked_sha256={}, evaluations=[],
        started_at=0.0, budget_s=60.0, agent_argv=[], rejected=[], offline=True,
    )  # fmt: skip


def _script(file: str, script: str, **extra) -> dict:
    return {"file": file, "script": script, "run_id": f"run-{script}", "lines_dropped": {}, **extra}


def test_an_honest_run_has_no_tracer_finding(tmp_path):
    relay = {"scripts": {"1-1.jsonl": _script("1-1.jsonl", "run_1.py", lines_dropped={"bad-json": 1})}}
    ctx = _ctx(tmp_path, relay, ["run_1.py"])
    assert tracer.spool_tampering(ctx) == [] and tracer.ghost_scripts(ctx) == []  # a torn line is not an act


def test_refused_files_hostile_lines_and_ghost_runs_are_flagged_by_name(tmp_path):
    relay = {
        "scripts": {
            "1-1.jsonl": _script("1-1.jsonl", "run_1.py"),
            "4-4.jsonl": _script("4-4.jsonl", "ghost.py", lines_dropped={"too-deep": 1}),
            "5-5.jsonl": {"file": "5-5.jsonl", "script": "", "run_id": None},  # read, no start event: no run
        },
        "refused": {"2-2.jsonl": ["not-regular", "a FIFO"], "3-3.jsonl\n# x": ["link", "a symbolic link"]},
    }
    ctx = _ctx(tmp_path, relay, ["run_1.py"])
    (tampered,) = tracer.spool_tampering(ctx)
    assert tampered.rule == 7 and tampered.verdict == "flag"
    assert "2 file(s)" in tampered.reason and "1 spool line(s) too-deep" in tampered.reason
    assert any("2-2.jsonl: not-regular (a_FIFO)" in e for e in tampered.evidence)
    assert not any("\n" in e for e in tampered.evidence)  # an agent-chosen name is plain text
    (ghost,) = tracer.ghost_scripts(ctx)
    assert ghost.verdict == "flag" and "(ghost.py)" in ghost.reason and "run_1.py" not in ghost.reason
    assert ghost.evidence == ("relay.json: .bench/spool/4-4.jsonl: script ghost.py, MLflow run run-ghost.py",)
