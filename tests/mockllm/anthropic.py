"""Anthropic Messages (``POST /v1/messages``), as Claude Code uses it: SSE events or one JSON message."""

from __future__ import annotations

import json
from collections.abc import Iterator

from tests.mockllm.reply import Reply, chunks, new_id, sse
from tests.mockllm.trajectory import Tool


def tools(body: dict) -> dict[str, Tool]:
    return {t["name"]: Tool(t["name"], t.get("input_schema")) for t in body.get("tools") or [] if isinstance(t, dict)}


def tool_results(body: dict) -> int:
    return sum(
        1
        for m in body.get("messages") or []
        if isinstance(m.get("content"), list)
        for block in m["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    )


def _content(reply: Reply) -> list[dict]:
    out = [{"type": "text", "text": reply.text}] if reply.text else []
    if reply.call:
        out.append({"type": "tool_use", "id": new_id("toolu_"), "name": reply.call.name, "input": reply.call.args})
    return out


def _usage(reply: Reply, output_tokens: int) -> dict:
    return {
        "input_tokens": reply.input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def _stop(reply: Reply) -> str:
    return "tool_use" if reply.call else "end_turn"


def message(reply: Reply) -> dict:
    return {
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": _content(reply),
        "stop_reason": _stop(reply),
        "stop_sequence": None,
        "usage": _usage(reply, reply.output_tokens),
    }


def stream(reply: Reply) -> Iterator[bytes]:
    """message_start, one content block per part (deltas), message_delta with usage, message_stop."""
    start = {**message(reply), "content": [], "stop_reason": None, "usage": _usage(reply, 1)}
    yield sse({"type": "message_start", "message": start}, "message_start")
    yield sse({"type": "ping"}, "ping")
    for i, block in enumerate(_content(reply)):
        if block["type"] == "text":
            yield sse(
                {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}},
                "content_block_start",
            )
            for piece in chunks(block["text"]):
                delta = {"type": "text_delta", "text": piece}
                yield sse({"type": "content_block_delta", "index": i, "delta": delta}, "content_block_delta")
        else:
            head = {**block, "input": {}}
            yield sse({"type": "content_block_start", "index": i, "content_block": head}, "content_block_start")
            for piece in chunks(json.dumps(block["input"]), 200):
                delta = {"type": "input_json_delta", "partial_json": piece}
                yield sse({"type": "content_block_delta", "index": i, "delta": delta}, "content_block_delta")
        yield sse({"type": "content_block_stop", "index": i}, "content_block_stop")
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": _stop(reply), "stop_sequence": None},
        "usage": _usage(reply, reply.output_tokens),
    }
    yield sse(delta, "message_delta")
    yield sse({"type": "message_stop"}, "message_stop")


def count_tokens(n: int) -> dict:
    return {"input_tokens": n}


def models(model: str) -> dict:
    entry = {"type": "model", "id": model, "display_name": model, "created_at": "2026-01-01T00:00:00Z"}
    return {"data": [entry], "has_more": False, "first_id": model, "last_id": model}


def error(status: int, message: str) -> dict:
    kind = {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        429: "rate_limit_error",
        529: "overloaded_error",
    }.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}
