"""Tokens per minute of an agent's time (``token_rates.toml``).

How ``bench campaign plan`` estimates a campaign's API cost before any run, as a range, from each
run's minutes and the price table.

An API budget is spent by the minute: an agent loop resends its conversation each turn for as long
as it works, so the tokens of a run grow with its time. The figures are per agent, low and high,
each with its source (the file says why they are what they are); a pilot's measured use
(``--measured``) replaces them where it has a figure.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path

from bench.agents import pricing
from bench.errors import BenchError

FILE = Path(__file__).with_name("token_rates.toml")


class RatesError(BenchError, ValueError):
    """A row of the token rates file that does not hold what the plan needs.

    The message names it (exit 1).
    """


@dataclass(frozen=True)
class Rate:
    """Tokens a minute, (low, high) each.

    ``input`` every prompt token (cached included), ``cached`` the part of it read from the
    provider's cache, ``output`` the model's tokens (:func:`bench.agents.pricing.cost`'s semantics).
    """

    input: tuple[float, float]
    cached: tuple[float, float]
    output: tuple[float, float]
    source: str
    agent: str  # the row's name: the agent's own, or "default"


@functools.cache
def rates(path: Path = FILE) -> dict[str, Rate]:
    """The file's rows by agent name (read once).

    A row that does not hold three [low, high] pairs of tokens with cached <= input is an error
    naming it.
    """
    data = tomllib.loads(path.read_text())
    out = {}
    for name, row in data.get("agents", {}).items():
        pairs = {}
        for field in ("input", "cached", "output"):
            pair = row.get(field)
            numbers = isinstance(pair, list) and all(isinstance(v, int | float) and v >= 0 for v in pair)
            if not numbers or len(pair) != 2:
                raise RatesError(f"{path}: [agents.{name}] {field} must be [low, high] tokens a minute, got {pair!r}")
            if pair[0] > pair[1]:
                raise RatesError(f"{path}: [agents.{name}] {field}: low {pair[0]} above high {pair[1]}")
            pairs[field] = (float(pair[0]), float(pair[1]))
        if any(c > i for c, i in zip(pairs["cached"], pairs["input"], strict=True)):
            raise RatesError(f"{path}: [agents.{name}] cached tokens above the input's")
        out[name] = Rate(pairs["input"], pairs["cached"], pairs["output"], str(row.get("source", "")), name)
    return out


def rate_of(agent: str) -> Rate:
    """The agent's row, else the file's ``default`` row."""
    table = rates()
    return table.get(agent) or table["default"]


def cost_range(model: str | None, rate: Rate, minutes: float) -> tuple[float, float] | None:
    """USD (low, high) for ``minutes`` of agent time at ``rate`` on ``model``'s price.

    None for an unpriced model.
    """
    ends = []
    for end in (0, 1):
        tin, cached, tout = (round(pair[end] * minutes) for pair in (rate.input, rate.cached, rate.output))
        usd = pricing.cost(model, tin, tout, cached)
        if usd is None:
            return None
        ends.append(usd)
    return ends[0], ends[1]


def _k(tokens: float) -> str:
    return f"{tokens / 1e3:,.4g}k" if tokens < 1e6 else f"{tokens / 1e6:,.4g}M"


def describe(rate: Rate) -> str:
    """The row's figures in a few words: "100k-300k in (97k-270k cached), 1.5k-7k out a minute"."""
    pair = lambda p: f"{_k(p[0])}-{_k(p[1])}"  # noqa: E731
    return f"{pair(rate.input)} in ({pair(rate.cached)} cached), {pair(rate.output)} out a minute"
