"""What every benchmark script shares: its figure lines and its smoke mode (not a benchmark itself).

A benchmark prints each figure the docs may quote as one line, ``FIGURE <id> = <value> | load <a> -> <b> | <what>``:
``<value>`` exactly as a page quotes it (``1.73x``, ``+29 ms``), and the machine's 1-minute load average when the
measurement behind it started (``a``) and when it ended (``b``), since on a shared machine the load moves the
figures more than most changes do. ``make bench`` (``tests/benchmarks/make_figures.py``) collects these lines into
docs/benchmarks.md, where the README's and the docs' performance numbers are taken from, and ``--smoke`` (the
smallest sizes, one run) is what the slow tier runs (``tests/test_benchmarks.py``) so that a script that stopped
working is seen before a user reads its figure.
"""

from __future__ import annotations

import argparse
import os
import re

# what make_figures.py and the tests parse: the id, the value as quoted, the load at the start and at the end
LINE = re.compile(r"^FIGURE (?P<id>[\w.-]+) = (?P<value>.+?) \| load (?P<start>\d+\.\d\d) -> (?P<end>\d+\.\d\d)"
                  r"(?: \| (?P<what>.*))?$")  # fmt: skip


def load() -> float:
    """The 1-minute load average (what else the machine runs while a figure is measured)."""
    return os.getloadavg()[0]


class Span:
    """One measurement: the load when it started; each figure it prints says the load at its own end too."""

    def __init__(self) -> None:
        self.start = load()

    def figure(self, fid: str, value: str, what: str = "") -> None:
        """Print one figure line (and flush it: make_figures.py reads the lines as they come)."""
        line = f"FIGURE {fid} = {value} | load {self.start:.2f} -> {load():.2f}" + (f" | {what}" if what else "")
        assert LINE.match(line), line
        print(line, flush=True)


def add_smoke(parser: argparse.ArgumentParser) -> None:
    """The ``--smoke`` flag every benchmark takes: the smallest sizes and one run, to see that it still works (its
    figures mean nothing)."""
    parser.add_argument(
        "--smoke", action="store_true", help="smallest sizes, one run: checks the script works (figures meaningless)"
    )


def ratio(x: float) -> str:
    """A ratio as the docs quote it."""
    return f"{x:.2f}x"


def seconds(x: float) -> str:
    """Seconds as the docs quote them."""
    return f"{x:.2f} s"
