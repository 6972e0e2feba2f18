"""Which requests the metering gateway forwards, per API.

An allow-list of method and path, nothing else.

Why an allow-list: the gateway holds the real key (the agent has only its run's token), so whatever
it forwards is spent on the user's account. Before this list it forwarded any path: after the run's
API budget refused ``/v1/messages``, ``/v1/messages/batches``, ``/v1/complete``, ``count_tokens``
and ``/v1/messages/`` (a trailing slash) still reached the API with the key, unmetered. Each family
lists what the CLIs that use it were seen to send (their requests as recorded, the adapters'
tests against the mock API, the recorded login traffic of ``tests/bench/agents/test_logins.py``),
matched against the whole path after the gateway's base path (no prefix or suffix tolerance: a
trailing slash or a sub-path is another endpoint), query string aside:

- ``anthropic`` (Claude Code, Aider's and OpenCode's ``anthropic/``): ``POST /v1/messages`` and
  ``POST /v1/messages/count_tokens`` (Claude Code counts tokens before it compacts a long
  conversation; free at Anthropic, metered as a request here, refused after the budget like every
  path). No batches, files, legacy completions or model listing.
- ``openai`` (Codex with a key, OpenCode, Aider, OpenRouter, any OpenAI-compatible base URL):
  ``POST /responses``, ``POST /chat/completions``, ``GET /models`` and ``GET /models/{id}``
  (with or without ``/v1`` before them). No batches, files, fine-tuning, images, audio,
  embeddings or assistants.
- ``gemini`` (Gemini CLI with a key): ``POST /v1beta/models/{m}:generateContent``,
  ``:streamGenerateContent``, ``:countTokens`` (the CLI counts before it sends),
  ``GET /v1beta/models[/{m}]``.
- ``chatgpt`` (Codex under a ChatGPT login: its provider's base URL is ``.../backend-api/codex``):
  ``POST .../codex/responses``, ``GET .../codex/models``, and the account checks Codex makes at
  start (``GET|POST /backend-api/wham/...``).
- ``codeassist`` (Gemini CLI under a Google login): Code Assist's RPCs ``POST /v1internal:{method}``
  (generate, stream, count, load, onboard, quota, experiments) and
  ``GET /v1internal/operations/...`` (onboarding's poll).
- ``any``: the union, for a gateway built without saying (tests that drive one API directly).

Anything else is answered by the gateway itself, in the API's own error format, and logged with
``refused: route`` (:mod:`bench.gateway.proxy`).

**The path checked is the path forwarded.** Before any route is matched, :func:`bad_target` refuses
(400, ``refused: target``) a request target that another server could read as a different path: a
dot segment (``.``, ``..``: ``/v1/models/../files`` matched ``/v1/models/{id}``, and a front end
that removes dot segments, as RFC 3986 says to, serves ``/v1/files``), any percent-escape in the
path (``%2e%2e``, ``%2f``: decoded by some front ends), a backslash (a slash to some), an empty
segment, an absolute-form or authority-form target (``http://host/...``), a fragment, or a byte
outside printable ASCII. No CLI sends any of them; the target is then forwarded unchanged, so what
was checked is what the API receives.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

_V1 = r"(?:/v1)?"
FAMILIES: dict[str, tuple[tuple[str, str], ...]] = {
    "anthropic": (("POST", rf"{_V1}/messages"), ("POST", rf"{_V1}/messages/count_tokens")),
    "openai": (
        ("POST", rf"{_V1}/responses"),
        ("POST", rf"{_V1}/chat/completions"),
        ("GET", rf"{_V1}/models"),
        ("GET", rf"{_V1}/models/[A-Za-z0-9._:\-]+(?:/[A-Za-z0-9._:\-]+)?"),  # an id, or vendor/model (OpenRouter)
    ),
    "gemini": (
        ("POST", r"(?:/v1beta|/v1)/models/[A-Za-z0-9._\-]+:(?:generateContent|streamGenerateContent|countTokens)"),
        ("GET", r"(?:/v1beta|/v1)/models(?:/[A-Za-z0-9._\-]+)?"),
    ),
    "chatgpt": (
        ("POST", r"(?:/backend-api)?(?:/codex)?/responses"),
        ("GET", r"(?:/backend-api)?(?:/codex)?/models"),
        ("GET", r"(?:/backend-api)?/wham/[A-Za-z0-9_/\-]+"),
        ("POST", r"(?:/backend-api)?/wham/[A-Za-z0-9_/\-]+"),
    ),
    "codeassist": (
        (
            "POST",
            r"/v1internal:(?:generateContent|streamGenerateContent|countTokens|loadCodeAssist|onboardUser"
            r"|retrieveUserQuota|listExperiments|recordCodeAssistMetrics)",
        ),
        ("GET", r"/v1internal/operations/[A-Za-z0-9_/\-]+"),
    ),
}
FAMILIES["any"] = tuple(r for f in ("anthropic", "openai", "gemini", "chatgpt", "codeassist") for r in FAMILIES[f])
_COMPILED = {f: tuple((m, re.compile(p)) for m, p in routes) for f, routes in FAMILIES.items()}


def bad_target(target: str) -> str | None:
    """Why a request target cannot be routed as sent (a sentence).

    None for a plain origin-form target.
    """
    if not target.startswith("/") or target.startswith("//"):
        return "only an origin-form target (/path?query) is served, not an absolute or authority form"
    if any(not 0x21 <= ord(c) <= 0x7E for c in target):
        return "the target holds a byte outside printable ASCII"
    if "#" in target:
        return "the target holds a fragment (#)"
    if "\\" in target:
        return "the target holds a backslash"
    path = target.split("?", 1)[0]
    if "%" in path:
        return "the path holds a percent-escape (an endpoint's path has none)"
    segments = path.split("/")[1:]
    if any(seg in (".", "..") for seg in segments):
        return "the path holds a dot segment (. or ..)"
    if "" in segments[:-1]:
        return "the path holds an empty segment (//)"
    return None


def family_of(upstream: str, var: str | None = None) -> str:
    """The family of a gateway's upstream.

    Read from its URL and the base-URL variable the CLI was pointed with.
    """
    parts = urlsplit(upstream)
    host, path = (parts.hostname or "").lower(), parts.path
    if "/backend-api" in path or host == "chatgpt.com":
        return "chatgpt"
    if host.startswith("cloudcode-pa."):
        return "codeassist"
    if var == "GOOGLE_GEMINI_BASE_URL" or host == "generativelanguage.googleapis.com":
        return "gemini"
    if var == "ANTHROPIC_BASE_URL" or host == "api.anthropic.com":
        return "anthropic"
    if var is None and host not in ("api.openai.com", "openrouter.ai"):
        return "any"
    return "openai"


def allowed(family: str, method: str, path: str, base_path: str = "") -> bool:
    """Whether ``method path`` is one of ``family``'s endpoints under ``base_path``.

    ``path`` is the request's, query included or not; ``base_path`` is the gateway's (the upstream's
    path, e.g. ``/v1``).
    """
    p = path.split("?", 1)[0]
    if base_path and p.startswith(base_path + "/"):
        rest = p[len(base_path) :]
        if _match(family, method, rest):
            return True
    return _match(family, method, p)


def _match(family: str, method: str, path: str) -> bool:
    return any(m == method and rx.fullmatch(path) for m, rx in _COMPILED.get(family, _COMPILED["any"]))


def refusal(api: str | None, path: str, message: str, kind: str = "budget", family: str = "any") -> tuple[int, dict]:
    """The HTTP status and JSON body that API uses for a request it will not serve.

    So that the CLI shows the text to its model and does not retry. ``kind``: ``budget`` (402;
    OpenAI's 429 insufficient_quota), ``route`` (404), ``token`` (401), ``unpriced``, ``target``,
    ``misplaced`` (400).
    """
    p = path.split("?", 1)[0]
    style = (
        "anthropic"
        if api == "anthropic" or family == "anthropic" or "/messages" in p
        else "gemini"
        if api == "gemini" or family in ("gemini", "codeassist") or "/v1beta/" in p or "/v1internal" in p
        else "openai"
    )
    status = {"budget": 402, "route": 404, "token": 401, "unpriced": 400, "target": 400, "misplaced": 400}[kind]
    if style == "anthropic":
        kinds = {"budget": "billing_error", "route": "not_found_error", "token": "authentication_error"}
        error = {"type": kinds.get(kind, "invalid_request_error"), "message": message}
        return status, {"type": "error", "error": error}
    if style == "gemini":
        states = {"budget": "FAILED_PRECONDITION", "route": "NOT_FOUND", "token": "UNAUTHENTICATED"}
        return status, {"error": {"code": status, "message": message, "status": states.get(kind, "INVALID_ARGUMENT")}}
    if kind == "budget":
        quota = {"message": message, "type": "insufficient_quota", "code": "insufficient_quota", "param": None}
        return 429, {"error": quota}
    codes = {"route": "not_found", "token": "invalid_api_key", "unpriced": "model_not_found"}
    codes |= {"target": "invalid_request", "misplaced": "invalid_request"}
    return status, {"error": {"message": message, "type": "invalid_request_error", "code": codes[kind], "param": None}}
