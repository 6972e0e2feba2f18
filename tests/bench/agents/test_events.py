"""bench.agents.events and bench.agents.pricing against real event streams of the five agent CLIs.

The streams are in ``tests/bench/fixtures/agent-streams`` (recorded from the real CLIs; its PROVENANCE.md says
how): one short task each, write
``run_1.py`` with ``print('hello')``, run ``python run_1.py``, answer in text.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.agents import PARSERS, make_parser, pricing
from bench.agents.aider import AiderParser
from bench.agents.claude_code import ClaudeCodeParser
from bench.agents.codex import CodexParser
from bench.agents.events import METRICS, REFUSAL_PATTERNS, Event, Tally
from bench.agents.gemini import GeminiParser
from bench.agents.generic import GenericParser
from bench.agents.opencode import OpenCodeParser
from bench.agents.parsing import unwrap_shell

ROOT = Path(__file__).resolve().parents[3]
STREAMS = Path(__file__).parents[1] / "fixtures" / "agent-streams"  # recorded from the real CLIs (PROVENANCE.md)
WS = "/home/user/ws"
ANSWER = "Done. I created run_1.py and ran it; it printed hello."


def usd(dollars: float):
    """A cost worked out by hand from the rows of bench/agents/pricing.py (USD per 1M tokens, hence the e-6),
    compared to the micro-dollar: pricing.cost rounds to 6 decimals."""
    return pytest.approx(dollars, abs=1e-6)


def run(parser, lines) -> tuple[list[Event], Tally]:
    """Feed lines one by one as the runner does (with their newline), then finish; tally everything."""
    events = [ev for line in lines for ev in parser.feed(line)] + parser.finish()
    tally = Tally()
    for ev in events:
        tally.add(ev)
    return events, tally


def stream(name: str, parser) -> tuple[list[Event], Tally]:
    path = STREAMS / name
    if not path.is_file():
        pytest.fail(f"{path} is missing: the recorded streams are part of the repository (PROVENANCE.md there)")
    with open(path, encoding="utf-8") as f:
        return run(parser, list(f))


def calls(events: list[Event], kind: str = "tool_call") -> list[tuple[str | None, str | None]]:
    return [(ev.tool, ev.target) for ev in events if ev.kind == kind]


def assert_clean(events: list[Event], tally: Tally) -> None:
    assert tally.error is None
    assert not tally.refused()
    assert not any(ev.is_error for ev in events)
    assert all(ev.kind in ("tool_call", "tool_result", "message", "usage", "final") for ev in events)
    assert [ev.kind for ev in events].count("final") == 1 and tally.final is not None
    json.dumps([ev.to_dict() for ev in events])  # JSON-safe without raw


# --- the five CLIs, stream by stream -------------------------------------------------------------------


def test_claude_code_stream():
    events, tally = stream("claude_stream.jsonl", ClaudeCodeParser())
    assert calls(events) == [("write", f"{WS}/run_1.py"), ("shell", "python run_1.py")]
    assert calls(events, "tool_result") == calls(events)
    assert [ev.text for ev in events if ev.kind == "tool_result"][1] == "hello"
    assert [ev.text for ev in events if ev.kind == "message"] == [ANSWER]
    assert tally.final.text == ANSWER and not tally.final.is_error
    # totals from the final result event, not the assistant events' provisional output_tokens (1 each)
    assert sum(ev.tokens_output for ev in events if ev.kind == "usage") == 3
    assert (tally.tokens_input, tally.tokens_output, tally.tokens_cached) == (3900, 75, 0)
    assert tally.cost_usd == pytest.approx(0.012825)  # reported total_cost_usd
    assert tally.metrics() == {
        "tool_calls": 2,
        "shell_commands": 1,
        "file_writes": 1,
        "file_reads": 0,
        "tokens_input": 3900,
        "tokens_output": 75,
        "tokens_cached": 0,
        "cost_usd": pytest.approx(0.012825),
    }
    assert tally.status_fields() == {"tools": "2", "tokens": "4.0k", "cost": "$0.01"}
    assert_clean(events, tally)


def test_codex_stream_cost_is_computed_from_tokens():
    events, tally = stream("codex_stream.jsonl", CodexParser(model="gpt-5.5"))
    # the command arrives wrapped as "/bin/bash -c 'python run_1.py'"
    assert calls(events) == [("write", f"{WS}/run_1.py"), ("shell", "python run_1.py")]
    assert calls(events, "tool_result") == calls(events)
    assert [ev.text for ev in events if ev.kind == "tool_result"][1] == "hello\n"
    assert tally.final.text == ANSWER and tally.messages == [ANSWER]
    assert (tally.tokens_input, tally.tokens_output, tally.tokens_cached) == (3900, 75, 0)
    # gpt-5.5 row (LiteLLM's map): $5.00 input, $30.00 output per 1M tokens
    assert tally.cost_usd == usd(3900 * 5.00e-6 + 75 * 30.00e-6)  # 0.02175
    assert_clean(events, tally)
    # no model given (the stream names none): no cost rather than a wrong one
    _, tally = stream("codex_stream.jsonl", CodexParser())
    assert tally.cost_usd is None and tally.metrics()["cost_usd"] is None and tally.status_fields()["cost"] == "-"


@pytest.mark.parametrize(
    "name, write_target, cost",
    [
        ("opencode_stream_anthropic.jsonl", f"{WS}/run_1.py", 0.003975 + 0.004275 + 0.004575),
        ("opencode_stream_openai_responses.jsonl", f"{WS}/run_1.py", 0.00675 + 0.00725 + 0.00775),  # apply_patch
        ("opencode_stream_chat.jsonl", f"{WS}/run_1.py", None),  # custom provider: cost 0 = no price known
    ],
)
def test_opencode_streams(name, write_target, cost):
    events, tally = stream(name, OpenCodeParser())
    # a tool is printed once, when it has ended: call and result come together
    assert [(ev.kind, ev.tool, ev.target) for ev in events if ev.kind.startswith("tool")] == [
        ("tool_call", "write", write_target),
        ("tool_result", "write", write_target),
        ("tool_call", "shell", "python run_1.py"),
        ("tool_result", "shell", "python run_1.py"),
    ]
    assert tally.final.text == ANSWER and tally.messages == [ANSWER]
    # tokens and cost per step_finish, summed
    assert [ev.tokens_input for ev in events if ev.kind == "usage"] == [1200, 1300, 1400]
    assert (tally.tokens_input, tally.tokens_output, tally.tokens_cached) == (3900, 75, 0)
    assert tally.cost_usd == (pytest.approx(cost) if cost is not None else None)
    assert_clean(events, tally)


def test_opencode_zero_cost_is_computed_when_the_model_is_known():
    _, tally = stream("opencode_stream_chat.jsonl", OpenCodeParser(model="openrouter/moonshotai/kimi-k2.6"))
    assert tally.cost_usd == usd(3900 * 0.95e-6 + 75 * 4.00e-6)  # kimi-k2.6 row: $0.95 in, $4.00 out; 0.004005


def test_gemini_stream_cost_from_the_init_model():
    events, tally = stream("gemini_stream.jsonl", GeminiParser())
    assert calls(events) == [("write", f"{WS}/run_1.py"), ("shell", "python run_1.py")]
    assert calls(events, "tool_result") == calls(events)
    assert [ev.text for ev in events if ev.kind == "message"] == [ANSWER]  # the user's prompt is not a message
    assert tally.final.text == ANSWER
    assert (tally.tokens_input, tally.tokens_output, tally.tokens_cached) == (3900, 75, 0)
    # stats name the server's model "mock" (unknown): priced as the init event's gemini-2.5-pro
    assert tally.cost_usd == usd(3900 * 1.25e-6 + 75 * 10.00e-6)  # gemini-2.5-pro row: $1.25 in, $10 out; 0.005625
    assert_clean(events, tally)


def test_gemini_joins_assistant_deltas_into_one_message():
    lines = [
        '{"type":"message","role":"assistant","content":"Hel","delta":true}',
        '{"type":"message","role":"assistant","content":"lo.","delta":true}',
        '{"type":"tool_use","tool_name":"read_file","tool_id":"r1","parameters":{"absolute_path":"/ws/train.py"}}',
    ]
    events, tally = run(GeminiParser(), lines)
    assert [(ev.kind, ev.text or ev.target) for ev in events] == [
        ("message", "Hello."),
        ("tool_call", "/ws/train.py"),
        ("final", "Hello."),
    ]
    assert tally.file_reads == 1


def test_aider_stdout():
    events, tally = stream("aider_stdout.txt", AiderParser())
    assert calls(events) == [("write", "run_1.py"), ("shell", "python run_1.py")]
    assert [(ev.tool, ev.text) for ev in events if ev.kind == "tool_result"][1] == ("shell", "hello")
    messages = [ev.text for ev in events if ev.kind == "message"]
    assert len(messages) == 1 and messages[0].startswith("I'll create the file.")
    assert "print('hello')" in messages[0] and "HTTPSConnectionPool" not in messages[0]
    assert tally.final.text == messages[0]
    assert (tally.tokens_input, tally.tokens_output, tally.tokens_cached) == (1200, 25, 0)
    assert tally.cost_usd is None  # "openai/mock-model": Aider printed no cost and the model has no price
    assert_clean(events, tally)


def test_aider_cost_cache_edits_and_failures():
    lines = [
        "Aider v0.86.2",
        "Main model: anthropic/claude-sonnet-4-5 with diff edit format, infinite output",
        "I will edit train.py.",
        "Tokens: 12k sent, 1.1k cache write, 2.5k cache hit, 310 received. Cost: $0.05 message, $0.12 session.",
        "Applied edit to train.py",
        "Tokens: 950 sent, 20 received.",
        "# 1 SEARCH/REPLACE block failed to match!",
    ]
    events, tally = run(AiderParser(), lines)
    usage = [ev for ev in events if ev.kind == "usage"]
    assert (usage[0].tokens_input, usage[0].tokens_cached, usage[0].tokens_output) == (15600, 2500, 310)
    assert usage[0].cost_usd == 0.05
    # no cost printed: claude-sonnet-4-5 row, $3.00 input, $15.00 output per 1M tokens
    assert usage[1].cost_usd == usd(950 * 3.00e-6 + 20 * 15.00e-6)  # 0.00315
    assert calls(events) == [("edit", "train.py")]
    assert [ev.is_error for ev in events if ev.kind == "tool_result"] == [False, True]
    assert tally.messages == ["I will edit train.py."] and tally.error is None  # a failed edit is not an API error


def test_gemini_prices_each_routed_model():
    stats = {
        "input_tokens": 11000,
        "output_tokens": 600,
        "cached": 1000,
        "models": {
            "gemini-2.5-pro": {"input_tokens": 10000, "output_tokens": 500, "cached": 1000},
            "gemini-2.5-flash-lite": {"input_tokens": 1000, "output_tokens": 100, "cached": 0},
        },
    }
    _, tally = run(GeminiParser(), [json.dumps({"type": "result", "status": "success", "stats": stats})])
    # gemini-2.5-pro row ($1.25 input, $0.125 cached input, $10 output per 1M): 9000 uncached + 1000 cached in, 500 out;
    # gemini-2.5-flash-lite row ($0.10 input, $0.40 output): 1000 in, 100 out
    pro = 9000 * 1.25e-6 + 1000 * 0.125e-6 + 500 * 10.00e-6  # 0.016375
    lite = 1000 * 0.10e-6 + 100 * 0.40e-6  # 0.00014
    assert tally.cost_usd == usd(pro + lite)  # 0.016515
    assert (tally.tokens_input, tally.tokens_output, tally.tokens_cached) == (11000, 600, 1000)


def test_aider_without_banner_and_with_echoed_answers():
    lines = [
        "Writing the script.",
        "Tokens: 500 sent, 10 received.",
        "run_2.py",
        "Create new file? (Y)es/(N)o [Yes]: y",
        "Applied edit to run_2.py",
        "Run shell command? (Y)es/(N)o/(D)on't ask again [Yes]: y",
        "Running python run_2.py",
        "step 1 loss 2.3",
    ]
    events, tally = run(AiderParser(model="gpt-5.5"), lines)
    assert calls(events) == [("write", "run_2.py"), ("shell", "python run_2.py")]
    assert [ev.text for ev in events if ev.kind == "tool_result"] == ["Applied edit to run_2.py", "step 1 loss 2.3"]
    assert tally.messages == ["Writing the script."]
    assert tally.cost_usd == usd(500 * 5.00e-6 + 10 * 30.00e-6)  # gpt-5.5 row: $5 in, $30 out; 0.0028


def test_opencode_failed_tool_and_codex_items_seen_only_completed():
    failed = {"type": "tool", "tool": "edit", "state": {"status": "error", "input": {"filePath": "/ws/train.py"}}}
    failed["state"]["error"] = "oldString not found"
    events, tally = run(OpenCodeParser(), [json.dumps({"type": "tool_use", "part": failed})])
    assert [(ev.kind, ev.tool, ev.target, ev.is_error) for ev in events[:2]] == [
        ("tool_call", "edit", "/ws/train.py", False),
        ("tool_result", "edit", "/ws/train.py", True),
    ]
    assert events[1].text == "oldString not found" and tally.error is None
    item = {"id": "i9", "type": "command_execution", "command": "ls", "exit_code": 0, "status": "completed"}
    events, _ = run(CodexParser(), [json.dumps({"type": "item.completed", "item": item})])
    assert [(ev.kind, ev.target) for ev in events] == [("tool_call", "ls"), ("tool_result", "ls"), ("final", None)]


def test_make_parser_and_line_endings(tmp_path):
    assert isinstance(make_parser("codex", model="gpt-5.5"), CodexParser) and make_parser("codex", "gpt-5.5").model
    assert make_parser("generic", mapping=MAPPING).mapping["type"] == "ev"
    (tmp_path / "m.json").write_text(json.dumps(MAPPING))
    assert make_parser("generic", mapping=tmp_path / "m.json").mapping["tools"] == MAPPING["tools"]
    line = '{"type":"item.completed","item":{"id":"a","type":"agent_message","text":"hi"}}'
    for ending in ("", "\n", "\r\n"):
        assert [ev.text for ev in CodexParser().feed(line + ending)] == ["hi"]


def test_runner_stream_reads_a_cli_live(tmp_path):
    """bench.agents.stream.AgentStream, as the runner drives it: a process prints a stream, the parser tallies it."""
    import subprocess
    import sys

    from bench.agents.stream import AgentStream
    from bench.progress import StatusLine

    src = STREAMS / "claude_stream.jsonl"
    code = (
        "import sys, time\nfor line in open(sys.argv[1], 'rb'):\n    sys.stdout.buffer.write(line); sys.stdout.flush()"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(src)], stdout=subprocess.PIPE)
    status = StatusLine("test", enabled=False)
    agent = AgentStream(proc, tmp_path / "agent.log", tmp_path / "events.jsonl", status, False, "claude-code").start()
    proc.wait(timeout=60)
    agent.join(timeout=60)
    summary = agent.summary()
    assert summary["metrics"]["file_writes"] == 1 and summary["metrics"]["tokens_output"] == 75
    assert summary["final"] == ANSWER and summary["error"] is None and summary["refused"] is False
    assert (tmp_path / "agent.log").read_bytes() == src.read_bytes()
    kinds = [json.loads(line)["kind"] for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert kinds.count("tool_call") == 2 and kinds[-1] == "final"


# --- errors, refusals, robustness ------------------------------------------------------------------------

API_ERRORS = {
    "claude-code": (
        [
            '{"type":"assistant","message":{"id":"m1","model":"<synthetic>","content":[{"type":"text",'
            '"text":"API Error: 401 invalid x-api-key"}]},"error":"authentication_failed"}',
            '{"type":"result","subtype":"success","is_error":true,"result":"API Error: 401 invalid x-api-key",'
            '"total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0}}',
        ],
        "API Error: 401 invalid x-api-key",
    ),
    "codex": (
        [
            '{"type":"error","message":"Reconnecting... 1/5 (connection refused)"}',
            '{"type":"turn.failed","error":{"message":"stream disconnected before completion"}}',
        ],
        "stream disconnected before completion",
    ),
    "opencode": (
        ['{"type":"error","sessionID":"s","error":{"name":"APIError","data":{"message":"Unauthorized"}}}'],
        "Unauthorized",
    ),
    "gemini": (
        [
            '{"type":"error","severity":"error","message":"[API Error: 500 Internal]"}',
            '{"type":"result","status":"error","error":{"type":"FatalAPIError","message":"API Error: 500"},'
            '"stats":{"input_tokens":0,"output_tokens":0}}',
        ],
        "API Error: 500",
    ),
    "aider": (
        ["Aider v0.86.2", "litellm.AuthenticationError: AuthenticationError: OpenAIException - bad key"],
        "litellm.AuthenticationError: AuthenticationError: OpenAIException - bad key",
    ),
    "generic": (['{"type":"result","error":{"message":"boom"}}'], "boom"),
}


@pytest.mark.parametrize("cli", sorted(API_ERRORS))
def test_api_error_sets_tally_error(cli):
    lines, expected = API_ERRORS[cli]
    events, tally = run(PARSERS[cli](), lines)
    assert tally.error == expected
    assert any(ev.is_error for ev in events)
    assert not tally.refused()


def test_claude_error_with_success_subtype_is_an_error():
    _, tally = run(ClaudeCodeParser(), API_ERRORS["claude-code"][0][1:])
    assert tally.final.is_error and tally.final.text.startswith("API Error")


def test_gemini_warning_is_not_an_error():
    _, tally = run(GeminiParser(), ['{"type":"error","severity":"warning","message":"Loop detected"}'])
    assert tally.error is None


REFUSALS = [
    "I should not modify code I did not write.",
    "This looks like third-party material that may be malicious, so I will stop here.",
    "I will run a security review before touching these files.",
    "I can't help modify these files: they appear to contain malware.",
    "These scripts look untrusted; I won't modify them.",
    "I must decline to edit this third-party code.",
    "I won't modify train.py or run_1.py since they may be malicious.",
]
NOT_REFUSALS = [
    "I will not modify prepare.py: it is locked by the benchmark.",
    "Training finished: val bpb 2.13. Next I try a wider model.",
    "The system reminder about malware does not apply: these are my workspace files, so I edit train.py.",
    "I won't touch prepare.py. Third-party pretrained weights are not allowed either, so I train from scratch.",
    "I will not use torch.compile. The malicious-looking warning above is from pip and harmless.",
]


@pytest.mark.parametrize("text", REFUSALS)
def test_refusal_until_a_file_is_written(text):
    line = json.dumps({"type": "assistant", "message": {"id": "m", "content": [{"type": "text", "text": text}]}})
    parser = ClaudeCodeParser()
    events, tally = run(parser, [line])
    assert tally.refused(), text
    tally.add(Event("tool_call", "write", "/ws/run_1.py"))
    assert not tally.refused()


@pytest.mark.parametrize("text", NOT_REFUSALS)
def test_ordinary_texts_are_not_refusals(text):
    tally = Tally()
    tally.add(Event("message", text=text))
    assert not tally.refused(), text


def test_refusal_patterns_are_documented_regexes():
    assert len(REFUSAL_PATTERNS) >= 3 and all(isinstance(p, str) for p in REFUSAL_PATTERNS)


MALFORMED = [
    "",
    "\n",
    "not json at all",
    "{",
    '{"type": "assistant", "message": ',
    "[1, 2]",
    "null",
    '"a string"',
    '{"type": "assistant", "message": null}',
    '{"type": "assistant", "message": {"content": [null, 3, {"type": "tool_use", "input": 5}]}}',
    '{"type": "user", "message": {"content": [{"type": "tool_result", "content": {"x": 1}}]}}',
    '{"type": "result", "usage": "lots", "total_cost_usd": "?"}',
    '{"type": "item.completed", "item": null}',
    '{"type": "item.completed", "item": {"type": "file_change", "changes": [null]}}',
    '{"type": "turn.completed", "usage": {"input_tokens": "many"}}',
    '{"type": "tool_use", "part": {"state": "done"}}',
    '{"type": "step_finish", "part": {"tokens": [], "cost": "free"}}',
    '{"type": "tool_result", "tool_id": [], "error": 3}',
    '{"type": "result", "stats": {"models": []}}',
    "Tokens: 1.2.3k sent, x received.",
    "Running ",
    "Applied edit to ",
    "Create new file? (Y)es/(N)o [Yes]: ",
    "\x00\xff garbage \ufffd",
]


@pytest.mark.parametrize("cli", sorted(PARSERS))
def test_malformed_lines_do_not_raise(cli):
    parser = PARSERS[cli]()  # the runner builds parsers without arguments
    for line in MALFORMED:
        assert isinstance(parser.feed(line), list)
    assert isinstance(parser.finish(), list)


def test_registry_and_event_dict():
    assert set(PARSERS) == {"claude-code", "codex", "opencode", "gemini", "aider", "generic"}
    ev = Event("tool_call", "shell", "ls", raw={"type": "x"})
    assert "raw" not in ev.to_dict() and ev.to_dict(raw=True)["raw"] == {"type": "x"}
    assert ev.t > 0 and ev.cost_usd is None and ev.tokens_input == 0
    assert (
        set(Tally().metrics())
        == {*METRICS, "cost_usd"}
        == {
            "tool_calls",
            "shell_commands",
            "file_writes",
            "file_reads",
            "tokens_input",
            "tokens_output",
            "tokens_cached",
            "cost_usd",
        }
    )


def test_claude_counts_each_api_call_once():
    """Claude Code prints one assistant event per content block, each with the same message usage."""
    usage = {"input_tokens": 100, "output_tokens": 5, "cache_read_input_tokens": 900}
    blocks = [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/ws/train.py"}},
    ]
    lines = [json.dumps({"type": "assistant", "message": {"id": "m1", "content": [b], "usage": usage}}) for b in blocks]
    events, tally = run(ClaudeCodeParser(model="claude-opus-4-7"), lines)
    assert [ev.kind for ev in events] == ["message", "usage", "tool_call", "final"]
    assert (tally.tokens_input, tally.tokens_cached, tally.file_reads) == (1000, 900, 1)
    # live estimate, claude-opus-4-7 row ($5.00 input, $0.50 cached input, $25.00 output per 1M tokens):
    # 100 uncached + 900 cached input tokens, 5 output tokens
    assert tally.cost_usd == usd(100 * 5.00e-6 + 900 * 0.50e-6 + 5 * 25.00e-6)  # 0.001075


def test_tool_classification():
    lines = [
        '{"type":"item.completed","item":{"id":"a","type":"command_execution","command":"bash -lc \'nvidia-smi\'",'
        '"exit_code":1,"status":"failed"}}',
        '{"type":"item.completed","item":{"id":"b","type":"file_change","status":"completed",'
        '"changes":[{"path":"/ws/train.py","kind":"update"},{"path":"/ws/run_2.py","kind":"add"}]}}',
        '{"type":"item.completed","item":{"id":"c","type":"mcp_tool_call","server":"fs","tool":"ls","status":"completed"}}',
    ]
    events, tally = run(CodexParser(), lines)
    assert calls(events) == [
        ("shell", "nvidia-smi"),
        ("edit", "/ws/train.py"),
        ("write", "/ws/run_2.py"),
        ("other", "fs.ls"),
    ]
    assert [ev.is_error for ev in events if ev.kind == "tool_result"] == [True, False, False, False]
    assert (tally.tool_calls, tally.shell_commands, tally.file_writes) == (4, 1, 2)
    assert tally.error is None  # a failed command is not an agent error
    assert unwrap_shell(["/bin/bash", "-lc", "python run_1.py"]) == "python run_1.py"
    assert unwrap_shell("python -c 'print(1)'") == "python -c 'print(1)'"


# --- the generic parser ----------------------------------------------------------------------------------

MAPPING = {
    "type": "ev",
    "kinds": {"tool_call": "call", "tool_result": "ret", "message": "say", "usage": "tok", "final": "done"},
    "tool": "call.name",
    "command": "call.args.cmd",
    "path": "call.args.file|call.args.files.0",
    "text": "body.text",
    "tokens_input": "n.in",
    "tokens_output": "n.out",
    "tokens_cached": "n.hit",
    "cost": "n.usd",
    "error": "failure",
    "tools": {"sh": "shell", "put": "write"},
}
GENERIC_LINES = [
    '{"ev":"call","call":{"name":"put","args":{"file":"/ws/run_1.py"}}}',
    '{"ev":"ret","body":{"text":"ok"}}',
    '{"ev":"call","call":{"name":"sh","args":{"cmd":["bash","-c","python run_1.py"]}}}',
    '{"ev":"call","call":{"name":"cat_file","args":{"files":["/ws/a.py"]}}}',
    '{"ev":"tok","n":{"in":1000,"out":20,"hit":400}}',
    '{"ev":"say","body":{"text":"' + ANSWER + '"}}',
    '{"ev":"heartbeat"}',
    '{"ev":"done","n":{"in":3900,"out":75,"usd":0.5}}',
]


def test_generic_parser_with_a_mapping():
    events, tally = run(GenericParser(MAPPING), GENERIC_LINES)
    assert calls(events) == [("write", "/ws/run_1.py"), ("shell", "python run_1.py"), ("other", "cat_file")]
    assert calls(events, "tool_result") == [("write", "/ws/run_1.py")]
    assert tally.final.text == ANSWER and not tally.final.is_error
    assert (tally.tokens_input, tally.tokens_output, tally.cost_usd) == (3900, 75, 0.5)  # final carries totals
    assert tally.error is None


def test_generic_parser_from_toml_and_json(tmp_path):
    toml = tmp_path / "agent.toml"
    toml.write_text(
        '[agent]\ncommand = "mycli --json"\n\n[parser]\ntype = "ev"\ntool = "call.name"\ncommand = "call.args.cmd"\n'
        'path = "call.args.file"\ntext = "body.text"\n\n[parser.kinds]\ntool_call = ["call"]\nmessage = "say"\n'
        'final = "done"\n\n[parser.tools]\nsh = "shell"\nput = "write"\n'
    )
    js = tmp_path / "agent.json"
    js.write_text(json.dumps(MAPPING))
    for path in (toml, js):
        events, tally = run(GenericParser.from_file(path, model="gpt-5"), GENERIC_LINES)
        assert calls(events)[:2] == [("write", "/ws/run_1.py"), ("shell", "python run_1.py")], path
        assert tally.final.text == ANSWER


def test_generic_defaults_read_common_shapes():
    lines = [
        '{"type":"tool_use","name":"Bash","input":{"command":"ls"}}',
        '{"type":"message","content":"hi"}',
        '{"type":"result","usage":{"input_tokens":10,"output_tokens":2},"cost_usd":0.001}',
    ]
    events, tally = run(PARSERS["generic"](), lines)
    assert calls(events) == [("shell", "ls")] and tally.messages == ["hi"]
    assert (tally.tokens_input, tally.tokens_output, tally.cost_usd) == (10, 2, 0.001)


# --- pricing ---------------------------------------------------------------------------------------------

PAPER_MODELS = ["claude-sonnet-4-6", "claude-opus-4-6", "claude-opus-4-7", "gpt-5.5", "kimi-k2.5", "kimi-k2.6"]


@pytest.mark.parametrize(
    "spelling, canonical",
    [
        ("anthropic/claude-opus-4-7", "claude-opus-4-7"),
        ("openrouter/moonshotai/kimi-k2.6", "kimi-k2.6"),
        ("openrouter/moonshotai/kimi-k2.5:free", "kimi-k2.5"),
        ("qwen/qwen3.6-plus", "qwen3.6-plus"),
        ("dashscope/qwen3.6-plus", "qwen3.6-plus"),
        ("openai/gpt-5.5", "gpt-5.5"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("us.anthropic.claude-opus-4-5-20251101-v1:0", "claude-opus-4-5"),
        ("claude-opus-4-7[1m]", "claude-opus-4-7"),
        ("models/gemini-2.5-pro", "gemini-2.5-pro"),
        ("opus", "claude-opus-4-7"),
    ],
)
def test_price_lookup_spellings(spelling, canonical):
    assert pricing.lookup(spelling)[0] == canonical


def test_price_table():
    for model in [*PAPER_MODELS, "qwen3.6-plus"]:
        assert model in pricing.PRICES
    for key, p in pricing.PRICES.items():
        assert p.source.startswith("list price as of 20") and "https://" in p.source, key
        assert p.origin.startswith(f"LiteLLM {pricing.SOURCE['version']}") or p.origin == "kept by hand", key
        assert 0 <= p.cached_input <= p.input and p.output > 0, key
    assert pricing.cost("gpt-5.3", 1, 1) is None  # no fuzzy match onto gpt-5
    assert pricing.cost("openai/mock-model", 1000, 10) is None and pricing.cost(None, 1, 1) is None
    # cached tokens are part of the input and billed at the cached price
    p = pricing.PRICES["claude-sonnet-4-5"]
    expected = (600 * p.input + 400 * p.cached_input + 50 * p.output) / 1e6
    assert pricing.cost("claude-sonnet-4-5", 1000, 50, 400) == pytest.approx(expected)
    assert pricing.cost("claude-sonnet-4-5", 3900, 75) == pytest.approx(0.012825)  # what Claude Code reported
