"""What each LLM agent needs to reach its model.

Which API, at which base URL, with which credential.

Checked before a run creates anything (:mod:`bench.preflight`) and shown by ``bench agents check``:
a CLI started without its key does not say which variable to set (Claude Code prints "Not logged in
· Please run /login"), and one without a route retries for its whole budget (Codex:
"Reconnecting..."), so that a campaign would fill with false agent failures. The rules per CLI, read
from each CLI's documentation and its pinned release (the variable names are in the binaries):

- ``claude-code``: ``ANTHROPIC_API_KEY`` (sent as ``x-api-key``), ``ANTHROPIC_AUTH_TOKEN`` (a
  gateway's bearer token) or ``CLAUDE_CODE_OAUTH_TOKEN`` (a Claude subscription login, from ``claude
  setup-token``), in the order Claude Code prefers them; base URL ``ANTHROPIC_BASE_URL`` (without
  ``/v1``).
- ``codex``: ``OPENAI_API_KEY`` or ``CODEX_API_KEY``, or a ChatGPT login: ``auth.json`` in
  ``CODEX_HOME`` (default ``~/.codex``) with ``tokens.access_token`` (or a stored
  ``OPENAI_API_KEY``). With ``OPENAI_BASE_URL`` the adapter's own provider reads ``OPENAI_API_KEY``
  only.
- ``gemini``: ``GEMINI_API_KEY``, or a Google login: ``~/.gemini/oauth_creds.json``.
- ``opencode`` and ``aider``: the key of the model's provider (its ``provider/`` prefix):
  ``openrouter/`` -> ``OPENROUTER_API_KEY``, ``openai/`` and ``bench/`` -> ``OPENAI_API_KEY``
  (``bench/`` also needs ``OPENAI_BASE_URL``), ``anthropic/`` -> ``ANTHROPIC_API_KEY``. A provider
  without a rule is not checked.
- ``generic`` and the offline agents (baseline, command, optuna): nothing to check.

A credential found is described by its kind and where it came from, never by its value. A login
stored in a file (Codex's ``auth.json``, Gemini's ``oauth_creds.json``) is checked for what can be
seen without asking anyone: it parses, it holds its tokens, and (Codex) its access token has not
expired: a login that fails is one line saying what to run (``codex login``; ``gemini``, then
``/auth``), because a CLI in the sandbox cannot refresh it for good (the file is given read-only:
the adapters' ``login_files``; :mod:`bench.agents.logins`; docs/agents-and-credentials.md,
"Logins").
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bench import redact
from bench.agents.logins import CHATGPT_BACKEND, CODE_ASSIST, Credential, codex_login, gemini_login

# the APIs whose endpoint can be asked for its model list (bench.agents.api_probe)
ANTHROPIC, OPENAI, GEMINI, OPENROUTER = "anthropic", "openai", "gemini", "openrouter"
# Claude Code's model aliases, resolved by the CLI itself: not in any model list
CLAUDE_ALIASES = ("default", "sonnet", "opus", "haiku", "opusplan", "best")


@dataclass(frozen=True)
class Need:
    """What one agent with one model needs.

    Its API, base URL, model (as the API names it) and how to say what is missing (``hint``: what to
    set).
    """

    agent: str
    api: str | None  # one of ANTHROPIC, OPENAI, GEMINI, OPENROUTER; None: an API without a model list we know
    base_url: str
    base_variable: str | None  # the variable that moved base_url (None: the vendor's own API)
    model: str | None  # the model name to look for in the list (None: not checked)
    credentials: tuple[Credential, ...]  # what was found, preferred first
    hint: str  # what to set when nothing is found
    broken: str | None = None  # a login file found but unusable: what is wrong and what to run

    @property
    def credential(self) -> Credential | None:
        """The first credential found, or None."""
        return self.credentials[0] if self.credentials else None

    def missing(self) -> str:
        """The one-line problem when no credential is found.

        A broken login says what to run instead.
        """
        if self.broken:
            return f"{self.agent}: {self.broken}"
        return f"{self.agent}: no credential: set {self.hint}"


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


def _key(env: Mapping[str, str], var: str, header: str, prefix: str = "", kind: str = "api key") -> list[Credential]:
    value = (env.get(var) or "").strip()
    return [Credential(kind, var, {header: prefix + value})] if value else []


def _openai_like(agent: str, env: Mapping[str, str], model: str, default_base: str, *vars: str) -> Need:
    """An OpenAI-compatible API.

    The base URL from the first of ``vars`` set (else ``default_base``).
    """
    var = next((v for v in vars if env.get(v)), None)
    creds = _key(env, "OPENAI_API_KEY", "Authorization", "Bearer ")
    return Need(agent, OPENAI, env[var] if var else default_base, var, model, tuple(creds), "OPENAI_API_KEY")


def _provider_need(agent: str, model: str, env: Mapping[str, str], base_vars: tuple[str, ...]) -> Need | None:
    """The API opencode's and aider's ``provider/model`` names need, and its credential.

    A bare name is OpenAI's, as LiteLLM reads it. ``base_vars``: the variables that move the
    ``openai/`` and ``anthropic/`` APIs for this CLI (aider's; opencode's built-in providers keep
    the vendors' URLs, and its ``bench/`` provider is ``OPENAI_BASE_URL``).
    """
    provider, _, name = model.partition("/") if "/" in model else ("openai", "", model)
    if provider == "openrouter":
        creds = _key(env, "OPENROUTER_API_KEY", "Authorization", "Bearer ")
        return Need(agent, OPENROUTER, "https://openrouter.ai/api/v1", None, name, tuple(creds), "OPENROUTER_API_KEY")
    if provider == "anthropic":
        var = "ANTHROPIC_BASE_URL" if base_vars and env.get("ANTHROPIC_BASE_URL") else None
        base = env[var] if var else "https://api.anthropic.com"
        creds = _key(env, "ANTHROPIC_API_KEY", "x-api-key")
        return Need(agent, ANTHROPIC, base, var, name, tuple(creds), "ANTHROPIC_API_KEY")
    if provider == "bench":  # opencode's OpenAI-compatible endpoint; without the URL its own check refuses it
        return _openai_like(agent, env, name, "", "OPENAI_BASE_URL") if env.get("OPENAI_BASE_URL") else None
    if provider == "openai":
        return _openai_like(agent, env, name, "https://api.openai.com/v1", *base_vars)
    return None


def need_of(
    agent: str, model: str | None, env: Mapping[str, str] | None = None, home: Path | None = None
) -> Need | None:
    """What ``agent`` with ``model`` (None: its default) needs.

    None for an agent with nothing to check (offline, generic, a provider without a rule). ``env``
    and ``home`` default to this process's (tests give their own).
    """
    from bench.agents import aider, claude_code, codex, gemini, opencode

    env, home = _env(env), Path(home) if home is not None else Path.home()
    if agent == "claude-code":
        model = model or claude_code.DEFAULT_MODEL
        var = "ANTHROPIC_BASE_URL" if env.get("ANTHROPIC_BASE_URL") else None
        creds = [
            *_key(env, "ANTHROPIC_API_KEY", "x-api-key"),
            *_key(env, "ANTHROPIC_AUTH_TOKEN", "Authorization", "Bearer ", "gateway token"),
            *_key(env, "CLAUDE_CODE_OAUTH_TOKEN", "Authorization", "Bearer ", "Claude login"),
        ]
        creds = [Credential(c.kind, c.source, c.headers, c.source == "CLAUDE_CODE_OAUTH_TOKEN") for c in creds]
        bare = model.split("[", 1)[0]  # "sonnet[1m]": an alias with the long-context suffix
        return Need(
            agent,
            ANTHROPIC,
            env[var] if var else "https://api.anthropic.com",
            var,
            None if bare in CLAUDE_ALIASES else bare,
            tuple(creds),
            "ANTHROPIC_API_KEY (or CLAUDE_CODE_OAUTH_TOKEN from `claude setup-token`)",
        )
    if agent == "codex":
        model = model or codex.DEFAULT_MODEL
        if env.get("OPENAI_BASE_URL"):  # the adapter's provider "bench" reads OPENAI_API_KEY only
            creds = _key(env, "OPENAI_API_KEY", "Authorization", "Bearer ")
            return Need(agent, OPENAI, env["OPENAI_BASE_URL"], "OPENAI_BASE_URL", model, tuple(creds), "OPENAI_API_KEY")
        login, broken = codex_login(env, home)
        creds = [
            *_key(env, "OPENAI_API_KEY", "Authorization", "Bearer "),
            *_key(env, "CODEX_API_KEY", "Authorization", "Bearer "),
            *login,
        ]
        chatgpt = bool(creds) and creds[0].kind == "ChatGPT login"  # its model requests go to ChatGPT's backend
        base = CHATGPT_BACKEND if chatgpt else "https://api.openai.com/v1"
        hint = "OPENAI_API_KEY (or log in with `codex login`: ~/.codex/auth.json, or CODEX_HOME)"
        return Need(agent, OPENAI, base, None, model, tuple(creds), hint, broken)
    if agent == "gemini":
        model = model or gemini.DEFAULT_MODEL
        var = "GOOGLE_GEMINI_BASE_URL" if env.get("GOOGLE_GEMINI_BASE_URL") else None
        login, broken = gemini_login(home) if not var else ([], None)  # a base URL means the API key's API
        creds = [*_key(env, "GEMINI_API_KEY", "x-goog-api-key"), *login]
        google = bool(creds) and creds[0].login
        base = env[var] if var else CODE_ASSIST if google else "https://generativelanguage.googleapis.com"
        hint = "GEMINI_API_KEY (or log in with Google in `gemini`: ~/.gemini/oauth_creds.json)"
        return Need(agent, GEMINI, base, var, model, tuple(creds), hint, broken)
    if agent == "opencode":
        return _provider_need(agent, model or opencode.DEFAULT_MODEL, env, ())
    if agent == "aider":
        return _provider_need(agent, model or aider.DEFAULT_MODEL, env, ("OPENAI_BASE_URL", "OPENAI_API_BASE"))
    return None


def fingerprint(agent: str, model: str | None, env: Mapping[str, str] | None = None, home: Path | None = None) -> str:
    """What a run's model access is, as ``sha256:`` and 12 hex digits.

    The hash of the endpoint, the model and every credential value ``agent`` would find here
    (:func:`need_of`), or, for an agent without a rule (generic), of every credential value of the
    environment (:func:`bench.redact.env_secrets`). Never the key: a run whose key was refused
    records it, and a campaign runs that cell again only when the fingerprint of now differs (a key
    set, changed or logged in again: :mod:`bench.campaign.job`).
    """
    env = _env(env)
    need = need_of(agent, model, env, home)
    if need is not None:
        values = [need.base_url, need.model or ""]
        values += sorted(v for c in need.credentials for v in c.headers.values())
    else:
        values = sorted(redact.env_secrets(env))
    digest = hashlib.sha256(json.dumps([agent, *values]).encode()).hexdigest()
    return f"sha256:{digest[:12]}"


__all__ = ["CHATGPT_BACKEND", "CODE_ASSIST", "Credential", "Need", "fingerprint", "need_of"]
