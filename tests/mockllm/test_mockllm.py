"""The mock LLM speaks each API the way the real services do: SSE framing, event order, tool calls, usage,
error bodies, and a refused connection once stopped. Fast: no CLI involved (see tests/bench/agents/test_clis.py)."""

from __future__ import annotations

import http.client
import json
import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
from tests.mockllm import MockLLM, answer, default_trajectory, read, shell, write  # noqa: E402
from tests.mockllm.trajectory import run1_from_train  # noqa: E402

CWD = "/work/ws"
TRAJ = [read("program.md"), write("run_1.py", "print('hi')\n"), shell("python run_1.py"), answer("All done.")]


def schema(*props: str, required: tuple[str, ...] = ()) -> dict:
    return {"type": "object", "properties": {p: {"type": "string"} for p in props}, "required": list(required)}


def post(llm: MockLLM, path: str, body: dict) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", llm.port, timeout=10)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()  # http.client undoes the chunked transfer encoding
    conn.close()
    return resp.status, dict(resp.getheaders()), data


def events(data: bytes) -> list[tuple[str | None, dict | str]]:
    """Parse an SSE body: (event name, JSON data or the raw string) per event; every event ends with a blank line."""
    text = data.decode()
    assert text.endswith("\n\n")
    out = []
    for block in text.strip("\n").split("\n\n"):
        name, payload = None, None
        for line in block.split("\n"):
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            elif field == "data":
                payload = value
        assert payload is not None, block
        out.append((name, payload if payload == "[DONE]" else json.loads(payload)))
    return out


@pytest.fixture
def llm():
    with MockLLM(TRAJ, model="m-1") as server:
        yield server


# --- Anthropic Messages -----------------------------------------------------------------------------------

CLAUDE_TOOLS = [
    {"name": "Read", "input_schema": schema("file_path", "offset", required=("file_path",))},
    {"name": "Write", "input_schema": schema("file_path", "content", required=("file_path", "content"))},
    {"name": "Bash", "input_schema": schema("command", "description", required=("command",))},
]


def claude_body(results: int, stream: bool = True) -> dict:
    msgs = [{"role": "user", "content": "go"}]
    for i in range(results):
        msgs += [
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "Read", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "ok"}]},
        ]
    system = [{"type": "text", "text": f"Here is useful information:\nPrimary working directory: {CWD}\n"}]
    return {"model": "m-1", "stream": stream, "system": system, "tools": CLAUDE_TOOLS, "messages": msgs}


def test_anthropic_stream_plays_the_trajectory(llm):
    status, headers, data = post(llm, "/v1/messages?beta=true", claude_body(0))
    assert status == 200 and headers["Content-Type"] == "text/event-stream"
    assert headers["Transfer-Encoding"] == "chunked"
    evs = events(data)
    names = [n for n, _ in evs]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert all(n == d["type"] for n, d in evs)
    start = next(d for n, d in evs if n == "content_block_start")["content_block"]
    assert start["type"] == "tool_use" and start["name"] == "Read" and start["input"] == {}
    args = "".join(d["delta"]["partial_json"] for n, d in evs if n == "content_block_delta")
    assert json.loads(args) == {"file_path": f"{CWD}/program.md"}  # absolute, from the system prompt
    delta = evs[-2][1]
    assert delta["delta"]["stop_reason"] == "tool_use" and delta["usage"]["output_tokens"] > 0
    assert evs[0][1]["message"]["usage"]["input_tokens"] > 0

    _, _, data = post(llm, "/v1/messages", claude_body(2))  # two tool results: the third step
    evs = events(data)
    start = next(d for n, d in evs if n == "content_block_start")["content_block"]
    assert start["name"] == "Bash"
    args = json.loads("".join(d["delta"]["partial_json"] for n, d in evs if n == "content_block_delta"))
    assert args["command"] == "python run_1.py"


def test_anthropic_final_answer_and_json_mode(llm):
    _, _, data = post(llm, "/v1/messages", claude_body(3))
    evs = events(data)
    text = "".join(d["delta"]["text"] for n, d in evs if n == "content_block_delta")
    assert text == "All done." and evs[-2][1]["delta"]["stop_reason"] == "end_turn"
    status, headers, data = post(llm, "/v1/messages", claude_body(1, stream=False))
    msg = json.loads(data)
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert msg["type"] == "message" and msg["stop_reason"] == "tool_use"
    assert msg["content"][0]["name"] == "Write"
    assert msg["content"][0]["input"] == {"file_path": f"{CWD}/run_1.py", "content": "print('hi')\n"}
    assert msg["usage"]["input_tokens"] > 0 and msg["usage"]["output_tokens"] > 0


def test_side_requests_get_text_and_do_not_move_the_trajectory(llm):
    _, _, data = post(llm, "/v1/messages", {"model": "haiku", "messages": [{"role": "user", "content": "title?"}]})
    assert json.loads(data)["content"][0]["type"] == "text"
    _, _, data = post(llm, "/v1/messages/count_tokens", claude_body(0))
    assert json.loads(data)["input_tokens"] > 0
    assert [r.step for r in llm.calls()] == [None, None]


# --- OpenAI Responses -------------------------------------------------------------------------------------

CODEX_TOOLS = [
    {
        "type": "function",
        "name": "exec_command",
        "parameters": {
            "type": "object",
            "properties": {
                "cmd": {"type": "string"},
                "login": {"type": "boolean"},
                "yield_time_ms": {"type": "number"},
            },
            "required": ["cmd"],
        },
    },
    {"type": "custom", "name": "apply_patch", "format": {"type": "grammar", "syntax": "lark", "definition": "..."}},
]


def codex_body(results: int) -> dict:
    inp = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"<cwd>{CWD}</cwd>"}]}]
    for i in range(results):
        inp += [
            {"type": "function_call", "call_id": f"c{i}", "name": "exec_command", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{i}", "output": "ok"},
        ]
    return {"model": "m-1", "stream": True, "tools": CODEX_TOOLS, "input": inp}


def test_responses_stream_events_and_tools(llm):
    _, _, data = post(llm, "/v1/responses", codex_body(0))
    evs = events(data)
    assert evs[0][0] == "response.created" and evs[-1][0] == "response.completed"
    assert [d["sequence_number"] for _, d in evs] == list(range(len(evs)))
    done = [d["item"] for n, d in evs if n == "response.output_item.done"]
    assert done[0]["type"] == "function_call" and done[0]["name"] == "exec_command"
    assert json.loads(done[0]["arguments"]) == {"cmd": "cat program.md", "login": False, "yield_time_ms": 30000}
    usage = evs[-1][1]["response"]["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"] > 0

    _, _, data = post(llm, "/v1/responses", codex_body(1))  # write: Codex's freeform apply_patch
    item = [d["item"] for n, d in events(data) if n == "response.output_item.done"][0]
    assert item["type"] == "custom_tool_call" and item["name"] == "apply_patch"
    assert item["input"] == "*** Begin Patch\n*** Add File: run_1.py\n+print('hi')\n*** End Patch\n"

    _, _, data = post(llm, "/v1/responses", codex_body(3))
    evs = events(data)
    assert "".join(d["delta"] for n, d in evs if n == "response.output_text.delta") == "All done."
    assert evs[-1][1]["response"]["output"][0]["content"][0]["text"] == "All done."


def test_write_falls_back_to_a_shell_heredoc_without_a_write_tool(llm):
    body = codex_body(1)
    body["tools"] = CODEX_TOOLS[:1]  # what Codex sends for a model it does not know: no apply_patch
    _, _, data = post(llm, "/v1/responses", body)
    item = [d["item"] for n, d in events(data) if n == "response.output_item.done"][0]
    cmd = json.loads(item["arguments"])["cmd"]
    assert cmd.startswith("cat > run_1.py <<'MOCK_EOF'\nprint('hi')\n")


# --- Chat Completions -------------------------------------------------------------------------------------

OPENCODE_TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": p}}
    for n, p in (
        ("read", schema("filePath", required=("filePath",))),
        ("write", schema("content", "filePath", required=("content", "filePath"))),
        ("bash", schema("command", "description", required=("command", "description"))),
    )
]


def chat_body(results: int, stream: bool = True) -> dict:
    msgs = [
        {"role": "system", "content": f"You are opencode.\nWorking directory: {CWD}\n"},
        {"role": "user", "content": "go"},
    ]
    msgs += [{"role": "tool", "tool_call_id": f"c{i}", "content": "ok"} for i in range(results)]
    return {
        "model": "m-1",
        "stream": stream,
        "stream_options": {"include_usage": True},
        "tools": OPENCODE_TOOLS,
        "messages": msgs,
    }


def test_chat_stream_chunks_tool_call_usage_and_done(llm):
    _, _, data = post(llm, "/v1/chat/completions", chat_body(1))
    evs = events(data)
    assert evs[-1][1] == "[DONE]"
    chunks = [d for _, d in evs[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    calls = [
        c["choices"][0]["delta"]["tool_calls"][0]
        for c in chunks
        if c["choices"] and "tool_calls" in c["choices"][0]["delta"]
    ]
    assert calls[0]["function"]["name"] == "write"
    assert json.loads(calls[0]["function"]["arguments"]) == {"filePath": f"{CWD}/run_1.py", "content": "print('hi')\n"}
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert finish == ["tool_calls"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0

    _, _, data = post(llm, "/v1/chat/completions", chat_body(2))
    call = [d for _, d in events(data)[:-1] if d["choices"] and "tool_calls" in d["choices"][0]["delta"]][0]
    args = json.loads(call["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"])
    assert args == {"command": "python run_1.py", "description": "Run the command"}  # required filled in


def test_chat_json_and_title_request(llm):
    _, _, data = post(llm, "/v1/chat/completions", chat_body(3, stream=False))
    reply = json.loads(data)
    assert reply["choices"][0]["message"]["content"] == "All done." and reply["choices"][0]["finish_reason"] == "stop"
    assert reply["usage"]["prompt_tokens"] > 0
    title = {
        "model": "m-1",
        "stream": True,
        "messages": [{"role": "system", "content": "You are a title generator."}, {"role": "user", "content": "go"}],
    }
    _, _, data = post(llm, "/v1/chat/completions", title)
    text = "".join(d["choices"][0]["delta"].get("content") or "" for _, d in events(data)[:-1] if d["choices"])
    assert text == "Mock training run"


def test_aider_gets_edit_blocks_and_a_bash_block(llm):
    system = "Act as an expert developer. Every *SEARCH/REPLACE block* must use this format: ..."
    body = {"model": "m-1", "messages": [{"role": "system", "content": system}, {"role": "user", "content": "go"}]}
    _, _, data = post(llm, "/v1/chat/completions", body)
    text = json.loads(data)["choices"][0]["message"]["content"]
    assert "run_1.py\n```python\n<<<<<<< SEARCH\n=======\nprint('hi')\n>>>>>>> REPLACE\n```" in text
    assert "```bash\npython run_1.py\n```" in text
    body["messages"] += [{"role": "assistant", "content": text}, {"role": "user", "content": "ran it"}]
    _, _, data = post(llm, "/v1/chat/completions", body)
    assert json.loads(data)["choices"][0]["message"]["content"] == "All done."


# --- Gemini -----------------------------------------------------------------------------------------------

GEMINI_TOOLS = [
    {
        "functionDeclarations": [
            {"name": "read_file", "parametersJsonSchema": schema("file_path", required=("file_path",))},
            {
                "name": "write_file",
                "parametersJsonSchema": schema("file_path", "content", required=("file_path", "content")),
            },
            {
                "name": "run_shell_command",
                "parametersJsonSchema": schema("command", "description", required=("command",)),
            },
        ]
    }
]


def gemini_body(results: int) -> dict:
    contents = [{"role": "user", "parts": [{"text": f"- **Workspace Directories:**\n  - {CWD}\n"}]}]
    for _ in range(results):
        contents += [
            {"role": "model", "parts": [{"functionCall": {"name": "read_file", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "read_file", "response": {}}}]},
        ]
    return {"contents": contents, "tools": GEMINI_TOOLS}


def test_gemini_stream_function_calls_and_text(llm):
    _, headers, data = post(llm, "/v1beta/models/m-1:streamGenerateContent?alt=sse", gemini_body(1))
    assert headers["Content-Type"] == "text/event-stream"
    evs = events(data)
    assert all(name is None for name, _ in evs)  # Gemini's SSE has data lines only
    cand = evs[-1][1]["candidates"][0]
    assert cand["finishReason"] == "STOP" and cand["content"]["role"] == "model"
    call = cand["content"]["parts"][0]["functionCall"]
    assert call == {"name": "write_file", "args": {"file_path": f"{CWD}/run_1.py", "content": "print('hi')\n"}}
    assert evs[-1][1]["usageMetadata"]["totalTokenCount"] > 0

    _, _, data = post(llm, "/v1beta/models/m-1:streamGenerateContent?alt=sse", gemini_body(3))
    text = "".join(p.get("text", "") for _, d in events(data) for p in d["candidates"][0]["content"]["parts"])
    assert text == "All done."
    _, _, data = post(llm, "/v1beta/models/m-1:generateContent", gemini_body(0))
    parts = json.loads(data)["candidates"][0]["content"]["parts"]
    assert parts[0]["functionCall"]["name"] == "read_file"


def test_gemini_structured_side_request_answers_the_schema(llm):
    spec = {
        "type": "OBJECT",
        "properties": {"reasoning": {"type": "STRING"}, "next_speaker": {"type": "STRING", "enum": ["user", "model"]}},
    }
    body = {
        "contents": [{"role": "user", "parts": [{"text": "who speaks next?"}]}],
        "generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": spec},
    }
    _, _, data = post(llm, "/v1beta/models/flash:generateContent", body)
    answer_json = json.loads(json.loads(data)["candidates"][0]["content"]["parts"][0]["text"])
    assert answer_json["next_speaker"] == "user"
    _, _, data = post(llm, "/v1beta/models/flash:countTokens", body)
    assert json.loads(data)["totalTokens"] > 0


# --- plumbing, failures -----------------------------------------------------------------------------------


def test_models_listing_unknown_paths_and_the_record(llm):
    conn = http.client.HTTPConnection("127.0.0.1", llm.port, timeout=10)
    conn.request("GET", "/v1/models")
    first = json.loads(conn.getresponse().read())
    conn.request("GET", "/v1beta/models")  # the same kept-alive connection
    second = json.loads(conn.getresponse().read())
    conn.request("POST", "/v1/unknown", "{}")
    resp = conn.getresponse()
    assert resp.status == 404 and "error" in json.loads(resp.read())
    conn.close()
    assert first["data"][0]["id"] == "m-1" and second["models"][0]["name"] == "models/m-1"
    assert [(r.method, r.api, r.status) for r in llm.calls()] == [
        ("GET", "models", 200),
        ("GET", "models", 200),
        ("POST", "other", 404),
    ]
    post(llm, "/v1/messages", claude_body(0))
    rec = llm.turns()[0]
    assert rec.path == "/v1/messages" and rec.body["model"] == "m-1" and rec.step == 0
    assert rec.reply["tool"] == "Read" and "Read" in llm.summary()[-1]


@pytest.mark.parametrize(
    "path,body,check",
    [
        (
            "/v1/messages",
            claude_body(0),
            lambda e: e["type"] == "error" and e["error"]["type"] == "invalid_request_error",
        ),
        ("/v1/responses", codex_body(0), lambda e: e["error"]["type"] == "invalid_request_error"),
        ("/v1/chat/completions", chat_body(0), lambda e: e["error"]["message"]),
        (
            "/v1beta/models/m:streamGenerateContent?alt=sse",
            gemini_body(0),
            lambda e: e["error"]["code"] == 400 and e["error"]["status"] == "INVALID_ARGUMENT",
        ),
    ],
)
def test_fail_status_answers_each_api_with_its_error_body(path, body, check):
    with MockLLM(TRAJ, fail_status=400) as llm:
        status, headers, data = post(llm, path, body)
    assert status == 400 and headers["Content-Type"] == "application/json"
    assert check(json.loads(data))
    assert llm.calls()[0].status == 400


def test_stopped_mock_refuses_connections():
    llm = MockLLM(TRAJ).start()
    post(llm, "/v1/messages", claude_body(0))
    llm.stop()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", llm.port), timeout=5)


def test_default_trajectory_and_run1_from_train():
    train = 'CONFIG = {\n    "lr": 1e-3,\n    "epochs": 5,\n}\n'
    run1 = run1_from_train(train)
    assert '"epochs": 1' in run1 and '"lr": 1e-3' in run1
    steps = default_trajectory(run1)
    assert [s.kind for s in steps] == ["read", "write", "shell", "answer"]
    assert steps[1].content == run1 and steps[2].command == "python run_1.py"
