"""What a person watching a Codex run sees: the status line's tokens and cost while Codex's stream reports none (it
says its usage only at the end of its turn) come from the metering gateway, and Codex's own stdin note and tracing
ERROR lines stay in agent.log, off the console. The stream is the real Codex 0.169.0 one (tests/bench/fixtures/
agent-streams); the plain lines are those real Codex runs printed into agent.log (the mock-model runs of
tests/bench/agents/test_clis.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.agents.stream import AgentStream
from bench.progress import StatusLine
from tests.bench.agents.test_events import STREAMS
from tests.bench.gateway.test_proxy import certs, gateway, lines, mock, post, serve  # noqa: F401

STDIN = "Reading additional input from stdin..."
TRACING = (
    "2026-11-26T23:14:45.338151Z ERROR codex_core::session: failed to record rollout items: thread "
    "01a21a23-5cd6-7f92-84c5-288a80d608b7 not found"
)
KEPT = "WARNING: proceeding, even though we could not create PATH aliases: Refusing to create helper binaries"


def _printed(tmp_path: Path, lines_: list[str]) -> subprocess.Popen:
    """A process that prints ``lines_`` as a CLI does, one by one."""
    src = tmp_path / "out.txt"
    src.write_text("".join(line if line.endswith("\n") else line + "\n" for line in lines_))
    code = "import sys\nfor line in open(sys.argv[1], 'rb'):\n    sys.stdout.buffer.write(line); sys.stdout.flush()"
    return subprocess.Popen([sys.executable, "-c", code, str(src)], stdout=subprocess.PIPE)


def watch(tmp_path: Path, lines_: list[str], parser: str) -> None:
    """A CLI that prints ``lines_``, streamed to the console as a run shows it (read it with capsys)."""
    proc = _printed(tmp_path, lines_)
    status = StatusLine("test", enabled=False)
    agent = AgentStream(proc, tmp_path / "agent.log", tmp_path / "events.jsonl", status, True, parser).start()
    proc.wait(timeout=60)
    agent.join(timeout=60)


def _codex_stream() -> list[str]:
    path = STREAMS / "codex_stream.jsonl"
    if not path.is_file():
        pytest.fail(f"{path} is missing: the recorded streams are part of the repository (PROVENANCE.md there)")
    return path.read_text().splitlines()


def test_codexs_stdin_note_and_tracing_lines_stay_in_the_log(tmp_path, capsys):
    events = _codex_stream()
    printed = [STDIN, KEPT, *events[:4], TRACING, *events[4:]]
    watch(tmp_path, printed, "codex")
    shown = capsys.readouterr().out
    assert STDIN not in shown and "codex_core::session" not in shown, shown
    assert KEPT in shown  # a warning says something: it reaches the console
    assert "Done. I created run_1.py" in shown and "> shell: python run_1.py" in shown  # the events, as before
    assert (tmp_path / "agent.log").read_text().splitlines() == printed  # the log keeps every line unchanged


def test_the_status_line_shows_the_gateways_tokens_while_codex_reports_none(mock, certs, tmp_path):  # noqa: F811
    events = _codex_stream()
    proc = _printed(tmp_path, events[:-1])  # every event but turn.completed: Codex has said no usage yet
    gw = gateway(mock, certs, tmp_path)
    status = StatusLine("test", enabled=False)
    agent = AgentStream(proc, tmp_path / "agent.log", tmp_path / "events.jsonl", status, False, "codex", "gpt-5.5",
                        gateway=gw).start()  # fmt: skip
    proc.wait(timeout=60)
    agent._thread.join(timeout=60)  # not join(): it would add the final event of a finished stream
    assert agent.tally.status_fields()["tokens"] == "0" and agent.tally.status_fields()["cost"] == "-"
    assert agent.status_fields() == agent.tally.status_fields()  # the gateway has metered nothing yet: the CLI's

    server, sock = serve(gw, tmp_path)
    try:
        status_code, _, _ = post(sock, "/v1/responses", {"model": "gpt-5.5", "input": "x", "stream": True})
    finally:
        server.close()
    assert status_code == 200
    (rec,) = lines(tmp_path, 1)
    tin, tout = mock.usages[0]  # what the mock served
    assert (rec["input"], rec["output"]) == (tin, tout)
    n, cost = tin + tout, (tin * 5.00 + tout * 30.00) / 1e6  # gpt-5.5: $5 / $30 per 1M tokens (LiteLLM's map)
    tokens = f"{n}" if n < 1000 else f"{n / 1000:.1f}k"
    assert agent.status_fields() == {"tools": "2", "tokens": tokens, "cost": f"${cost:.2f}"}
    assert status.fields["tokens"] == "0"  # what the stream set; the runner's tick sets agent.status_fields()
