"""relay.json, the relay's progress: one format (version 1, in the run directory), older ones refused in one line.

Before 0.1's format reset the relay kept its progress beside the spool (``<workspace>/.bench/relay.json``) and
without a version; relaying such a run's spool again from the start would log every value twice, so a relay that
finds one refuses, naming what wrote it and what to do, and touches nothing.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from bench.errors import BenchError
from bench.tracking import schema
from bench.tracking.relay import Relay
from bench.tracking.relay_state import VERSION, RelayStateError
from bench.tracking.writer import MlflowWriter

REDO = "finish the run with the toolkit version that wrote it, or run it again with this one"
START = {"ev": "start", "t": 1_700_000_000.0, "script": "run_1.py", "pid": 7, "argv": ["run_1.py"], "source": ""}


@pytest.fixture
def spool(tmp_path: Path) -> Path:
    spool = tmp_path / "ws" / ".bench" / "spool"
    spool.mkdir(parents=True)
    return spool


def _writer() -> tuple[MlflowWriter, str]:
    writer = MlflowWriter(f"test-relay-state-{uuid.uuid4().hex[:8]}")
    return writer, writer.create_run("agent", {schema.KIND: schema.KIND_AGENT})


def test_the_state_round_trips_at_its_one_version(spool: Path, tmp_path: Path) -> None:
    writer, parent = _writer()
    state = tmp_path / "run" / "relay.json"
    state.parent.mkdir()
    (spool / "1-7.jsonl").write_text(json.dumps(START) + "\n")
    relay = Relay(writer, parent, spool, {}, state_file=state)
    relay.poll()
    saved = json.loads(state.read_text())
    assert saved["version"] == VERSION == 1 and saved["parent_run"] == parent
    assert saved["scripts"]["1-7.jsonl"]["script"] == "run_1.py"
    again = Relay(writer, parent, spool, {}, state_file=state)  # as `bench record` reads it back
    assert again.scripts == relay.scripts and again.scripts["1-7.jsonl"].run_id


@pytest.mark.parametrize(
    ("version", "said"),
    [(None, "has no version: written before 0.1's format reset"), (0, "has version 0: written by an older toolkit")],
)
def test_a_state_of_another_format_is_refused_in_one_line(spool: Path, tmp_path: Path, version, said) -> None:
    writer, parent = _writer()
    state = tmp_path / "relay.json"
    old = {"parent_run": parent, "scripts": {}, **({} if version is None else {"version": version})}
    state.write_text(json.dumps(old))
    with pytest.raises(RelayStateError) as e:
        Relay(writer, parent, spool, {}, state_file=state)
    assert str(e.value) == f"{state} {said}; {REDO}" and isinstance(e.value, BenchError)
    assert json.loads(state.read_text()) == old  # left as it was


def test_a_state_kept_beside_the_spool_is_refused_and_nothing_is_written(spool: Path, tmp_path: Path) -> None:
    """The legacy place: ``<workspace>/.bench/relay.json`` with no state in the run directory."""
    writer, parent = _writer()
    legacy = spool.parent / "relay.json"
    legacy.write_text(json.dumps({"parent_run": parent, "scripts": {}}))
    state = tmp_path / "run" / "relay.json"
    state.parent.mkdir()
    with pytest.raises(RelayStateError) as e:
        Relay(writer, parent, spool, {}, state_file=state)
    message = str(e.value)
    assert message.startswith(f"{legacy}: the relay's progress kept beside the spool, written before 0.1's format")
    assert message.endswith(REDO) and "\n" not in message
    assert not state.exists()  # no fresh state that would relay the spool again from its start


def test_bench_record_refuses_an_older_relay_before_it_opens_a_run(spool: Path, tmp_path: Path) -> None:
    """A run never recorded (no MLflow id) whose relay kept its progress beside the spool: ``record`` refuses it
    before it creates the agent run, so the store gets no empty run."""
    from types import SimpleNamespace

    from bench.pipeline import record
    from bench.result import RunResult

    (spool.parent / "relay.json").write_text(json.dumps({"parent_run": "x", "scripts": {}}))
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "results" / "v3_t6_baseline.json"
    result = RunResult.load(fixture)
    result.mlflow_run_id = None
    opened: list[str] = []
    writer = SimpleNamespace(create_run=lambda name, *a, **k: opened.append(name) or "run-id")  # a spy of the store
    ws = SimpleNamespace(spool_dir=spool, relay_state=tmp_path / "run" / "relay.json")
    with pytest.raises(RelayStateError, match="kept beside the spool"):
        record.record(writer, result, ws, staged=object())
    assert opened == []  # refused before the agent run was created
