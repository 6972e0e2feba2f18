"""Which answers of the model API cannot heal.

The run is stopped at the first one, not after its budget.

Why: a CLI retries a refused key (Claude Code: "API error 401 (authentication_failed), retry 3/10
... 9/10") until the health window (:mod:`bench.agents.health`, 3 min) or the budget ends it; at the
paper's 40-minute budget a campaign would spend minutes per cell on a key that will never work. The
gateway sees the upstream's status before the CLI does, so it judges each answer here
(:func:`judge`) and stops the run at the first that cannot heal
(:class:`bench.gateway.proxy.Gateway` calls the watch's early end; the run is recorded
``interrupted``, an infrastructure failure that names the error, and a campaign does not run the
cell again until the credential changes: :mod:`bench.campaign.job`).

What cannot heal, in the answer to a model request (Messages, Responses, Chat Completions,
generateContent; a side call such as a model list or an account check may be refused while the model
is served), read from the vendors' documented error shapes:

- ``auth``: 401 (Anthropic ``authentication_error``, OpenAI ``invalid_api_key``, Gemini
  ``UNAUTHENTICATED``), and Gemini's 400 for a bad key (``API_KEY_INVALID``, "API key not valid");
- ``permission``: 403 (Anthropic ``permission_error``, OpenAI's unsupported region or project,
  Gemini ``PERMISSION_DENIED``);
- ``model``: 404 (Anthropic ``not_found_error`` "model: ...", OpenAI ``model_not_found``, Gemini
  ``NOT_FOUND`` "models/... is not found"): the model does not exist for this key.

Everything else keeps today's behaviour: 429, 5xx, timeouts and refused connections heal or not
within the health window; a 400 is the request's fault (a prompt too long), not the account's.

**Only before the model has answered.** Every action of the agent follows a model answer (its tool
calls come in one), so a refusal before the run's first successful model request is the CLI's and
the account's, never the agent's. After it, the agent could provoke one (a second credential header
beside the run's token, a request naming a model that does not exist) to turn its own failure into
an infrastructure failure that is not run again; so once the model has answered, a refusal is left
to the health window, as before. A key revoked mid-run is rare; a key refused from the start, the
case that burned the budget, is stopped at once.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from bench import redact
from bench.gateway.usage import api_of

ERROR_BODY_MAX = 8 << 10  # bytes of an error answer read for its type and message
# The CLI's grace after the stop's SIGTERM (the budget's grace, 30 s by default, is owed to scripts
# writing a checkpoint): the model never answered, so nothing of the agent's runs. Claude Code
# 2.1.197 went on retrying for 5 to 8 s after its SIGTERM, then exited
# (tests/bench/agents/test_clis.py, four runs on the shared 2-core machine); a CLI that ignored
# SIGTERM would otherwise be killed only 30 s after the refusal.
STOP_GRACE_S = 5.0
_CODE_ASSIST_MODEL = re.compile(r"/v1internal:(?:stream)?[gG]enerateContent$")
_BAD_KEY = re.compile(r"API_KEY_INVALID|api key not valid|invalid[ _-]?api[ _-]?key", re.I)
# OpenAI's 401 echoes part of the key ("Incorrect API key provided: sk-abc***wxyz"): the echo is
# not kept
_ECHOED_KEY = re.compile(r"(key provided:\s*)\S+", re.I)
WHAT = {
    "auth": "refused the run's credential",
    "permission": "refused the run's credential access to this model or API",
    "model": "does not know the run's model",
}


@dataclass(frozen=True)
class Refusal:
    """One answer that cannot heal.

    Its kind (``auth``, ``permission``, ``model``), HTTP status and the API's own error, as
    ``type: message`` (credentials removed, 200 characters at most).
    """

    kind: str
    status: int
    error: str

    def to_dict(self) -> dict:
        """The refusal as the gateway's line for the request records it."""
        return {"kind": self.kind, "status": self.status, "error": self.error}


def model_request(method: str, path: str) -> bool:
    """Whether a request asks the model for an answer.

    Messages, Responses, Chat Completions, generateContent.
    """
    p = path.split("?", 1)[0]
    return api_of(method, path) is not None or (method == "POST" and bool(_CODE_ASSIST_MODEL.search(p)))


def judge(method: str, path: str, status: int, body: bytes) -> Refusal | None:
    """The refusal that cannot heal in this upstream answer, or None.

    Read from its status and the start of its body. Only a model request's answer is judged: a CLI's
    side calls may be refused while its model requests are served (Codex under a ChatGPT login:
    ``GET /backend-api/wham/usage`` answered 401, tests/bench/gateway/test_proxy.py).
    """
    if status not in (400, 401, 403, 404) or not model_request(method, path):
        return None
    error = describe(body)
    if status == 401:
        return Refusal("auth", status, error)
    if status == 403:
        return Refusal("permission", status, error)
    if status == 404:
        return Refusal("model", status, error)
    if status == 400 and _BAD_KEY.search(body[:ERROR_BODY_MAX].decode("utf-8", "replace")):
        return Refusal("auth", status, error)
    return None


def describe(body: bytes) -> str:
    """The API's error as ``type: message`` from its JSON body; never a credential.

    OpenAI's ``error.code`` first, the most precise, then Anthropic's ``error.type``, Gemini's
    ``error.status`` and its first detail's reason; else the body's first characters.
    """
    text = body[:ERROR_BODY_MAX].decode("utf-8", "replace")
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, dict):
        kind = next((str(err[k]) for k in ("code", "type", "status") if isinstance(err.get(k), str)), "")
        reasons = [d.get("reason") for d in err.get("details") or [] if isinstance(d, dict) and d.get("reason")]
        message = str(err.get("message") or "")
        text = ": ".join(p for p in (kind, *map(str, reasons[:1]), message) if p)
    elif isinstance(err, str):
        text = err
    text = _ECHOED_KEY.sub(r"\1[REDACTED]", " ".join(text.split()))
    return redact.text(text)[:200] if text else "no error body"


__all__ = ["ERROR_BODY_MAX", "STOP_GRACE_S", "WHAT", "Refusal", "describe", "judge", "model_request"]
