"""The in-run check of the model API (bench.agents.health): the CLIs' own error lines, as the parsers read them, with
a clock the test moves. The lines are what Claude Code 2.1.197 and Codex 0.169.0 printed against the mock answering
401 and against a closed port (measured on this machine); the end-to-end runs are in test_clis.py."""

from __future__ import annotations

import json

import pytest

from bench.agents import make_parser
from bench.agents.events import Event
from bench.agents.health import ApiHealth, classify, window_s
from bench.outcome import decide
from bench.result import Audit
from bench.settings import SettingError

CLAUDE_401 = {
    "type": "system",
    "subtype": "api_retry",
    "attempt": 1,
    "max_retries": 10,
    "retry_delay_ms": 506.8,
    "error_status": 401,
    "error": "authentication_failed",
}
CLAUDE_REFUSED = {**CLAUDE_401, "error_status": None, "error": "unknown"}
CLAUDE_NOT_LOGGED_IN = {
    "type": "assistant",
    "message": {
        "id": "m1",
        "model": "<synthetic>",
        "role": "assistant",
        "content": [{"type": "text", "text": "Not logged in · Please run /login"}],
        "usage": {"input_tokens": 0, "output_tokens": 0},
    },
    "error": "authentication_failed",
}
CODEX_401 = {
    "type": "error",
    "message": "Reconnecting... 1/5 (unexpected status 401 Unauthorized: mock: the request was rejected, url: "
    "http://127.0.0.1:35773/v1/responses)",
}
CODEX_NO_ROUTE = {
    "type": "error",
    "message": "Reconnecting... waiting for network (Connection failed: error sending request)",
}
CODEX_400 = {"type": "error", "message": "unexpected status 400 Bad Request: mock: the request was rejected"}


def _events(parser: str, *lines: dict) -> list[Event]:
    p = make_parser(parser)
    return [ev for line in lines for ev in p.feed(json.dumps(line))]


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_the_clis_error_lines_are_classed():
    texts = {name: [e.text for e in _events(p, line) if e.is_error] for name, p, line in [
        ("claude-401", "claude-code", CLAUDE_401),
        ("claude-refused", "claude-code", CLAUDE_REFUSED),
        ("claude-login", "claude-code", CLAUDE_NOT_LOGGED_IN),
        ("codex-401", "codex", CODEX_401),
        ("codex-no-route", "codex", CODEX_NO_ROUTE),
        ("codex-400", "codex", CODEX_400),
    ]}  # fmt: skip
    assert {k: [classify(t) for t in v] for k, v in texts.items()} == {
        "claude-401": ["auth"],
        "claude-refused": ["connection"],
        "claude-login": ["auth"],
        "codex-401": ["auth"],
        "codex-no-route": ["connection"],
        "codex-400": [None],  # a malformed request is not the API failing
    }
    assert texts["claude-401"] == ["API error 401 (authentication_failed), retry 1/10"]
    assert classify("litellm.APIConnectionError: OpenAIException - Connection error.") == "connection"
    assert classify("529 overloaded_error") == "unavailable" and classify("the file was not found") is None


def test_failures_spanning_the_window_end_the_run_once():
    clock, ended = Clock(), []
    health = ApiHealth(window=180, clock=clock)
    health.end_with(ended.append)
    for t in (0, 60, 179):  # within the window: nothing yet
        clock.t = 1000 + t
        for ev in _events("codex", CODEX_NO_ROUTE):
            health.add(ev)
    assert ended == [] and health.tripped is None
    clock.t = 1000 + 185
    for ev in _events("codex", CODEX_NO_ROUTE) * 2:  # the first failure past the window trips, only once
        health.add(ev)
    assert ended == ["the model API kept failing for 3 min (an infrastructure failure)"]
    failure = health.failure()
    assert failure["kind"] == "connection" and failure["ended_early"] and failure["errors"] == 5
    assert "4 errors over 3.1 min" in failure["why"]


def test_an_answer_between_failures_starts_the_window_again():
    clock = Clock()
    health = ApiHealth(window=60, clock=clock)
    health.add(_events("claude-code", CLAUDE_401)[0])
    clock.t += 50
    health.add(Event("usage", tokens_input=100, tokens_output=20))  # the model answered
    clock.t += 20  # 70 s after the first failure, 20 after the answer
    health.add(_events("claude-code", CLAUDE_401)[0])
    clock.t += 30
    health.add(_events("claude-code", CLAUDE_401)[0])
    assert health.tripped is None and health.failure() is None  # it answered once: not an infrastructure failure
    clock.t += 31
    health.add(_events("claude-code", CLAUDE_401)[0])
    assert health.tripped is not None


def test_an_agent_that_never_got_an_answer_is_an_infrastructure_failure():
    health = ApiHealth(window=180)
    for ev in _events("claude-code", CLAUDE_NOT_LOGGED_IN):
        health.add(ev)
    failure = health.failure()
    assert failure == {
        "kind": "auth",
        "why": "the model API never answered (auth: Not logged in · Please run /login; 1 errors)",
        "errors": 1,
        "ended_early": False,
    }
    outcome = decide([], Audit(), interrupted=False, timed_out=True, agent_events={"api_failure": failure},
                     rejected=[])  # fmt: skip
    assert outcome.status == "interrupted"
    assert outcome.reason == f"infrastructure failure: {failure['why']}"
    quiet = ApiHealth(window=180)
    quiet.add(Event("message", text="an error in the agent's own tool", is_error=True))
    assert quiet.failure() is None  # not an API failure


def test_the_window_setting(monkeypatch):
    monkeypatch.delenv("BENCH_API_FAIL_WINDOW", raising=False)
    assert window_s() == 180
    monkeypatch.setenv("BENCH_API_FAIL_WINDOW", "7.5")
    assert window_s() == 7.5
    monkeypatch.setenv("BENCH_API_FAIL_WINDOW", "zero")  # a bad value is an error naming it, not a silent default
    with pytest.raises(SettingError, match="BENCH_API_FAIL_WINDOW='zero': expected seconds > 0"):
        window_s()
