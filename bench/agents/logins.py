"""The CLIs' stored logins.

Found, checked for what can be seen without asking anyone, and described.

Beside API keys, researchers run the CLIs on their subscriptions' logins: Claude Code's
``CLAUDE_CODE_OAUTH_TOKEN`` (a variable, from ``claude setup-token``:
:mod:`bench.agents.credentials` reads it), Codex's ``auth.json`` (``codex login``: a ChatGPT login,
or a stored API key) and Gemini CLI's ``~/.gemini/oauth_creds.json`` (``gemini``, then ``/auth``). A
login file is given to its own agent's sandbox read-only (the adapters' ``login_files``), so a CLI
there cannot refresh it for good: a login that has expired, or cannot be read, is one line saying
what to run, before a run starts. Kept apart from the adapters and from
:mod:`bench.agents.credentials`, which both read it (no import circle).
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

# Codex refreshes a ChatGPT login whose access token expires within 5 minutes (or, without an
# expiry, whose last refresh is older than 8 days: codex-rs login/src/auth/manager.rs); in the
# sandbox that refresh cannot succeed
CODEX_REFRESH_WINDOW_S, CODEX_REFRESH_DAYS = 300, 8
CHATGPT_BACKEND = "https://chatgpt.com/backend-api/codex"  # where Codex sends a ChatGPT login's model requests
CODE_ASSIST = "https://cloudcode-pa.googleapis.com"  # where Gemini CLI sends a Google login's model requests


@dataclass(frozen=True)
class Credential:
    """A credential found for an agent, and where it came from.

    ``kind`` (api key, gateway token, ... login), ``source`` (a variable or a file); the headers for
    the endpoint check are kept out of repr and never printed.
    """

    kind: str
    source: str
    headers: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    login: bool = False  # a subscription login: the model list may refuse it, so a 401 is not judged
    file: Path | None = None  # the login's file (given to the sandbox read-only), None for a variable

    def __str__(self) -> str:
        """What ``bench agents check`` shows.

        ``API key OPENAI_API_KEY``, ``login CLAUDE_CODE_OAUTH_TOKEN (Claude)``, ``login
        ~/.codex/auth.json (ChatGPT)``: which credential a run will use, never its value.
        """
        where = _shown(self.source)
        if self.login:
            return f"login {where} ({self.kind.removesuffix(' login')})"
        return f"API key {where}" if self.kind == "api key" else f"{self.kind} {where}"


def _shown(source: str) -> str:
    """A file under the user's home as ``~/...`` (the check's column stays short).

    A variable as it is.
    """
    home = str(Path.home())
    return "~" + source[len(home) :] if source.startswith(home + os.sep) else source


def _jwt_claims(token: str) -> dict:
    """The claims of a JWT, read without checking its signature (only its expiry is wanted).

    {} if not a JWT.
    """
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return {}
    return claims if isinstance(claims, dict) else {}


def _age_days(stamp: object) -> float | None:
    """Days since an RFC 3339 time (``last_refresh``); None when it cannot be read."""
    from datetime import datetime

    try:
        then = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
        return (time.time() - then.timestamp()) / 86400
    except (TypeError, ValueError):
        return None


def _read_json(path: Path) -> tuple[dict | None, str | None]:
    """The file's JSON object and what is wrong with it, as a pair.

    (the object, None), (None, None) when there is no file, or (None, what is wrong with it).
    """
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None, None
    except OSError as e:
        return None, f"cannot be read ({e.strerror or e})"
    except ValueError:
        return None, "is not valid JSON"
    return (data, None) if isinstance(data, dict) else (None, "is not a JSON object")


def codex_login(env: Mapping[str, str], home: Path) -> tuple[list[Credential], str | None]:
    """Codex's stored login, with what is wrong with it when it is there but unusable.

    ``$CODEX_HOME/auth.json`` (default ``~/.codex/auth.json``): a ChatGPT login (tokens) or a stored
    API key.
    """
    folder = Path(env["CODEX_HOME"]) if env.get("CODEX_HOME") else home / ".codex"
    path = folder / "auth.json"
    again = f"log in again with `codex login` (it writes {_shown(str(path))})"
    data, wrong = _read_json(path)
    if data is None:
        return [], f"the Codex login {_shown(str(path))} {wrong}: {again}" if wrong else None
    tokens = data.get("tokens") if isinstance(data.get("tokens"), dict) else {}
    if data.get("auth_mode") != "apikey" and (tokens or data.get("auth_mode") == "chatgpt"):
        access = tokens.get("access_token")
        if not isinstance(access, str) or not access or not tokens.get("refresh_token"):
            return [], f"the ChatGPT login {_shown(str(path))} has no access or refresh token: {again}"
        exp = _jwt_claims(access).get("exp")
        if isinstance(exp, int | float) and exp <= time.time() + CODEX_REFRESH_WINDOW_S:
            when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(exp))
            return [], f"the ChatGPT login {_shown(str(path))} expired ({when}): {again}"
        age = _age_days(data.get("last_refresh")) if not isinstance(exp, int | float) else None
        if age is not None and age > CODEX_REFRESH_DAYS:
            return [], f"the ChatGPT login {_shown(str(path))} is {age:.0f} days old (Codex refreshes it): {again}"
        cred = Credential("ChatGPT login", str(path), {"Authorization": f"Bearer {access}"}, True, path)
        return [cred], None
    if isinstance(data.get("OPENAI_API_KEY"), str) and data["OPENAI_API_KEY"]:
        key = data["OPENAI_API_KEY"]
        return [Credential("api key", str(path), {"Authorization": f"Bearer {key}"}, file=path)], None
    return [], f"the Codex login {_shown(str(path))} holds neither tokens nor an API key: {again}"


def gemini_login(home: Path) -> tuple[list[Credential], str | None]:
    """Gemini CLI's Google login (``~/.gemini/oauth_creds.json``), if it holds a refresh token.

    The file is written by ``gemini`` and its ``/auth``. It must hold a refresh token, since the
    access token in it lasts an hour and the CLI refreshes it at the start.
    """
    path = home / ".gemini" / "oauth_creds.json"
    again = f"run `gemini`, then /auth (Login with Google), to write {_shown(str(path))} again"
    data, wrong = _read_json(path)
    if data is None:
        return [], f"the Google login {_shown(str(path))} {wrong}: {again}" if wrong else None
    if not isinstance(data.get("refresh_token"), str) or not data["refresh_token"]:
        return [], f"the Google login {_shown(str(path))} has no refresh token: {again}"
    return [Credential("Google login", str(path), {}, True, path)], None


__all__ = ["CHATGPT_BACKEND", "CODE_ASSIST", "Credential", "codex_login", "gemini_login"]
