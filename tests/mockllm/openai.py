"""OpenAI Responses (``POST /v1/responses``, Codex, OpenCode's openai provider) and Chat Completions
(``POST /v1/chat/completions``, OpenCode's OpenAI-compatible providers, Aider through LiteLLM)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from tests.mockllm.reply import Reply, chunks, new_id, sse
from tests.mockllm.trajectory import Tool

# --- Responses --------------------------------------------------------------------------------------------


def responses_tools(body: dict) -> dict[str, Tool]:
    out = {}
    for t in body.get("tools") or []:
        if isinstance(t, dict) and t.get("name"):
            out[t["name"]] = Tool(t["name"], t.get("parameters") if t.get("type") == "function" else None)
    return out


def responses_tool_results(body: dict) -> int:
    kinds = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")
    inp = body.get("input")
    return (
        sum(1 for item in inp if isinstance(item, dict) and item.get("type") in kinds) if isinstance(inp, list) else 0
    )


def _items(reply: Reply) -> list[dict]:
    items = []
    if reply.text:
        content = [{"type": "output_text", "text": reply.text, "annotations": []}]
        items.append(
            {"type": "message", "id": new_id("msg_"), "status": "completed", "role": "assistant", "content": content}
        )
    if reply.call:
        call_id = new_id("call_")
        if reply.call.raw is not None:
            items.append(
                {
                    "type": "custom_tool_call",
                    "id": new_id("ctc_"),
                    "status": "completed",
                    "call_id": call_id,
                    "name": reply.call.name,
                    "input": reply.call.raw,
                }
            )
        else:
            items.append(
                {
                    "type": "function_call",
                    "id": new_id("fc_"),
                    "status": "completed",
                    "call_id": call_id,
                    "name": reply.call.name,
                    "arguments": reply.call.arguments,
                }
            )
    return items


def response(reply: Reply, items: list[dict] | None = None, status: str = "completed") -> dict:
    return {
        "id": new_id("resp_"),
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": reply.model,
        "output": _items(reply) if items is None else items,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "usage": {
            "input_tokens": reply.input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": reply.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": reply.total_tokens,
        },
    }


def responses_stream(reply: Reply) -> Iterator[bytes]:
    """response.created, per output item: added, deltas, done; then response.completed with usage."""
    seq = iter(range(1_000_000))
    full = response(reply)

    def ev(kind: str, **data) -> bytes:
        return sse({"type": kind, "sequence_number": next(seq), **data}, kind)

    yield ev("response.created", response={**full, "status": "in_progress", "output": [], "usage": None})
    yield ev("response.in_progress", response={**full, "status": "in_progress", "output": [], "usage": None})
    for i, item in enumerate(full["output"]):
        if item["type"] == "message":
            yield ev(
                "response.output_item.added", output_index=i, item={**item, "status": "in_progress", "content": []}
            )
            part = {"type": "output_text", "text": "", "annotations": []}
            yield ev("response.content_part.added", item_id=item["id"], output_index=i, content_index=0, part=part)
            text = item["content"][0]["text"]
            for piece in chunks(text):
                yield ev("response.output_text.delta", item_id=item["id"], output_index=i, content_index=0, delta=piece)
            yield ev("response.output_text.done", item_id=item["id"], output_index=i, content_index=0, text=text)
            yield ev(
                "response.content_part.done",
                item_id=item["id"],
                output_index=i,
                content_index=0,
                part={**part, "text": text},
            )
        elif item["type"] == "function_call":
            yield ev(
                "response.output_item.added", output_index=i, item={**item, "status": "in_progress", "arguments": ""}
            )
            yield ev(
                "response.function_call_arguments.delta", item_id=item["id"], output_index=i, delta=item["arguments"]
            )
            yield ev(
                "response.function_call_arguments.done", item_id=item["id"], output_index=i, arguments=item["arguments"]
            )
        else:
            yield ev("response.output_item.added", output_index=i, item={**item, "status": "in_progress", "input": ""})
            yield ev("response.custom_tool_call_input.delta", item_id=item["id"], output_index=i, delta=item["input"])
            yield ev("response.custom_tool_call_input.done", item_id=item["id"], output_index=i, input=item["input"])
        yield ev("response.output_item.done", output_index=i, item=item)
    yield ev("response.completed", response=full)


# --- Chat Completions -------------------------------------------------------------------------------------


def chat_tools(body: dict) -> dict[str, Tool]:
    out = {}
    for t in body.get("tools") or []:
        fn = t.get("function") if isinstance(t, dict) else None
        if fn and fn.get("name"):
            out[fn["name"]] = Tool(fn["name"], fn.get("parameters"))
    return out


def chat_tool_results(body: dict) -> int:
    return sum(1 for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "tool")


def _usage(reply: Reply) -> dict:
    return {
        "prompt_tokens": reply.input_tokens,
        "completion_tokens": reply.output_tokens,
        "total_tokens": reply.total_tokens,
    }


def _tool_calls(reply: Reply) -> list[dict]:
    if not reply.call:
        return []
    fn = {"name": reply.call.name, "arguments": reply.call.arguments}
    return [{"id": new_id("call_"), "type": "function", "function": fn}]


def completion(reply: Reply) -> dict:
    msg = {"role": "assistant", "content": reply.text or None}
    if reply.call:
        msg["tool_calls"] = _tool_calls(reply)
    return {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": reply.model,
        "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls" if reply.call else "stop"}],
        "usage": _usage(reply),
    }


def chat_stream(reply: Reply, include_usage: bool = True, usage_unasked: bool = True) -> Iterator[bytes]:
    """chat.completion.chunk deltas (role, text, tool call), a finish chunk, the usage chunk, ``[DONE]``; without
    ``include_usage`` the usage is on the finish chunk, or (``usage_unasked`` False, as OpenAI's API) nowhere."""
    head = {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": reply.model,
    }

    def chunk(delta: dict, finish: str | None = None) -> bytes:
        return sse({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    yield chunk({"role": "assistant", "content": ""})
    if reply.text:
        for piece in chunks(reply.text):
            yield chunk({"content": piece})
    for i, call in enumerate(_tool_calls(reply)):
        yield chunk({"tool_calls": [{"index": i, **call}]})
    finish = "tool_calls" if reply.call else "stop"
    if include_usage:
        yield chunk({}, finish)
        yield sse({**head, "choices": [], "usage": _usage(reply)})
    elif not usage_unasked:
        yield chunk({}, finish)
    else:
        yield sse({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": _usage(reply)})
    yield sse("[DONE]")


def models(model: str) -> dict:
    return {"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "mock"}]}


def error(status: int, message: str) -> dict:
    kind = {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        429: "rate_limit_error",
    }.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}
