"""bench/campaign/token_rates.toml: every LLM agent has tokens per minute with a source, and a bad row is refused."""

from __future__ import annotations

import pytest

from bench.agents import AGENTS
from bench.campaign import token_rates


def test_every_llm_agent_has_a_row_with_its_source():
    for name, agent in AGENTS.items():
        if agent.offline:
            continue
        rate = token_rates.rate_of(name)
        assert rate.source, name
        assert rate.agent in (name, "default")
        assert all(lo <= hi for lo, hi in (rate.input, rate.cached, rate.output)), name
        assert rate.cached[0] <= rate.input[0] and rate.cached[1] <= rate.input[1], name
    assert token_rates.rate_of("generic").agent == "default"  # no row of its own


def test_the_range_is_the_rows_ends_at_the_price(monkeypatch):
    """One minute of claude-code on gpt-5.5 (5 / 0.5 / 30 USD per 1M): low 3k x 5 + 97k x 0.5 + 1.5k x 30 = $0.1085,
    high 30k x 5 + 270k x 0.5 + 7k x 30 = $0.495."""
    rate = token_rates.rate_of("claude-code")
    assert token_rates.cost_range("gpt-5.5", rate, 1.0) == pytest.approx((0.1085, 0.495))
    assert token_rates.cost_range("gpt-unpriced-7", rate, 1.0) is None
    assert token_rates.describe(rate) == "100k-300k in (97k-270k cached), 1.5k-7k out a minute"


@pytest.mark.parametrize(
    ("row", "said"),
    [
        ("input = [1, 2]\ncached = [0, 1]\n", "output must be [low, high]"),
        ("input = [3, 2]\ncached = [0, 1]\noutput = [0, 1]\n", "low 3 above high 2"),
        ("input = [1, 2]\ncached = [2, 3]\noutput = [0, 1]\n", "cached tokens above the input's"),
    ],
)
def test_a_bad_row_is_refused_naming_it(tmp_path, row, said):
    path = tmp_path / "rates.toml"
    path.write_text(f"[agents.x]\n{row}")
    with pytest.raises(ValueError, match=r"\[agents\.x\]") as e:
        token_rates.rates(path)
    assert said in str(e.value)
