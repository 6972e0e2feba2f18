"""The run's tokens: what the agent holds instead of the key, and how the gateway swaps them back.

Why: an agent that holds the real API key can print it (into a metric name, a script, its final message), use it
outside the run's budget, or keep it. With a metering gateway (:mod:`bench.agents.gateway`) it does not need it:
:func:`run_tokens` gives the agent's environment a fresh token (``bench-run-`` and 32 hex digits) for each value
that is one of the harness's credentials, and the gateway, which alone has the mapping, puts the real value back in
the credential headers and the ``key`` query parameter of each request it forwards (:func:`swap`) and refuses one
that carries none of its tokens (:func:`carries`). A token is worthless outside its run's gateway, which closes with
the run; the redactor (:mod:`bench.redact`) knows the tokens' shape and removes them from the record all the same.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

from bench import redact

TOKEN_PREFIX = "bench-run-"
KEY_HEADERS = ("x-api-key", "authorization", "x-goog-api-key", "api-key")
KEY_PARAMS = ("key", "api_key", "apikey", "access_token")


def new_token() -> str:
    """A fresh per-run token (``bench-run-`` and 32 hex digits: :data:`bench.redact.RUN_TOKEN`)."""
    return TOKEN_PREFIX + secrets.token_hex(16)


def run_tokens(env: Mapping[str, str], known: Mapping[str, str] | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """``env`` (the agent's environment) with every value that is one of the harness's credentials (``known``:
    value -> name, default :func:`bench.redact.env_secrets`) replaced by a token, the same token wherever the same
    value appears (Codex's ``CODEX_API_KEY`` copy of ``OPENAI_API_KEY``); and the gateway's ``keys`` (token -> real
    value). Each token is registered with the redactor."""
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
    """Register with the redactor every token of the CLI login files this run binds into its sandbox (Codex's
    ``auth.json``, Gemini's ``oauth_creds.json``): values under a name holding ``token``, ``key`` or ``secret``.
    The gateway cannot swap a login the CLI reads itself (a residual: docs/sandbox-and-rules.md), but the record can
    still be kept free of it. Returns how many values were registered; an unreadable file registers none."""
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
    """``argv`` with each real value of ``keys`` replaced by its token (a key spelled into a command line)."""
    out = []
    for a in argv:
        for token, key in keys.items():
            a = a.replace(key, token)
        out.append(a)
    return out


def _values(headers: list[tuple[str, str]], path: str) -> list[str]:
    found = [v for k, v in headers if k.lower() in KEY_HEADERS]
    return found + [v for k, v in parse_qsl(urlsplit(path).query, keep_blank_values=True) if k.lower() in KEY_PARAMS]


def carries(headers: list[tuple[str, str]], path: str, keys: Mapping[str, str]) -> bool:
    """Whether a request names one of ``keys``' tokens where a credential goes."""
    return any(token in v for v in _values(headers, path) for token in keys)


def swap(headers: list[tuple[str, str]], path: str, keys: Mapping[str, str]) -> tuple[list[tuple[str, str]], str]:
    """The request's credential headers and key query parameters with each token replaced by its real value."""
    if not keys:
        return headers, path

    def real(v: str) -> str:
        for token, key in keys.items():
            v = v.replace(token, key)
        return v

    out = [(k, real(v) if k.lower() in KEY_HEADERS else v) for k, v in headers]
    parts = urlsplit(path)
    if parts.query:
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        path = f"{parts.path}?{urlencode([(k, real(v) if k.lower() in KEY_PARAMS else v) for k, v in pairs])}"
    return out, path
