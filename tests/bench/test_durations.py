"""bench.durations: budgets as people type them, elapsed time as the status line prints it."""

from __future__ import annotations

import argparse

import pytest

from bench.durations import fmt_s, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("3m", 180), ("1h", 3600), ("1h30m", 5400), ("2.5", 150), ("40", 2400), (" 1H 5S ", 3605)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "3x", "1h-5m", "3m junk", "-3m"])
def test_parse_duration_refuses_what_it_cannot_read(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="bad duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "00:00"), (59.9, "00:59"), (61, "01:01"), (3725, "1:02:05"), (-4, "00:00")]
)
def test_fmt_s(seconds: float, text: str) -> None:
    assert fmt_s(seconds) == text
