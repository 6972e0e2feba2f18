"""Gemini API (``POST /v1beta/models/<m>:streamGenerateContent?alt=sse`` and ``:generateContent``).

The Gemini CLI also asks side questions with a JSON response schema (is it the model's turn to
speak next? which model should route this?); :func:`from_schema` answers them with a minimal
instance of the schema that lets the session end normally ("user" speaks next).
"""

from __future__ import annotations

from collections.abc import Iterator

from tests.mockllm.reply import Reply, chunks, new_id, sse
from tests.mockllm.trajectory import Tool


def tools(body: dict) -> dict[str, Tool]:
    out = {}
    for group in body.get("tools") or []:
        for fn in (group or {}).get("functionDeclarations") or []:
            if isinstance(fn, dict) and fn.get("name"):
                schema = fn.get("parametersJsonSchema") or fn.get("parameters")
                out[fn["name"]] = Tool(fn["name"], _lower_types(schema) if schema else None)
    return out


def _lower_types(schema):
    """Gemini's OpenAPI-style schemas spell types in capitals (STRING, OBJECT)."""
    if isinstance(schema, dict):
        return {k: (v.lower() if k == "type" and isinstance(v, str) else _lower_types(v)) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_lower_types(x) for x in schema]
    return schema


def tool_results(body: dict) -> int:
    return sum(
        1
        for c in body.get("contents") or []
        for p in (c or {}).get("parts") or []
        if isinstance(p, dict) and "functionResponse" in p
    )


def json_schema(body: dict) -> dict | None:
    """The response schema of a structured side request, or None for an ordinary turn."""
    cfg = body.get("generationConfig") or {}
    if cfg.get("responseMimeType") != "application/json":
        return None
    return _lower_types(cfg.get("responseJsonSchema") or cfg.get("responseSchema") or {})


def from_schema(schema: dict):
    kind = schema.get("type")
    if "enum" in schema:
        return "user" if "user" in schema["enum"] else schema["enum"][0]
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {k: from_schema(v) for k, v in props.items()}
    return {"boolean": False, "number": 0, "integer": 0, "array": []}.get(kind, "mock")


def _parts(reply: Reply) -> list[dict]:
    parts = [{"text": reply.text}] if reply.text else []
    if reply.call:
        parts.append({"functionCall": {"name": reply.call.name, "args": reply.call.args}})
    return parts


def _usage(reply: Reply) -> dict:
    return {
        "promptTokenCount": reply.input_tokens,
        "candidatesTokenCount": reply.output_tokens,
        "totalTokenCount": reply.total_tokens,
    }


def _chunk(reply: Reply, parts: list[dict], finish: str | None, rid: str) -> dict:
    cand = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        cand["finishReason"] = finish
    return {"candidates": [cand], "usageMetadata": _usage(reply), "modelVersion": reply.model, "responseId": rid}


def generate(reply: Reply) -> dict:
    return _chunk(reply, _parts(reply), "STOP", new_id("resp"))


def stream(reply: Reply) -> Iterator[bytes]:
    """Text deltas as separate chunks, then the function call and the finish reason with usage."""
    rid = new_id("resp")
    pieces = chunks(reply.text) if reply.text else []
    for piece in pieces[:-1]:
        yield sse(_chunk(reply, [{"text": piece}], None, rid))
    last = ([{"text": pieces[-1]}] if pieces else []) + _parts(reply)[1 if reply.text else 0 :]
    yield sse(_chunk(reply, last, "STOP", rid))


def count_tokens(n: int) -> dict:
    return {"totalTokens": n}


def models(model: str) -> dict:
    entry = {
        "name": f"models/{model}",
        "displayName": model,
        "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"],
    }
    return {"models": [entry]}


def error(status: int, message: str) -> dict:
    name = {
        400: "INVALID_ARGUMENT",
        401: "UNAUTHENTICATED",
        403: "PERMISSION_DENIED",
        404: "NOT_FOUND",
        429: "RESOURCE_EXHAUSTED",
    }.get(status, "INTERNAL")
    return {"error": {"code": status, "message": message, "status": name}}
