"""The price table generated from LiteLLM's model cost map (bench/agents/price_map.py, prices.toml) and the user's
own price file ($BENCH_PRICES, bench/agents/pricing.py).

The expected prices come from the map itself, not from the generator: tests/bench/fixtures/litellm/ holds the rows
of LiteLLM 1.110.2's map copied verbatim (USD per token), and the refresh test writes its own small map by hand."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from bench.agents import AGENTS, price_map, pricing
from bench.campaign import spec
from bench.cli import main

ROOT = Path(__file__).resolve().parents[3]
EXTRACT = json.loads((ROOT / "tests/bench/fixtures/litellm/cost-map-1.110.2-extract.json").read_text())["rows"]
# our model id -> its row's key in the map (the paper's seven models, Table 3)
PAPER_KEYS = {
    "claude-sonnet-4-6": "claude-sonnet-4-6",
    "claude-opus-4-6": "claude-opus-4-6",
    "claude-opus-4-7": "claude-opus-4-7",
    "gpt-5.5": "gpt-5.5",
    "kimi-k2.5": "moonshot/kimi-k2.5",
    "kimi-k2.6": "moonshot/kimi-k2.6",
    "qwen3.6-plus": "together_ai/Qwen/Qwen3.6-Plus",  # the map has no Alibaba (dashscope) row for it
}


def per_million(per_token: float) -> float:
    return round(per_token * 1e6, 6)


def test_the_table_states_its_source_and_version():
    table = tomllib.loads((ROOT / "bench/agents/prices.toml").read_text())
    assert table["source"]["version"] == "1.110.2" and table["source"]["date"] == "2026-11-20"
    assert table["source"]["sha256"] in EXTRACT_ABOUT  # the map the fixture was copied from
    assert pricing.SOURCE == table["source"]


EXTRACT_ABOUT = json.loads((ROOT / "tests/bench/fixtures/litellm/cost-map-1.110.2-extract.json").read_text())["_about"]


@pytest.mark.parametrize("model", list(PAPER_KEYS))
def test_each_paper_models_row_equals_the_map(model):
    """GPT-5.5 is 5/0.5/30 USD per 1M in/cached/out in the map (the hand-kept table said 1.75/0.175/14)."""
    row = EXTRACT[PAPER_KEYS[model]]
    p = pricing.PRICES[model]
    assert p.input == per_million(row["input_cost_per_token"])
    assert p.output == per_million(row["output_cost_per_token"])
    assert p.cached_input == per_million(row.get("cache_read_input_token_cost", row["input_cost_per_token"]))
    write = row.get("cache_creation_input_token_cost")
    assert p.cache_write == (per_million(write) if write else None)
    assert p.origin == f"LiteLLM 1.110.2 (2026-11-20): {PAPER_KEYS[model]}"


def test_gpt_5_5_by_hand():
    p = pricing.PRICES["gpt-5.5"]
    assert (p.input, p.cached_input, p.output, p.cache_write) == (5.0, 0.5, 30.0, None)
    assert pricing.cost("openai/gpt-5.5", 1_000_000, 100_000, 400_000) == pytest.approx(
        (600_000 * 5 + 400_000 * 0.5 + 100_000 * 30) / 1e6
    )


def test_every_model_the_agents_and_the_paper_name_has_a_price():
    """Else a run of it under --max-cost is refused (preflight.check_priced, the gateway's `unpriced`)."""
    named = [a.model for a in spec.load(ROOT / "campaigns/paper.toml").agents]
    named += [a.default_model for a in AGENTS.values() if a.default_model]
    assert len(named) == 7 + 5
    for model in named:
        assert pricing.lookup(model) is not None, model


def test_a_tiered_row_gives_its_first_tier():
    row = EXTRACT["dashscope/qwen3-max"]["tiered_pricing"][0]
    p = pricing.PRICES["qwen3-max"]
    assert (p.input, p.output) == (per_million(row["input_cost_per_token"]), per_million(row["output_cost_per_token"]))
    assert "first tier" in p.note


SMALL_MAP = {
    "sample_spec": {"input_cost_per_token": 0.0, "output_cost_per_token": 0.0},
    "plain": {"input_cost_per_token": 2e-06, "cache_read_input_token_cost": 2e-07, "output_cost_per_token": 8e-06,
              "cache_creation_input_token_cost": 2.5e-06, "source": "https://example.org/plain"},
    "reseller/second": {"input_cost_per_token": 1e-06, "output_cost_per_token": 4e-06},
    "tiered": {"tiered_pricing": [
        {"input_cost_per_token": 1e-06, "output_cost_per_token": 3e-06, "range": [0, 32000]},
        {"input_cost_per_token": 2e-06, "output_cost_per_token": 6e-06, "range": [32000, 1e6]},
    ]},
    "noprice": {"mode": "chat"},
}  # fmt: skip


def test_refresh_from_a_small_map_writes_the_right_rows(tmp_path, monkeypatch, capsys):
    path, out = tmp_path / "map.json", tmp_path / "prices.toml"
    path.write_text(json.dumps(SMALL_MAP))
    wanted = {"m-plain": ("plain",), "m-second": ("first/absent", "reseller/second"), "m-tier": ("tiered",),
              "m-none": ("noprice", "absent")}  # fmt: skip
    monkeypatch.setattr(price_map, "WANTED", wanted)
    args = ["prices", "refresh", "--from", str(path), "--litellm-version", "9.9.9", "--date", "2030-01-02"]
    assert main([*args, "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "4 models" not in said and "3 models from LiteLLM 9.9.9's cost map of 2030-01-02" in said
    assert "not in the map: m-none" in said
    table = tomllib.loads(out.read_text())
    assert table["source"]["version"] == "9.9.9" and table["source"]["date"] == "2030-01-02"
    assert table["source"]["missing"] == ["m-none"]
    rows = table["models"]
    assert rows["m-plain"] == {"input": 2.0, "cached_input": 0.2, "output": 8.0, "cache_write": 2.5, "key": "plain",
                               "url": "https://example.org/plain"}  # fmt: skip
    second = rows["m-second"]
    assert (second["input"], second["cached_input"], second["output"], second["key"]) == (
        1.0,
        1.0,
        4.0,
        "reseller/second",
    )
    assert "no cached-input rate" in second["note"] and "no 'first/absent' row" in second["note"]
    assert (rows["m-tier"]["input"], rows["m-tier"]["output"]) == (1.0, 3.0) and "first tier" in rows["m-tier"]["note"]
    # a bare map without its version and date: refused, exit 2, nothing written
    out.unlink()
    assert main(["prices", "refresh", "--from", str(path), "--out", str(out)]) == 2
    assert "--litellm-version" in capsys.readouterr().err and not out.exists()


def test_the_generated_table_is_what_refresh_writes_from_the_pinned_map():
    """The committed table is the generator's output for its own source: a hand edit of prices.toml is caught."""
    table = tomllib.loads((ROOT / "bench/agents/prices.toml").read_text())
    for model, keys in price_map.WANTED.items():
        if model in table["models"] and table["models"][model]["key"] in EXTRACT:
            key = table["models"][model]["key"]
            expected = price_map.row_of(model, key, EXTRACT[key], keys[0])
            assert {k: v for k, v in table["models"][model].items() if k in expected} == expected, model


def test_a_user_file_overrides_and_adds(tmp_path, monkeypatch, capsys):
    mine = tmp_path / "my-prices.toml"
    mine.write_text(
        '[models."gpt-5.5"]\ninput = 1.0\ncached_input = 0.1\noutput = 2.0\nurl = "https://example.org/deal"\n'
        '[models."my-local-model"]\ninput = 0.0\noutput = 0.0\n'
    )
    monkeypatch.setenv("BENCH_PRICES", str(mine))
    key, p = pricing.lookup("openai/gpt-5.5")
    assert key == "gpt-5.5" and (p.input, p.cached_input, p.output) == (1.0, 0.1, 2.0)
    assert p.origin == f"user file {mine}" and p.url == "https://example.org/deal"
    assert pricing.cost("gpt-5.5", 1000, 100, 500) == pytest.approx((500 * 1.0 + 500 * 0.1 + 100 * 2.0) / 1e6)
    assert pricing.cost("bench/my-local-model", 10_000, 10_000) == 0.0  # added: priced, so allowed under a budget
    assert pricing.lookup("claude-opus-4-7")[1] is pricing.PRICES["claude-opus-4-7"]  # the others: the table's
    assert main(["prices"]) == 0
    assert f"user file: {mine} (2 rows, they win)" in capsys.readouterr().out
    mine.write_text('[models."x"]\ninput = "cheap"\noutput = 1\n')  # a bad row: one line naming it, exit 2
    with pytest.raises(pricing.PriceFileError, match=r"\[models.'x'\]: input = 'cheap' is not a price"):
        pricing.lookup("gpt-5.5")
    assert main(["prices"]) == 2
    assert "is not a price" in capsys.readouterr().err
    monkeypatch.setenv("BENCH_PRICES", str(tmp_path / "missing.toml"))
    assert main(["prices"]) == 2


def test_a_bad_user_file_is_refused_before_a_run_budget_or_not(tmp_path, monkeypatch):
    """The gateway prices every request with the user's file: a bad one is said by the preflight, not mid-run."""
    from bench.preflight import check_priced

    mine = tmp_path / "my-prices.toml"
    mine.write_text('[models."gpt-5.5"]\ninput = 1.0\n')  # no output price
    monkeypatch.setenv("BENCH_PRICES", str(mine))
    for budget in (None, 5.0):
        with pytest.raises(pricing.PriceFileError, match=r"\[models.'gpt-5.5'\]: output is missing"):
            check_priced("codex", "gpt-5.5", budget)
