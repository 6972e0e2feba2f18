"""The bodies the gateway keeps for the run's trace (bench.gateway.transcript): assembled answers, caps, no secrets.

Expected texts are the mock's own replies (tests/mockllm, the wire formats the gateway tests use) or strings written
here; sizes follow from the caps' definitions.
"""

from __future__ import annotations

import json

from bench.gateway import transcript
from bench.gateway.transcript import REDACTED, Capture, Redactor, Transcript, request_view
from tests.mockllm import anthropic as mock_anthropic
from tests.mockllm import gemini as mock_gemini
from tests.mockllm import openai as mock_openai
from tests.mockllm.reply import Reply
from tests.mockllm.trajectory import Call

ENV_KEY = "sk-ant-api03-" + "Q" * 40  # a harness credential
HEADER_KEY = "opaque-login-token-0123456789"  # not key-shaped: only known because it came in a header
SHAPED = "sk-proj-" + "Z" * 30  # key-shaped, in no variable


def _feed(c: Capture, data: bytes, sse: bool, size: int = 7) -> None:
    for i in range(0, len(data), size):  # cut anywhere, as TCP does
        c.feed(data[i : i + size], sse)


def test_each_apis_answer_is_assembled_from_its_stream_and_its_json():
    text = "The validation loss went down to 0.412 after the second epoch. " * 3
    call = Call("Bash", {"command": "python run_2.py --lr 3e-4"})
    cases = [
        ("anthropic", mock_anthropic.stream, mock_anthropic.message),
        ("responses", mock_openai.responses_stream, mock_openai.response),
        ("chat", mock_openai.chat_stream, mock_openai.completion),
        ("gemini", mock_gemini.stream, mock_gemini.generate),
    ]
    for api, stream, whole in cases:
        for reply, want in ((Reply("m", text=text), text), (Reply("m", call=call), "run_2.py --lr 3e-4")):
            streamed, body = Capture(api, b"{}", Redactor()), Capture(api, b"{}", Redactor())
            _feed(streamed, b"".join(stream(reply)), sse=True)
            _feed(body, json.dumps(whole(reply)).encode(), sse=False, size=1000)
            for c in (streamed, body):
                blocks = c.response_view()["blocks"]
                got = "".join(b["text"] for b in blocks)
                assert want in got, (api, blocks)
                if reply.call:
                    assert [b["name"] for b in blocks if b["type"] == "tool_use"] == ["Bash"], (api, blocks)


def test_an_unknown_answer_is_kept_raw_and_capped():
    c = Capture("anthropic", b"{}", Redactor())
    page = b"<html>" + b"x" * 100_000 + b"</html>"
    _feed(c, page, sse=False, size=4096)
    view = c.response_view()
    assert view["bytes"] == len(page) and view["text"].startswith("<html>") and view["text"].endswith("</html>")
    assert len(view["text"]) < transcript.RESPONSE_CAP + 100 and view["omitted"] == len(page) - transcript.RESPONSE_CAP


def test_a_5_mb_request_keeps_its_newest_turn_within_the_cap():
    old = [{"role": "user", "content": f"old turn {i} " + "o" * 50_000} for i in range(100)]  # ~5 MB
    newest = {"role": "user", "content": [{"type": "tool_result", "content": "loss 0.37 " + "n" * 20_000 + " END"}]}
    body = json.dumps({"model": "claude-x", "system": "S" * 30_000, "tools": [], "messages": [*old, newest]}).encode()
    assert len(body) > 5_000_000
    view = request_view(body, Redactor())
    size = len(json.dumps(view))
    assert size <= transcript.REQUEST_CAP + 300, size  # the cap, plus the view's own small fields
    assert view["bytes"] == len(body) and view["messages_total"] == 101
    assert view["fields"] == {"model": "claude-x"} and view["left_out_bytes"]["system"] == 30_002
    last = view["messages"][-1]["content"][0]["content"]
    assert last.startswith("loss 0.37 ") and last.endswith(" END")  # head and tail of the newest tool result
    omitted = len(newest["content"][0]["content"]) - transcript.STRING_CAP
    assert f"[{omitted} characters omitted]" in last
    # the newest turns, each with its long string cut, while they fit in REQUEST_CAP beside the view's own fields
    cut = [json.dumps({**t, "content": transcript.cap(t["content"], transcript.STRING_CAP)[0]}) for t in old]
    used, fit = len(json.dumps({k: view[k] for k in ("bytes", "fields", "left_out_bytes")})), 0
    used += len(json.dumps(view["messages"][-1]))
    while used + len(cut[-1 - fit]) <= transcript.REQUEST_CAP:
        used, fit = used + len(cut[-1 - fit]), fit + 1
    assert fit >= 1 and (len(view["messages"]), view["messages_omitted"]) == (fit + 1, 100 - fit)
    assert view["messages"][0]["content"].startswith(f"old turn {100 - fit} ")


def test_secrets_never_reach_the_bodies_file(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", ENV_KEY)
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "a-token-value-987654")
    tx = Transcript(tmp_path / "llm-bodies.jsonl")
    leak = f"env says ANTHROPIC_API_KEY={ENV_KEY}, header {HEADER_KEY}, shaped {SHAPED}, other a-token-value-987654"
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": leak}]}).encode()
    c = tx.start("anthropic", [("x-api-key", HEADER_KEY), ("Authorization", f"Bearer {HEADER_KEY}")], body)
    answer = Reply("m", text=f"I found {ENV_KEY} and {SHAPED} and {HEADER_KEY}")
    _feed(c, b"".join(mock_anthropic.stream(answer)), sse=True)
    rec: dict = {"t": 1.0}
    tx.finish(c, rec)
    text = (tmp_path / "llm-bodies.jsonl").read_text()
    for secret in (ENV_KEY, HEADER_KEY, SHAPED, "a-token-value-987654"):
        assert secret not in text
    line = json.loads(text)
    assert rec["body"] == line["id"] == 0
    assert line["request"]["messages"][0]["content"].count(REDACTED) == 4
    assert "I found [REDACTED] and [REDACTED] and [REDACTED]" in line["response"]["blocks"][0]["text"]
    assert "env says ANTHROPIC_API_KEY=" in text  # the words around the secret stay readable


def test_past_the_run_cap_lines_keep_the_answers_head_then_sizes_only(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_LLM_BODIES_MB", str(20_000 / (1 << 20)))  # a run cap of 20,000 bytes
    monkeypatch.setattr(transcript, "LATE_BYTES", 3_000)
    tx = Transcript(tmp_path / "b.jsonl")
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "q" * 9000}]}).encode()
    for i in range(20):
        c = tx.start("chat", [], body)
        answer = Reply("m", text=f"answer {i} " + "a" * 3000)
        _feed(c, json.dumps(mock_openai.completion(answer)).encode(), sse=False, size=500)
        tx.finish(c, {"t": float(i)})
    lines = [json.loads(x) for x in (tmp_path / "b.jsonl").read_text().splitlines()]
    assert [x["id"] for x in lines] == list(range(20))
    full = [x for x in lines if "omitted" not in x]
    late = [x for x in lines if "text" in x["response"]]
    bare = lines[len(full) + len(late) :]
    assert len(full) >= 1 and len(late) >= 1 and len(bare) >= 1, (len(full), len(late))
    assert all(x["omitted"] == "run cap" for x in late + bare) and bare[-1]["request"] == {"bytes": len(body)}
    head = late[0]["response"]["text"]
    assert f"answer {len(full)} " in head and len(head) <= transcript.LATE_CAP + 50
    written = sum(len(json.dumps(x)) + 1 for x in full + late)
    assert written <= 20_000 + 3_000 + 800  # RUN_CAP + LATE_BYTES, passed by at most one late line
