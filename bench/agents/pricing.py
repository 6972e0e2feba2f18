"""List prices of the models agents run on, to put a dollar figure on runs whose CLI reports no cost.

Codex CLI and Gemini CLI print token counts but no cost; OpenCode prints 0 for providers it has no
price for; Aider prints a cost only for models LiteLLM knows. :func:`cost` fills the gap from token
counts. Claude Code's own ``total_cost_usd`` is always preferred where a CLI reports one.

Token semantics of :func:`cost`: ``tokens_input`` is every prompt token of the run, cached ones
included; ``tokens_cached`` is the part of it that was read from the provider's prompt cache (billed
at the cached-input price). Cache *writes* (``tokens_cache_write``, which only the metering gateway
sees) are billed at the row's ``cache_write`` rate (Anthropic: 1.25x input, the 5-minute cache);
long-context surcharges (Gemini and Claude above 200k prompt tokens, Qwen tiers) are ignored:
treat the result as an estimate.

NONE OF THESE ROWS IS VERIFIED (``verified=False``): they were written without web access, from the
most recent public list prices the author knew for the same or the closest earlier model. Several of
the paper's models (April 2026) are newer than that knowledge; their rows carry the price of the
closest predecessor and say so in ``note``. Check each row against its ``source`` before quoting a
cost, then set ``verified=True`` and update the date. Every row says where (:attr:`Price.url`) and as of
when (:attr:`Price.date`) its prices held; :func:`describe` puts both next to a figure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Price:
    """USD per 1M tokens."""

    input: float
    cached_input: float
    output: float
    source: str  # "list price as of <date>, <url>"
    verified: bool = False
    note: str = ""
    cache_write: float | None = None  # prompt-cache writes (Anthropic: 1.25x input, 5-minute cache); None: input

    @property
    def url(self) -> str:
        """Where the row's prices can be checked."""
        return self.source.rsplit(", ", 1)[-1]

    @property
    def date(self) -> str:
        """The date the row's prices were the list price (YYYY-MM-DD)."""
        m = re.search(r"\d{4}-\d{2}-\d{2}", self.source)
        return m.group(0) if m else ""


_ANTHROPIC = "https://www.anthropic.com/pricing#api"
_OPENAI = "https://openai.com/api/pricing/"
_MOONSHOT = "https://platform.moonshot.ai/docs/pricing/chat"
_QWEN = "https://www.alibabacloud.com/help/en/model-studio/models"
_GOOGLE = "https://ai.google.dev/gemini-api/docs/pricing"
_DEEPSEEK = "https://api-docs.deepseek.com/quick_start/pricing"


def _src(date: str, url: str) -> str:
    return f"list price as of {date}, {url}"


# Keys are canonical model ids; lookup() also accepts provider prefixes, date suffixes and ALIASES.
PRICES: dict[str, Price] = {
    # --- the paper's models (Table 3); all newer than the prices known here: check them ---
    "claude-sonnet-4-6": Price(
        3.00, 0.30, 15.00, _src("2025-09-29", _ANTHROPIC), cache_write=3.75, note="claude-sonnet-4-5 price"
    ),
    "claude-opus-4-6": Price(
        5.00, 0.50, 25.00, _src("2025-11-24", _ANTHROPIC), cache_write=6.25, note="claude-opus-4-5 price"
    ),
    "claude-opus-4-7": Price(
        5.00, 0.50, 25.00, _src("2025-11-24", _ANTHROPIC), cache_write=6.25, note="claude-opus-4-5 price"
    ),
    "gpt-5.5": Price(1.75, 0.175, 14.00, _src("2025-12-11", _OPENAI), note="gpt-5.2 price"),
    "kimi-k2.5": Price(0.60, 0.15, 2.50, _src("2025-09-05", _MOONSHOT), note="kimi-k2-0905 price"),
    "kimi-k2.6": Price(0.60, 0.15, 2.50, _src("2025-09-05", _MOONSHOT), note="kimi-k2-0905 price"),
    "qwen3.6-plus": Price(0.40, 0.08, 1.20, _src("2025-09-01", _QWEN), note="qwen-plus price, non-thinking output"),
    # --- common others ---
    "claude-opus-4-5": Price(5.00, 0.50, 25.00, _src("2025-11-24", _ANTHROPIC), cache_write=6.25),
    "claude-opus-4-1": Price(15.00, 1.50, 75.00, _src("2025-08-05", _ANTHROPIC), cache_write=18.75),
    "claude-opus-4": Price(15.00, 1.50, 75.00, _src("2025-05-22", _ANTHROPIC), cache_write=18.75),
    "claude-sonnet-4-5": Price(3.00, 0.30, 15.00, _src("2025-09-29", _ANTHROPIC), cache_write=3.75),
    "claude-sonnet-4": Price(3.00, 0.30, 15.00, _src("2025-05-22", _ANTHROPIC), cache_write=3.75),
    "claude-haiku-4-5": Price(1.00, 0.10, 5.00, _src("2025-10-15", _ANTHROPIC), cache_write=1.25),
    "claude-3-7-sonnet": Price(3.00, 0.30, 15.00, _src("2025-02-24", _ANTHROPIC), cache_write=3.75),
    "claude-3-5-haiku": Price(0.80, 0.08, 4.00, _src("2024-11-04", _ANTHROPIC), cache_write=1),
    "gpt-5.2": Price(1.75, 0.175, 14.00, _src("2025-12-11", _OPENAI)),
    "gpt-5.1": Price(1.25, 0.125, 10.00, _src("2025-11-13", _OPENAI)),
    "gpt-5": Price(1.25, 0.125, 10.00, _src("2025-08-07", _OPENAI)),
    "gpt-5-codex": Price(1.25, 0.125, 10.00, _src("2025-09-15", _OPENAI)),
    "gpt-5-mini": Price(0.25, 0.025, 2.00, _src("2025-08-07", _OPENAI)),
    "gpt-5-nano": Price(0.05, 0.005, 0.40, _src("2025-08-07", _OPENAI)),
    "gpt-4.1": Price(2.00, 0.50, 8.00, _src("2025-04-14", _OPENAI)),
    "gpt-4o": Price(2.50, 1.25, 10.00, _src("2024-10-01", _OPENAI)),
    "o3": Price(2.00, 0.50, 8.00, _src("2025-06-10", _OPENAI)),
    "o4-mini": Price(1.10, 0.275, 4.40, _src("2025-04-16", _OPENAI)),
    "kimi-k2": Price(0.60, 0.15, 2.50, _src("2025-09-05", _MOONSHOT)),
    "kimi-k2-thinking": Price(0.60, 0.15, 2.50, _src("2025-11-06", _MOONSHOT)),
    "qwen-plus": Price(0.40, 0.08, 1.20, _src("2025-09-01", _QWEN), note="0-256k tier, non-thinking output"),
    "qwen3-max": Price(1.20, 0.24, 6.00, _src("2025-09-24", _QWEN), note="0-32k tier"),
    "qwen3-coder-plus": Price(1.00, 0.20, 5.00, _src("2025-07-23", _QWEN), note="0-32k tier"),
    "gemini-3-pro-preview": Price(2.00, 0.20, 12.00, _src("2025-11-18", _GOOGLE), note="prompts <= 200k"),
    "gemini-2.5-pro": Price(1.25, 0.125, 10.00, _src("2025-06-17", _GOOGLE), note="prompts <= 200k"),
    "gemini-2.5-flash": Price(0.30, 0.03, 2.50, _src("2025-06-17", _GOOGLE)),
    "gemini-2.5-flash-lite": Price(0.10, 0.01, 0.40, _src("2025-07-22", _GOOGLE)),
    "deepseek-chat": Price(0.28, 0.028, 0.42, _src("2025-09-29", _DEEPSEEK), note="DeepSeek-V3.2"),
    "deepseek-reasoner": Price(0.28, 0.028, 0.42, _src("2025-09-29", _DEEPSEEK), note="DeepSeek-V3.2"),
}

# Other spellings -> a PRICES key (compared after normalisation, see _norm).
ALIASES: dict[str, str] = {
    "sonnet": "claude-sonnet-4-6",  # Claude Code's --model aliases at the time of the paper
    "opus": "claude-opus-4-7",
    "haiku": "claude-haiku-4-5",
    "claude-4-sonnet": "claude-sonnet-4",
    "claude-4-opus": "claude-opus-4",
    "kimi-k2-0905": "kimi-k2",
    "kimi-k2-0711": "kimi-k2",
    "qwen3-6-plus": "qwen3.6-plus",
    "qwen-3-6-plus": "qwen3.6-plus",
}

_SUFFIX = re.compile(r"(?:-\d{8}(?:-v\d+)?|-\d{4}-\d{2}-\d{2}|-latest|@\w+|\[[^\]]*\])$")
_BEDROCK = re.compile(r"^(?:[a-z]{2}\.)?(?:anthropic|openai|moonshot|moonshotai|qwen|meta)\.")


def _norm(model: str) -> str:
    """'openrouter/moonshotai/kimi-k2.6:free' -> 'kimi-k2-6'; 'claude-opus-4-5-20251101' -> 'claude-opus-4-5'."""
    n = model.strip().lower().rsplit("/", 1)[-1].split(":", 1)[0]
    n = _BEDROCK.sub("", n).replace(".", "-").replace("_", "-")
    while (stripped := _SUFFIX.sub("", n)) != n:
        n = stripped
    return n


_INDEX: dict[str, str] = {_norm(k): k for k in PRICES}
_INDEX.update({_norm(a): k for a, k in ALIASES.items()})


def lookup(model: str | None) -> tuple[str, Price] | None:
    """The (canonical id, Price) for a model name as a CLI or provider spells it; None if unknown.

    Accepts provider prefixes ("anthropic/claude-opus-4-7", "openrouter/moonshotai/kimi-k2.6"),
    tags (":free"), Bedrock/Vertex ids ("us.anthropic.claude-opus-4-5-20251101-v1:0",
    "claude-opus-4-5@20251101"), date suffixes and dots or dashes in versions. No fuzzy matching:
    "gpt-5.3" is unknown rather than priced as "gpt-5".
    """
    if not model:
        return None
    key = _INDEX.get(_norm(model))
    return (key, PRICES[key]) if key else None


def cost(
    model: str | None, tokens_input: int, tokens_output: int, tokens_cached: int = 0, tokens_cache_write: int = 0
) -> float | None:
    """USD for a run's tokens at list price; None for an unknown model. See the module doc for semantics;
    ``tokens_cache_write`` (part of ``tokens_input``) are billed at the row's cache-write rate."""
    found = lookup(model)
    if found is None:
        return None
    p = found[1]
    cached = max(0, min(tokens_cached, tokens_input))
    written = max(0, min(tokens_cache_write, tokens_input - cached))
    plain = tokens_input - cached - written
    rate = p.input if p.cache_write is None else p.cache_write
    usd = plain * p.input + cached * p.cached_input + written * rate + tokens_output * p.output
    return round(usd / 1e6, 6)


def describe(model: str | None) -> str:
    """Which row priced ``model``, with its source and date ("claude-opus-4-7: 5.0/0.5/25.0 USD per 1M tokens
    in/cached/out, list price of 2025-11-24, https://...; unverified"); a sentence saying so for an unknown model."""
    found = lookup(model)
    if found is None:
        return f"{model or 'no model'}: not in the price table (bench/agents/pricing.py): cost unknown"
    key, p = found
    state = "verified" if p.verified else "unverified"
    note = f" ({p.note})" if p.note else ""
    return (
        f"{key}: {p.input}/{p.cached_input}/{p.output} USD per 1M tokens in/cached/out, list price of {p.date}, "
        f"{p.url}; {state}{note}"
    )
