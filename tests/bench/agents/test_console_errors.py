"""What a person watching a Claude Code run sees of an API error: the message once. Claude Code prints it as an
assistant message and again as its error result (the real lines, tests/bench/fixtures/agent-streams/
claude_api_error.jsonl, of a run capped by --max-cost); both stay in events.jsonl and agent.log."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench.agents.test_codex_console import watch

FIXTURE = Path(__file__).parents[1] / "fixtures" / "agent-streams" / "claude_api_error.jsonl"


def test_an_api_error_reaches_the_console_once_and_the_events_twice(tmp_path, capsys):
    lines = FIXTURE.read_text().splitlines()
    said = json.loads(lines[1])["result"]
    assert said.startswith("API Error: 402") and said in lines[0]  # the same text, twice in the stream
    watch(tmp_path, lines, "claude-code")
    shown = capsys.readouterr().out
    assert shown.count("API Error: 402") == 1, shown
    events = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert sum(said in (e.get("text") or "") for e in events) >= 2  # nothing is lost from the record
