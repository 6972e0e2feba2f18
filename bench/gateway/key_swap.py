"""The run's tokens: what the agent holds instead of the key, and how the gateway swaps them back.

Why: an agent that holds the real API key can print it (into a metric name, a script, its final
message), use it outside the run's budget, or keep it. With a metering gateway
(:mod:`bench.gateway.proxy`) it does not need it: :func:`run_tokens` gives the agent's environment a
fresh token (``bench-run-`` and 32 hex digits) for each value that is one of the harness's
credentials, and the gateway, which alone has the mapping, puts the real value back in the
credential header of the request's API family (:data:`FAMILY_HEADERS`, :func:`swap`) and refuses one
that carries none of its tokens there (:func:`carries`). A token is worthless outside its run's
gateway, which closes with the run; the redactor (:mod:`bench.redact`) knows the tokens' shape and
removes them from the record all the same.

**The key only in its header.** No API family's CLI sends its key in the URL: Claude Code sends
``x-api-key`` (or ``Authorization: Bearer`` for a gateway's token or a login), Codex, OpenCode and
Aider ``Authorization: Bearer``, the Gemini CLI (0.61.0, as its recorded
requests show) ``x-goog-api-key``. So the real key is written into
that header only, never into a query string (query strings land in every proxy's and vendor's access
log, and an upstream that reflects its request would hand the key back), and a request whose run
token appears anywhere else, in the query, another header or the body, is refused
(:func:`misplaced`): no CLI does that, an agent probing the gateway does.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from pathlib import Path

from bench import redact

TOKEN_PREFIX = "bench-run-"
KEY_HEADERS = ("x-api-key", "authorization", "x-goog-api-key", "api-key")


def new_token() -> str:
    """A fresh per-run token (``bench-run-`` and 32 hex digits: :data:`bench.redact.RUN_TOKEN`)."""
    return TOKEN_PREFIX + secrets.token_hex(16)


def run_tokens(env: Mapping[str, str], known: Mapping[str, str] | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """``env`` with the harness's credentials replaced by run tokens, and the gateway's keys.

    ``env`` is the agent's environment; every value that is one of the harness's credentials
    (``known``: value -> name, default :func:`bench.redact.env_secrets`) is replaced by a token, the
    same token wherever the same value appears (Codex's ``CODEX_API_KEY`` copy of
    ``OPENAI_API_KEY``); the gateway's ``keys`` map token -> real value. Each token is registered
    with the redactor.
    """
    known = redact.env_secrets() if known is None else known
    out, keys, by_value = dict(env), {}, {}
    for name, value in env.items():
        v = value.strip()
        if v in known and len(v) >= redact.MIN_LEN:
            if v not in by_value:
                by_value[v] = new_token()
                keys[by_value[v]] = v
                redact.register(by_value[v], "run-token")
            out[name] = by_value[v]
    return out, keys


def register_logins(files: list[Path]) -> int:
    """Register with the redactor every token of the CLI login files this run binds.

    The files are those bound into its sandbox (Codex's ``auth.json``, Gemini's
    ``oauth_creds.json``): values under a name holding ``token``, ``key`` or ``secret``. The gateway
    cannot swap a login the CLI reads itself (a residual: docs/sandbox-and-rules.md), but the record
    can still be kept free of it. Returns how many values were registered; an unreadable file
    registers none.
    """
    count = 0

    def walk(o: object, name: str = "") -> None:
        nonlocal count
        if isinstance(o, dict):
            for k, v in o.items():
                walk(v, str(k))
        elif isinstance(o, list):
            for v in o:
                walk(v, name)
        elif isinstance(o, str) and any(w in name.lower() for w in ("token", "key", "secret")):
            if len(o.strip()) >= redact.MIN_LEN:
                redact.register(o.strip(), "login")
                count += 1

    for f in files:
        try:
            walk(json.loads(Path(f).read_text()[: 1 << 20]))
        except (OSError, ValueError, UnicodeDecodeError):
            continue
    return count


def tokenized(argv: list[str], keys: Mapping[str, str]) -> list[str]:
    """``argv`` with each real value of ``keys`` replaced by its token.

    For a key spelled into a command line.
    """
    out = []
    for a in argv:
        for token, key in keys.items():
            a = a.replace(key, token)
        out.append(a)
    return out


# the credential headers each API family's clients send (lower case); "any": a gateway built without
# saying (tests)
FAMILY_HEADERS: dict[str, tuple[str, ...]] = {
    "anthropic": ("x-api-key", "authorization"),
    "openai": ("authorization", "api-key"),
    "gemini": ("x-goog-api-key",),
    "chatgpt": ("authorization",),
    "codeassist": ("authorization",),
    "any": KEY_HEADERS,
}


def _headers_of(family: str) -> tuple[str, ...]:
    return FAMILY_HEADERS.get(family, KEY_HEADERS)


def carries(headers: list[tuple[str, str]], keys: Mapping[str, str], family: str = "any") -> bool:
    """Whether a request names one of ``keys``' tokens in its family's credential header."""
    names = _headers_of(family)
    return any(token in v for k, v in headers if k.lower() in names for token in keys)


def misplaced(
    headers: list[tuple[str, str]], target: str, body: bytes, keys: Mapping[str, str], family: str = "any"
) -> str | None:
    """Where a run token appears outside its family's credential header, or None.

    The place: ``query``, ``header NAME`` or ``body``. Only the gateway's own tokens are looked for:
    an agent's text that merely mentions the prefix is not one.
    """
    if not keys:
        return None
    names = _headers_of(family)
    for token in keys:
        if token in target:
            return "query" if token in target.partition("?")[2] else "path"
        for k, v in headers:
            if k.lower() not in names and token in v:
                return f"header {k[:40]}"
        if token.encode() in body:
            return "body"
    return None


def swap(headers: list[tuple[str, str]], keys: Mapping[str, str], family: str = "any") -> list[tuple[str, str]]:
    """The request's headers with each run token swapped for its real value.

    Only a token in its family's credential header is replaced; nothing else is touched (a key never
    goes into a query string).
    """
    if not keys:
        return headers
    names = _headers_of(family)

    def real(v: str) -> str:
        for token, key in keys.items():
            v = v.replace(token, key)
        return v

    return [(k, real(v) if k.lower() in names else v) for k, v in headers]
