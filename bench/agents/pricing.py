"""List prices of the models agents run on: a dollar figure for runs whose CLI reports no cost.

Codex CLI and Gemini CLI print token counts but no cost; OpenCode prints 0 for providers it has no
price for; Aider prints a cost only for models LiteLLM knows. :func:`cost` fills the gap from token
counts, and the metering gateway prices every request with it (and holds ``--max-cost`` with it).

Token semantics of :func:`cost`: ``tokens_input`` is every prompt token of the run, cached ones
included; ``tokens_cached`` is the part of it that was read from the provider's prompt cache (billed
at the cached-input price). Cache *writes* (``tokens_cache_write``, which only the metering gateway
sees) are billed at the row's ``cache_write`` rate (Anthropic: 1.25x input, the 5-minute cache);
long-context surcharges (GPT-5.5 above 272k prompt tokens, Gemini above 200k, Qwen tiers) are
ignored: treat the result as an estimate.

The rows are not kept by hand: ``prices.toml`` beside this module is generated from LiteLLM's model
cost map by ``bench prices refresh`` (:mod:`bench.agents.price_map`), pinned to a LiteLLM version
and the map's date (:data:`SOURCE`). A user's own file (``$BENCH_PRICES``: the same
``[models."id"]`` tables) overrides or adds rows: a negotiated price, a self-hosted model, a model
the map does not know yet. Every row says where (:attr:`Price.url`) and as of when
(:attr:`Price.date`) its prices held, and where it came from (:attr:`Price.origin`);
:func:`describe` puts them next to a figure.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from bench import settings
from bench.agents.base import AgentError

TABLE = Path(__file__).with_name("prices.toml")


class PriceFileError(AgentError):
    """A price file ($BENCH_PRICES, or the generated table) that cannot be read.

    The message says what to fix.
    """


@dataclass(frozen=True)
class Price:
    """USD per 1M tokens."""

    input: float
    cached_input: float
    output: float
    source: str  # "list price as of <date>, <url>"
    note: str = ""
    cache_write: float | None = None  # prompt-cache writes (Anthropic: 1.25x input, 5-minute cache); None: input
    origin: str = ""  # "LiteLLM 1.110.2 (2026-11-20): gpt-5.5", "kept by hand", "user file /path"

    @property
    def url(self) -> str:
        """Where the row's prices can be checked."""
        return self.source.rsplit(", ", 1)[-1]

    @property
    def date(self) -> str:
        """The date the row's prices were the list price (YYYY-MM-DD)."""
        m = re.search(r"\d{4}-\d{2}-\d{2}", self.source)
        return m.group(0) if m else ""


_FIELDS = {"input", "cached_input", "output", "cache_write", "key", "url", "note", "hand", "date"}


def _rows(data: dict, where: str, date: str, origin: str, url: str = "") -> dict[str, Price]:
    """``[models."id"]`` tables as Prices; ``date``, ``url``: the file's, where a row gives none."""
    models = data.get("models", {})
    if not isinstance(models, dict):
        raise PriceFileError(f'{where}: expected [models."<model id>"] tables')
    out = {}
    for model, row in models.items():
        at = f"{where}: [models.{model!r}]"
        if not isinstance(row, dict) or set(row) - _FIELDS:
            unknown = ", ".join(sorted(set(row) - _FIELDS)) if isinstance(row, dict) else "not a table"
            expected = "input, output, cached_input, cache_write, url, date, note"
            raise PriceFileError(f"{at}: unknown field(s) {unknown}; expected {expected}")
        nums = {}
        for field in ("input", "cached_input", "output", "cache_write"):
            value = row.get(field)
            if value is None and field in ("input", "output"):
                raise PriceFileError(f"{at}: {field} is missing (USD per 1M tokens)")
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
                raise PriceFileError(f"{at}: {field} = {value!r} is not a price (USD per 1M tokens, >= 0)")
            nums[field] = None if value is None else float(value)
        cached = nums["input"] if nums["cached_input"] is None else nums["cached_input"]
        link = str(row.get("url") or url or where)
        kept = "kept by hand" if row.get("hand") else origin + (f": {row['key']}" if row.get("key") else "")
        out[model] = Price(
            nums["input"], cached, nums["output"], f"list price as of {row.get('date') or date}, {link}",
            note=str(row.get("note", "")), cache_write=nums["cache_write"], origin=kept,
        )  # fmt: skip
    return out


def _load(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except OSError as e:
        raise PriceFileError(f"{path}: cannot be read ({e.strerror}): set $BENCH_PRICES to a price file") from None
    except tomllib.TOMLDecodeError as e:
        raise PriceFileError(f"{path} is not valid TOML ({e})") from None


_TABLE = _load(TABLE)
SOURCE: dict[str, str] = _TABLE["source"]  # version, date, file, sha256, url of the LiteLLM map it came from
# Keys are canonical model ids; lookup() also accepts provider prefixes, date suffixes and ALIASES.
PRICES: dict[str, Price] = _rows(
    _TABLE, str(TABLE), SOURCE["date"], f"LiteLLM {SOURCE['version']} ({SOURCE['date']})", SOURCE["url"]
)

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
    """A model name reduced to the key prices are looked up by.

    'openrouter/moonshotai/kimi-k2.6:free' -> 'kimi-k2-6'; 'claude-opus-4-5-20251101' ->
    'claude-opus-4-5'.
    """
    n = model.strip().lower().rsplit("/", 1)[-1].split(":", 1)[0]
    n = _BEDROCK.sub("", n).replace(".", "-").replace("_", "-")
    while (stripped := _SUFFIX.sub("", n)) != n:
        n = stripped
    return n


_INDEX: dict[str, str] = {_norm(k): k for k in PRICES}
_INDEX.update({_norm(a): k for a, k in ALIASES.items() if k in PRICES})  # a refresh may drop an alias's model
_USER: dict[tuple, tuple[dict[str, str], dict[str, Price]]] = {}  # (path, mtime, size) -> (index, rows)


def user_rows() -> tuple[dict[str, str], dict[str, Price]]:
    """The rows of the user's price file, with their index by normalised name.

    $BENCH_PRICES; none when unset. Read again only when the file changes (the gateway asks for
    every request).
    """
    try:
        path = settings.PRICES_FILE.get()
    except settings.SettingError as e:
        raise PriceFileError(f"{e}: point it at a price file, or unset it") from None
    if path is None:
        return {}, {}
    try:
        st = path.stat()
    except OSError as e:
        raise PriceFileError(f"BENCH_PRICES={path}: cannot be read ({e.strerror}): point it at a price file") from None
    stamp = (str(path), st.st_mtime_ns, st.st_size)
    if stamp not in _USER:
        rows = _rows(_load(path), str(path), "", f"user file {path}")
        _USER.clear()
        _USER[stamp] = ({_norm(k): k for k in rows}, rows)
    return _USER[stamp]


def lookup(model: str | None) -> tuple[str, Price] | None:
    """The (canonical id, Price) for a model name as a CLI or provider spells it; None if unknown.

    A row of the user's price file ($BENCH_PRICES) wins over the generated table's.

    Accepts provider prefixes ("anthropic/claude-opus-4-7", "openrouter/moonshotai/kimi-k2.6"),
    tags (":free"), Bedrock/Vertex ids ("us.anthropic.claude-opus-4-5-20251101-v1:0",
    "claude-opus-4-5@20251101"), date suffixes and dots or dashes in versions. No fuzzy matching:
    "gpt-5.3" is unknown rather than priced as "gpt-5".
    """
    if not model:
        return None
    name = _norm(model)
    key = _INDEX.get(name)
    index, rows = user_rows()
    for spelled in (name, _norm(key) if key else None):  # as asked, then as the table's row ("sonnet": its model)
        if spelled in index:
            return index[spelled], rows[index[spelled]]
    return (key, PRICES[key]) if key else None


def cost(
    model: str | None, tokens_input: int, tokens_output: int, tokens_cached: int = 0, tokens_cache_write: int = 0
) -> float | None:
    """USD for a run's tokens at list price; None for an unknown model.

    See the module doc for semantics; ``tokens_cache_write`` (part of ``tokens_input``) are billed
    at the row's cache-write rate.
    """
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
    """Which row priced ``model``, with its source, date and origin (or a sentence: none did).

    For example: "gpt-5.5: 5.0/0.5/30.0 USD per 1M tokens in/cached/out, list price as of
    2026-11-20, https://...; from LiteLLM 1.110.2 (2026-11-20): gpt-5.5".
    """
    found = lookup(model)
    if found is None:
        return (
            f"{model or 'no model'}: not in the price table (bench/agents/prices.toml, LiteLLM {SOURCE['version']}) "
            "nor in a $BENCH_PRICES file: cost unknown"
        )
    key, p = found
    note = f" ({p.note})" if p.note else ""
    return (
        f"{key}: {p.input:g}/{p.cached_input:g}/{p.output:g} USD per 1M tokens in/cached/out, list price as of "
        f"{p.date}, {p.url}; from {p.origin}{note}"
    )


def summary() -> str:
    """The table in force, as ``bench prices`` prints it.

    Where it came from, then one line per model (the user's rows first).
    """
    _, mine = user_rows()
    lines = [
        f"price table: bench/agents/prices.toml, generated from LiteLLM {SOURCE['version']}'s model cost map of "
        f"{SOURCE['date']} (sha256 {SOURCE['sha256'][:12]}..., {SOURCE['url']})",
        f"user file: {settings.PRICES_FILE.get()} ({len(mine)} rows, they win)" if mine else
        "user file: none ($BENCH_PRICES unset)",
        "",
        f"{'model':26} {'input':>8} {'cached':>8} {'write':>8} {'output':>8}  USD per 1M tokens; origin",
    ]  # fmt: skip
    for key, p in [*mine.items(), *((k, v) for k, v in PRICES.items() if k not in mine)]:
        write = "-" if p.cache_write is None else f"{p.cache_write:g}"
        lines.append(f"{key:26} {p.input:>8g} {p.cached_input:>8g} {write:>8} {p.output:>8g}  {p.origin}")
    return "\n".join(lines)
