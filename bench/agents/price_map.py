"""``bench prices refresh``.

The price table (``bench/agents/prices.toml``) generated from LiteLLM's model cost map.

A hand-kept price table goes stale and wrong without anyone noticing (one of ours priced GPT-5.5 at
a third of its list price, and the same table enforces ``--max-cost``). LiteLLM's model cost map
(``model_prices_and_context_window.json``: USD per token, the cached-read and cache-write rates
separate) is the table the field keeps up to date, and every LiteLLM wheel on PyPI bundles a copy
(``litellm/model_prices_and_context_window_backup.json``). Depending on the whole ``litellm``
package for one JSON file would be heavy, so this module downloads the wheel only when asked (``pip
download litellm==X --no-deps``), reads the map out of it, and writes the rows of the models we name
(:data:`WANTED`) in the project's own format, pinned: the table states the LiteLLM version, the
wheel's upload date on PyPI and the map's sha256.

A model the map lacks keeps a hand row (:data:`HAND`), marked ``hand = true`` with its source URL; a
model neither has is left out, and then refused under a budget (``--max-cost``), as any unpriced
model is. A user's own file (``$BENCH_PRICES``) overrides or adds rows at run time
(:mod:`bench.agents.pricing`).

    bench prices refresh                                  # the newest LiteLLM on PyPI
    bench prices refresh --litellm-version 1.110.2        # a given version
    bench prices refresh --from litellm-1.110.2-....whl   # a wheel already here (offline)
    bench prices refresh --from map.json --litellm-version 1.110.2 --date 2026-11-20   # a bare map
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from bench.agents.base import AgentError

TABLE = Path(__file__).with_name("prices.toml")
MAP_IN_WHEEL = "litellm/model_prices_and_context_window_backup.json"
SIMPLE_INDEX = "https://pypi.org/simple/litellm/"

# Our model id -> the map's keys to take its row from, first found wins. The first key is the
# provider's own row; a later one is a cloud's or a reseller's row at the same model (said in the
# row's note). The paper's seven models (campaigns/paper.toml, Table 3) and the agents' defaults
# (bench/agents/*.py DEFAULT_MODEL) must all be here: tests/bench/agents/test_price_map.py checks
# it.
WANTED: dict[str, tuple[str, ...]] = {
    # the paper's models (Table 3)
    "claude-sonnet-4-6": ("claude-sonnet-4-6",),
    "claude-opus-4-6": ("claude-opus-4-6",),
    "claude-opus-4-7": ("claude-opus-4-7",),
    "gpt-5.5": ("gpt-5.5",),
    "kimi-k2.5": ("moonshot/kimi-k2.5",),
    "kimi-k2.6": ("moonshot/kimi-k2.6",),
    "qwen3.6-plus": ("dashscope/qwen3.6-plus", "together_ai/Qwen/Qwen3.6-Plus"),
    # the agents' other defaults and common others
    "gemini-2.5-pro": ("gemini/gemini-2.5-pro",),
    "gemini-2.5-flash": ("gemini/gemini-2.5-flash",),
    "gemini-2.5-flash-lite": ("gemini/gemini-2.5-flash-lite",),
    "gemini-3-pro-preview": ("gemini/gemini-3-pro-preview", "vertex_ai/gemini-3-pro-preview"),
    "claude-opus-4-5": ("claude-opus-4-5",),
    "claude-opus-4-1": ("claude-opus-4-1", "anthropic.claude-opus-4-1-20250805-v1:0"),
    "claude-opus-4": ("claude-opus-4-20250514", "anthropic.claude-opus-4-20250514-v1:0"),
    "claude-sonnet-4-5": ("claude-sonnet-4-5",),
    "claude-sonnet-4": ("claude-sonnet-4-20250514", "anthropic.claude-sonnet-4-20250514-v1:0"),
    "claude-haiku-4-5": ("claude-haiku-4-5",),
    "claude-3-7-sonnet": ("claude-3-7-sonnet-20250219", "anthropic.claude-3-7-sonnet-20250219-v1:0"),
    "claude-3-5-haiku": ("claude-3-5-haiku-20241022", "anthropic.claude-3-5-haiku-20241022-v1:0"),
    "gpt-5.2": ("gpt-5.2",),
    "gpt-5.1": ("gpt-5.1",),
    "gpt-5": ("gpt-5",),
    "gpt-5-codex": ("gpt-5-codex",),
    "gpt-5-mini": ("gpt-5-mini",),
    "gpt-5-nano": ("gpt-5-nano",),
    "gpt-4.1": ("gpt-4.1",),
    "gpt-4o": ("gpt-4o",),
    "o3": ("o3",),
    "o4-mini": ("o4-mini",),
    "kimi-k2": ("moonshot/kimi-k2-0905-preview", "vercel_ai_gateway/moonshotai/kimi-k2"),
    "kimi-k2-thinking": ("moonshot/kimi-k2-thinking", "bedrock/moonshotai.kimi-k2-thinking"),
    "qwen-plus": ("dashscope/qwen-plus",),
    "qwen3-max": ("dashscope/qwen3-max",),
    "qwen3-coder-plus": ("dashscope/qwen3-coder-plus",),
    "deepseek-chat": ("deepseek/deepseek-chat",),
    "deepseek-reasoner": ("deepseek/deepseek-reasoner",),
}

# Rows for models the map lacks, kept by hand: model -> (input, cached_input, output per 1M tokens,
# date, url, note). None today: every model of WANTED is in LiteLLM 1.110.2's map. A row here is
# used only where the map has none.
HAND: dict[str, tuple[float, float, float, str, str, str]] = {}


@dataclass(frozen=True)
class MapFile:
    """A LiteLLM cost map as read, with what pins it.

    The LiteLLM version, the date it was published (the wheel's upload to PyPI) and where it came
    from.
    """

    rows: dict[str, dict]
    version: str
    date: str
    origin: str  # the wheel's file name, or the JSON file's path
    sha256: str  # of the map's bytes


_ABOVE = re.compile(r"^input_cost_per_token_above_(\d+k)_tokens$")


def _usd_per_million(per_token: object) -> float | None:
    """A per-token rate as USD per 1M tokens (rounded to kill binary noise: 5e-06 -> 5.0).

    None if absent.
    """
    if not isinstance(per_token, int | float) or isinstance(per_token, bool) or per_token < 0:
        return None
    return round(per_token * 1e6, 6)


def row_of(model: str, key: str, entry: dict, provider_key: str) -> dict | None:
    """Our row for ``model`` from the map's ``entry`` at ``key`` (USD per 1M tokens), or None.

    None when the entry has no input and output price. A tiered entry gives its first tier; what the
    row leaves out is said in its note.
    """
    notes = []
    src = entry
    tiers = entry.get("tiered_pricing")
    if "input_cost_per_token" not in entry and isinstance(tiers, list) and tiers and isinstance(tiers[0], dict):
        src = tiers[0]
        upper = (src.get("range") or [0, 0])[-1]
        notes.append(f"first tier (prompts up to {int(upper) // 1000}k tokens); larger prompts cost more")
    tin, tout = _usd_per_million(src.get("input_cost_per_token")), _usd_per_million(src.get("output_cost_per_token"))
    if tin is None or tout is None:
        return None
    cached = _usd_per_million(src.get("cache_read_input_token_cost"))
    if cached is None:
        cached = tin
        notes.append("the map has no cached-input rate: cached tokens billed as input")
    row: dict = {"input": tin, "cached_input": cached, "output": tout}
    write = _usd_per_million(src.get("cache_creation_input_token_cost"))
    if write:  # 0 or absent: cache writes billed as input (a 0 would make them free)
        row["cache_write"] = write
    above = sorted({m.group(1) for k in entry if (m := _ABOVE.search(k))}, key=lambda t: int(t[:-1]))
    if above and src is entry:  # a tiered row's note says it already
        notes.append(f"prompts above {above[0]} tokens cost more (ignored)")
    if key != provider_key:
        notes.append(f"the map has no {provider_key!r} row: {entry.get('litellm_provider', key)}'s price")
    row["key"] = key
    if isinstance(entry.get("source"), str) and entry["source"].startswith("https://"):
        row["url"] = entry["source"]
    if notes:
        row["note"] = "; ".join(notes)
    return row


def extract(cost_map: MapFile, wanted: dict[str, tuple[str, ...]] | None = None) -> tuple[dict[str, dict], list[str]]:
    """Our rows for ``wanted`` from the map, with :data:`HAND` rows where it has none.

    ``wanted`` defaults to :data:`WANTED`. Also returns the models neither has (left out: unpriced).
    """
    wanted = WANTED if wanted is None else wanted
    rows, missing = {}, []
    for model, keys in wanted.items():
        found = (row_of(model, k, cost_map.rows[k], keys[0]) for k in keys if isinstance(cost_map.rows.get(k), dict))
        row = next((r for r in found if r is not None), None)
        if row is None and model in HAND:
            tin, cached, tout, date, url, note = HAND[model]
            row = {"input": tin, "cached_input": cached, "output": tout, "hand": True, "date": date, "url": url}
            row["note"] = f"not in LiteLLM {cost_map.version}'s map: kept by hand; {note}".rstrip("; ")
        if row is None:
            missing.append(model)
        else:
            rows[model] = row
    return rows, missing


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(float(value))
    return json.dumps(str(value), ensure_ascii=False)  # a TOML basic string: JSON's escapes are TOML's


def render(cost_map: MapFile, rows: dict[str, dict], missing: list[str]) -> str:
    """The table's text (TOML).

    A header saying what generated it and from what, then one table per model.
    """
    lines = [
        "# The price table: USD per 1M tokens, per model. GENERATED by `bench prices refresh` from LiteLLM's",
        "# model cost map: do not edit by hand. To change which models it holds, edit WANTED (or HAND) in",
        "# bench/agents/price_map.py and refresh; to override or add a price for your own runs, write a file of",
        '# the same [models."id"] tables and point $BENCH_PRICES at it (docs/agents-and-credentials.md).',
        "",
        "[source]",
        f"name = {_toml_value('LiteLLM model cost map (model_prices_and_context_window.json)')}",
        f"version = {_toml_value(cost_map.version)}",
        f"date = {_toml_value(cost_map.date)}",
        f"file = {_toml_value(cost_map.origin)}",
        f"sha256 = {_toml_value(cost_map.sha256)}",
        f"url = {_toml_value(f'https://pypi.org/project/litellm/{cost_map.version}/')}",
    ]
    if missing:
        lines.append(f"missing = [{', '.join(_toml_value(m) for m in missing)}]  # in neither the map nor HAND")
    for model, row in rows.items():
        lines += ["", f"[models.{_toml_value(model)}]"]
        lines += [f"{field} = {_toml_value(value)}" for field, value in row.items()]
    return "\n".join(lines) + "\n"


def read_json(path: Path, version: str, date: str) -> MapFile:
    """A bare map file (the JSON), with the LiteLLM version and date it is from.

    A bare file does not say them.
    """
    data = path.read_bytes()
    try:
        rows = json.loads(data)
    except json.JSONDecodeError as e:
        raise AgentError(f"{path} is not JSON ({e.msg} at line {e.lineno}): give LiteLLM's cost map") from None
    if not isinstance(rows, dict):
        raise AgentError(f"{path}: expected LiteLLM's cost map (an object of model -> prices)")
    return MapFile(rows, version, date, str(path), hashlib.sha256(data).hexdigest())


def read_wheel(wheel: Path, date: str | None = None) -> MapFile:
    """The map bundled in a LiteLLM wheel, with its version and date.

    The version comes from the wheel's metadata and the date from PyPI (the wheel's upload time, the
    file's sha256 checked) unless ``date`` is given.
    """
    try:
        with zipfile.ZipFile(wheel) as z:
            data = z.read(MAP_IN_WHEEL)
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            version = next(
                line.split(":", 1)[1].strip()
                for line in z.read(meta).decode().splitlines()
                if line.startswith("Version:")
            )
    except (zipfile.BadZipFile, KeyError, StopIteration) as e:
        raise AgentError(f"{wheel} is not a LiteLLM wheel with {MAP_IN_WHEEL} ({e})") from None
    date = date or upload_date(wheel)
    return MapFile(json.loads(data), version, date, f"{wheel.name}: {MAP_IN_WHEEL}", hashlib.sha256(data).hexdigest())


def upload_date(wheel: Path) -> str:
    """The day PyPI received this wheel (YYYY-MM-DD), from PyPI's JSON index, by its sha256."""
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    request = urllib.request.Request(SIMPLE_INDEX, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            files = json.load(r)["files"]
    except (OSError, ValueError, KeyError) as e:
        raise AgentError(f"PyPI's index ({SIMPLE_INDEX}) could not be read for the date ({e}): give --date") from e
    for f in files:
        if f.get("filename") == wheel.name and f.get("hashes", {}).get("sha256") == digest and f.get("upload-time"):
            return str(f["upload-time"])[:10]
    raise AgentError(f"{wheel.name} with sha256 {digest[:12]}... is not on PyPI's index: give --date")


def download(version: str | None, folder: Path) -> Path:
    """``pip download litellm[==version] --no-deps`` into ``folder``.

    The wheel, without installing it.
    """
    spec = f"litellm=={version}" if version else "litellm"
    cmd = [sys.executable, "-m", "pip", "download", spec, "--no-deps", "--only-binary", ":all:", "-d", str(folder)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    wheels = sorted(folder.glob("litellm-*.whl"))
    if done.returncode != 0 or not wheels:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no wheel"]
        raise AgentError(f"pip download {spec} failed: {tail[0]}")
    return wheels[0]


def refresh(
    source: Path | None = None, version: str | None = None, date: str | None = None, out: Path = TABLE
) -> tuple[MapFile, dict[str, dict], list[str]]:
    """Read the map, extract our rows and write the table to ``out``.

    A wheel or a JSON file given, else the wheel of ``version`` from PyPI.
    """
    if source is not None and source.suffix == ".json":
        if not version or not date:
            raise AgentError(f"{source} is a bare map: say which LiteLLM it is from (--litellm-version X --date DAY)")
        cost_map = read_json(source, version, date)
    elif source is not None:
        cost_map = read_wheel(source, date)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            cost_map = read_wheel(download(version, Path(tmp)), date)
    rows, missing = extract(cost_map)
    out.write_text(render(cost_map, rows, missing))
    return cost_map, rows, missing


def cmd_prices(args: argparse.Namespace) -> int:
    """Run ``bench prices``: print the table in force, or refresh it from LiteLLM's map."""
    if args.prices_command != "refresh":
        from bench.agents import pricing

        print(pricing.summary())
        return 0
    source = Path(args.source) if args.source else None
    if source is not None and not source.is_file():
        raise AgentError(f"--from {source}: no such file (give a LiteLLM wheel or its cost map JSON)")
    cost_map, rows, missing = refresh(source, args.litellm_version, args.date, Path(args.out))
    print(f"{args.out}: {len(rows)} models from LiteLLM {cost_map.version}'s cost map of {cost_map.date}")
    for model in missing:
        print(f"  not in the map: {model} (left out: refused under --max-cost until a row is added)")
    return 0


def add_cli(sub: argparse._SubParsersAction) -> None:
    """``bench prices`` (the table in force, with its source) and ``bench prices refresh``."""
    s = sub.add_parser("prices", help="the price table in force (source, version, rows); refresh it from LiteLLM")
    s.set_defaults(func=cmd_prices, prices_command=None)
    psub = s.add_subparsers(dest="prices_command")
    r = psub.add_parser("refresh", help="regenerate bench/agents/prices.toml from LiteLLM's model cost map")
    r.add_argument("--from", dest="source", metavar="FILE", help="a LiteLLM wheel, or its cost map JSON")
    r.add_argument("--litellm-version", metavar="X", help="the LiteLLM version (default: the newest on PyPI)")
    r.add_argument("--date", metavar="YYYY-MM-DD", help="the map's date (default: the wheel's upload to PyPI)")
    r.add_argument("--out", default=str(TABLE), metavar="FILE", help="where to write the table (default: %(default)s)")
    r.set_defaults(func=cmd_prices)
