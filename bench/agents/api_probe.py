"""Does the model's endpoint answer, take the credential and offer the model?

One request that costs nothing.

The request is the API's model list (``GET /v1/models`` for Anthropic, OpenAI-compatible APIs and
OpenRouter, ``GET /v1beta/models`` for Gemini), with the credential :mod:`bench.agents.credentials`
found and a short timeout (:data:`TIMEOUT_S`). What the answer proves:

- no HTTP answer (refused, no route, a name that does not resolve, the timeout): the endpoint cannot
  be reached, and the CLI would retry for its whole budget: refused;
- 401 or 403 for an API key: the key is refused: refused. A subscription login (Claude's OAuth
  token, a ChatGPT or Google login) is meant for the CLI's own endpoints and may be refused by the
  model list, so for a login any HTTP answer only proves that the endpoint is reachable;
- 200 with a complete list that does not hold the model (nor a dated version of it,
  ``claude-opus-4-7`` for ``claude-opus-4-7-20260101``): the model name is refused. A list cut into
  pages, an empty one, or another status (404 from a gateway without a list, 429, 5xx) says nothing
  about the model: accepted.

``BENCH_API_CHECK=0`` skips these requests (credentials are still checked): for machines where the
harness itself has no route while its runs do, and for tests without a mock endpoint. Checks of
several agents run in parallel.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from bench import settings
from bench.agents.credentials import ANTHROPIC, GEMINI, Credential, Need

TIMEOUT_S = 8.0
MAX_BODY = 8 * 2**20  # a model list is a few hundred KB at most


@dataclass(frozen=True)
class Probe:
    """What the endpoint answered.

    An HTTP ``status`` (None: no answer, ``error`` says why), the time it took, and the models
    listed (None: no list, or only part of one).
    """

    url: str
    status: int | None
    latency_s: float
    error: str | None = None
    models: tuple[str, ...] | None = None

    def describe(self) -> str:
        """The answer as a few words for the table of ``bench agents check``.

        ``HTTP 200 in 0.21 s`` or ``no answer: connection refused``.
        """
        if self.status is None:
            return f"no answer: {self.error}"
        return f"HTTP {self.status} in {self.latency_s:.2f} s"


def enabled() -> bool:
    """False when ``BENCH_API_CHECK=0`` (module docstring)."""
    return settings.API_CHECK.get()


def models_url(need: Need) -> str:
    """The model list of ``need``'s API at its base URL.

    For OpenAI-compatible APIs the base URL includes ``/v1``.
    """
    base = need.base_url.rstrip("/")
    if need.api == ANTHROPIC:
        return base + ("/models" if base.endswith("/v1") else "/v1/models") + "?limit=1000"
    if need.api == GEMINI:
        return base + ("/models" if base.endswith("/v1beta") else "/v1beta/models") + "?pageSize=1000"
    return base + "/models"


def _headers(need: Need, cred: Credential | None) -> dict[str, str]:
    headers = {"Accept": "application/json", "User-Agent": "1gc-7rc-bench-preflight"}
    if need.api == ANTHROPIC:
        headers["anthropic-version"] = "2023-06-01"
        if cred is not None and cred.source == "CLAUDE_CODE_OAUTH_TOKEN":
            headers["anthropic-beta"] = "oauth-2025-04-20"
    return {**headers, **(cred.headers if cred is not None else {})}


def _listed(need: Need, body: bytes) -> tuple[str, ...] | None:
    """The model names of a complete list (None: not a list we can read, or one page of several)."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("has_more") or data.get("nextPageToken"):
        return None
    if need.api == GEMINI:
        items = data.get("models")
        names = [str(m.get("name", "")).removeprefix("models/") for m in items or [] if isinstance(m, dict)]
    else:
        items = data.get("data")
        names = [str(m.get("id", "")) for m in items or [] if isinstance(m, dict)]
    return tuple(n for n in names if n) if isinstance(items, list) else None


def probe(need: Need, timeout: float = TIMEOUT_S) -> Probe:
    """Ask ``need``'s endpoint for its model list with its credential.

    The module docstring says what it proves.
    """
    url = models_url(need)
    req = urllib.request.Request(url, headers=_headers(need, need.credential), method="GET")
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read(MAX_BODY)
            return Probe(url, resp.status, time.monotonic() - t0, models=_listed(need, body))
    except urllib.error.HTTPError as e:
        return Probe(url, e.code, time.monotonic() - t0)
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        if isinstance(reason, socket.timeout | TimeoutError):
            why = f"no answer within {timeout:g} s"
        else:
            why = str(getattr(reason, "strerror", None) or reason) or type(reason).__name__
        return Probe(url, None, time.monotonic() - t0, error=why)


def offers(models: tuple[str, ...], model: str) -> bool:
    """The model, or a dated version of it, is in the list."""
    return any(m == model or m.startswith(model + "-") or m.startswith(model + "@") for m in models)


def problem(need: Need, found: Probe | None) -> str | None:
    """The one-line problem of ``need``, or None when it is ready.

    The credential's problem comes first, then what the endpoint answered. ``found`` None: the
    endpoint was not asked (only the credential is judged).
    """
    cred = need.credential
    if cred is None:
        return need.missing()
    if found is None:
        return None
    if found.status is None:
        return _unanswered(need, found)
    if found.status in (401, 403) and not cred.login:
        return f"{need.agent}: {cred.source} was refused by {need.base_url} (HTTP {found.status}): set a valid key"
    if found.status == 200 and need.model and found.models and not offers(found.models, need.model):
        shown = ", ".join(sorted(found.models)[:5]) + (", ..." if len(found.models) > 5 else "")
        return (
            f"{need.agent}: model {need.model!r} is not offered by {need.base_url} ({len(found.models)} listed: "
            f"{shown}): pick one with --model"
        )
    return None


def problems(need: Need, found: Probe | None) -> list[str]:
    """Every problem of ``need``, so that one report names them all.

    :func:`problem`, and for a need without a credential also an endpoint that does not answer
    (asked without a key, its answer proves only that it is there), so that one report names both.
    """
    first = problem(need, found)
    lines = [first] if first else []
    if need.credential is None and found is not None and found.status is None:
        lines.append(_unanswered(need, found))
    return lines


def _unanswered(need: Need, found: Probe) -> str:
    where = f"check {need.base_variable}" if need.base_variable else "check the network (a proxy needs HTTPS_PROXY)"
    return f"{need.agent}: the endpoint {need.base_url} does not answer ({found.error}): {where}"


def _key(need: Need) -> tuple[str, str | None]:
    return models_url(need), need.credential.source if need.credential is not None else None


def probe_all(needs: list[Need], timeout: float = TIMEOUT_S) -> list[Probe]:
    """:func:`probe` of each need, in parallel, one request per distinct URL and credential.

    A need without a credential is asked without one: whether its endpoint answers at all is still
    worth knowing before a run.
    """
    first: dict[tuple[str, str | None], Need] = {}
    for n in needs:
        first.setdefault(_key(n), n)
    if not first:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(first))) as pool:
        done = dict(zip(first, pool.map(lambda n: probe(n, timeout), first.values()), strict=True))
    return [done[_key(n)] for n in needs]


__all__ = ["Probe", "enabled", "models_url", "offers", "probe", "probe_all", "problem", "problems"]
