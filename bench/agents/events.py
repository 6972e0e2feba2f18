"""Normalised agent events: one model for what every coding-agent CLI prints, and a tally of a run.

A parser per CLI (:data:`bench.agents.PARSERS`) turns stdout, one line at a time, into
:class:`Event` objects (``feed(line)``, then ``finish()`` at end of stream); :class:`Tally` counts
them for the live status line, the run's metrics and its status (API error, over-refusal). Usage
events carry increments; a ``final`` event with tokens or cost carries run totals, which replace the
increments. ``tokens_input`` counts every prompt token, cached ones included; ``tokens_cached`` is
the part read from the prompt cache (:mod:`bench.agents.pricing`). Parsers never raise on unknown or
malformed lines.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

from bench.tracking import schema

KINDS = ("tool_call", "tool_result", "message", "usage", "final")
TOOLS = ("shell", "write", "edit", "read", "other")
# the agent-run metrics a Tally gives (names from the tag schema), besides COST_USD
METRICS = (
    schema.TOOL_CALLS,
    schema.SHELL_COMMANDS,
    schema.FILE_WRITES,
    schema.FILE_READS,
    schema.TOKENS_INPUT,
    schema.TOKENS_OUTPUT,
    schema.TOKENS_CACHED,
)


@dataclass
class Event:
    """One normalised event of an agent's stream, the same whatever CLI it came from."""

    kind: str  # one of KINDS
    tool: str | None = None  # one of TOOLS, for tool_call / tool_result
    target: str | None = None  # the shell command, the file path, or the tool's name for "other"
    text: str | None = None  # message text, tool output (truncated), final answer or error
    tokens_input: int = 0
    tokens_output: int = 0
    tokens_cached: int = 0
    cost_usd: float | None = None
    is_error: bool = False
    t: float = field(default_factory=time.time)
    raw: dict | None = None  # the CLI's own event

    def to_dict(self, raw: bool = False) -> dict:
        """The event as a JSON-ready dict, its raw CLI object only with ``raw``."""
        return {f.name: getattr(self, f.name) for f in fields(self) if raw or f.name != "raw"}


# Over-refusal (paper Appendix A): the model takes its own workspace for untrusted third-party code
# and will not touch it. Matched, case-insensitively, in assistant texts; it counts as a refusal
# only if the run wrote or edited no file.
_SUSPECT = r"(?:malicious|malware|untrusted|third[- ]party (?:code|material|files?|content|scripts?|software))"
_NO = r"(?:refuse|declin(?:e|ing)|can(?:not|'t) help|(?:won'?t|will not|cannot|can't) (?:modify|edit|touch|change|help"
_NO += r"|work)|unable to (?:modify|help)|not comfortable)"
_SAME = r"(?:(?![.!?](?:\s|$))[^\n]){0,160}"  # within one sentence ("train.py" does not end it)
REFUSAL_PATTERNS: list[str] = [  # the paper's three phrases, then a refusal and a suspicion in one sentence
    r"should(?: not|n'?t) (?:modify|edit|change|touch) (?:code|files?|anything) (?:that )?I did(?: not|n'?t) write",
    rf"third[- ]party (?:material|code|files?|content|software)\b{_SAME}\bmalicious",
    r"security review before (?:touching|modifying|editing|changing|running)",
    rf"\b{_NO}\b{_SAME}\b{_SUSPECT}",
    rf"\b{_SUSPECT}{_SAME}\b{_NO}",
]
_REFUSAL = re.compile("|".join(f"(?:{p})" for p in REFUSAL_PATTERNS), re.I)


class Tally:
    """Counts a run's events.

    Tools, tokens, cost, the last assistant texts, error and over-refusal.
    """

    def __init__(self) -> None:
        self.tool_calls = self.shell_commands = self.file_writes = self.file_reads = 0
        self.tokens_input = self.tokens_output = self.tokens_cached = 0
        self.cost_usd: float | None = None  # None: no event carried a cost (a model without a price)
        self.messages: list[str] = []  # the last 50 assistant texts
        self.final: Event | None = None
        self.error: str | None = None  # the last API/CLI error reported in the stream
        self.refusal: str | None = None  # the first assistant text that reads like an over-refusal

    def add(self, ev: Event) -> None:
        """Count one event into the tally."""
        if ev.kind == "tool_call":
            self.tool_calls += 1
            self.shell_commands += ev.tool == "shell"
            self.file_writes += ev.tool in ("write", "edit")
            self.file_reads += ev.tool == "read"
        elif ev.kind == "usage":
            self.tokens_input += ev.tokens_input
            self.tokens_output += ev.tokens_output
            self.tokens_cached += ev.tokens_cached
            self.cost_usd = self.cost_usd if ev.cost_usd is None else (self.cost_usd or 0.0) + ev.cost_usd
        elif ev.kind == "final":
            self.final = ev
            if ev.tokens_input or ev.tokens_output:  # run totals (Claude Code's result) replace the sums
                self.tokens_input, self.tokens_output = ev.tokens_input, ev.tokens_output
                self.tokens_cached = ev.tokens_cached
            self.cost_usd = self.cost_usd if ev.cost_usd is None else ev.cost_usd
        if ev.kind in ("message", "final") and ev.is_error:
            self.error = ev.text or "the agent CLI reported an error"
        elif ev.kind in ("message", "final") and ev.text:
            self.messages = [*self.messages[-49:], ev.text] if ev.kind == "message" else self.messages
            self.refusal = self.refusal or (ev.text if _REFUSAL.search(ev.text) else None)

    def refused(self) -> bool:
        """Whether the run reads as an over-refusal.

        Over-refusal: an assistant text matched REFUSAL_PATTERNS and no file was written or edited.
        """
        return self.refusal is not None and self.file_writes == 0

    def metrics(self) -> dict[str, float]:
        """The agent metrics of the run; cost_usd is None when no cost is known."""
        cost = None if self.cost_usd is None else round(self.cost_usd, 6)
        counts = (self.tool_calls, self.shell_commands, self.file_writes, self.file_reads)
        counts += (self.tokens_input, self.tokens_output, self.tokens_cached)
        return {**{k: float(v) for k, v in zip(METRICS, counts, strict=True)}, schema.COST_USD: cost}

    def summary(self) -> dict:
        """What the event stream says about the run.

        Its metrics, the last error, over-refusal, the final text.
        """
        return {
            "metrics": self.metrics(),
            "error": self.error,
            "refused": self.refused(),
            "final": self.final.text if self.final is not None else None,
        }

    @classmethod
    def replay(cls, events_file: Path) -> Tally:
        """The tally of a run's ``events.jsonl``.

        ``bench run --resume`` rebuilds a dead harness's this way.
        """
        tally, names = cls(), {f.name for f in fields(Event)}
        try:
            f = open(events_file, encoding="utf-8", errors="replace")  # line by line: it may be as large as the log cap
        except OSError:
            return tally
        with f:
            for line in f:
                try:
                    raw = json.loads(line)
                    tally.add(Event(**{k: v for k, v in raw.items() if k in names}))
                except (ValueError, TypeError, AttributeError, RecursionError):
                    continue  # a torn last line (the harness was killed mid-write), a foreign or a too deep one
        return tally

    def status_fields(self) -> dict[str, str]:
        """Short strings for the live status line.

        {"tools": "12", "tokens": "35.2k", "cost": "$0.41"}.
        """
        return {
            "tools": str(self.tool_calls),
            "tokens": short_count(self.tokens_input + self.tokens_output),
            "cost": "-" if self.cost_usd is None else f"${self.cost_usd:.2f}",
        }


def short_count(n: int) -> str:
    """A token count for the status line: 950, 35.2k, 1.20M."""
    return f"{n}" if n < 1000 else f"{n / 1000:.1f}k" if n < 1_000_000 else f"{n / 1e6:.2f}M"
