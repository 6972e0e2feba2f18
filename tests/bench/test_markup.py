"""Agent-chosen text in Markdown (bench.markup): rendered as exactly its characters, never as a link, tag or table."""

from __future__ import annotations

import html
import re

from bench.markup import md_code, md_text

HOSTILE = "x](http://evil)<img src=x onerror=alert(1)>|`.md.pt\n# heading\n- item www.evil.com a@b.co"


def _unescape(md: str) -> str:
    """What CommonMark shows for text with backslash escapes and entities (its spec, sections 2.4 and 2.5)."""
    return html.unescape(re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", md))


def test_text_renders_as_its_characters_on_one_line():
    out = md_text(HOSTILE)
    assert _unescape(out) == HOSTILE.replace("\n", " ")
    assert "\n" not in out
    assert not re.search(r"[\[\]<>|`]", out), out  # no bracket, tag, pipe or backtick left as it is
    assert "http:" not in out and "www." not in out  # no autolink either
    assert "\\" not in out  # no backslash escape: MLflow's page (showdown) shows most of them as they are
    assert md_text("t6-baseline-r1: 0.378") == "t6-baseline-r1: 0.378"  # nothing to escape: read as written
    assert md_text("hardware: cpu (AMD EPYC, 2 cores)") == "hardware: cpu (AMD EPYC, 2 cores)"
    assert md_text("- x") == "&#45; x" and md_text("12. y") == "12&#46; y"  # no list at the start
    assert md_text("run_1.py") == "run&#95;1.py"


def test_a_code_span_outlasts_the_backticks_it_holds():
    assert md_code("run_1.py") == "`run_1.py`"
    assert md_code("a`b") == "``a`b``"
    assert md_code("``x") == "``` ``x ```"  # a leading backtick needs the padding space (CommonMark 6.1)
