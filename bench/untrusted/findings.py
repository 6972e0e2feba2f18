"""What the boundary says instead of a value: a named finding, counted in a tally.

Every refusal to read an agent-made item is a :class:`Finding` (path, which promise it hit, a short
detail), never a raise; the caller counts it in a :class:`Tally`, which ``result.json`` and the
audit record. Agent-chosen text in them (a file name, a link's target) is made one short printable
line by :func:`plain`.
"""

from __future__ import annotations

import stat
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

#: The names of findings, so callers and tests spell them once.
LINK = "link"
OUTSIDE = "outside"
NOT_REGULAR = "not-regular"
TOO_BIG = "too-big"
SPARSE = "sparse"
TOO_MANY = "too-many"
TOO_DEEP = "too-deep"
TOO_SLOW = "too-slow"
CUT = (TOO_MANY, TOO_DEEP, TOO_SLOW)  # the findings that say a walk stopped before the end: what it left out is unseen
TOO_LONG = "too-long"
UNREADABLE = "unreadable"
MISSING = "missing"
DUPLICATE = "duplicate"
BAD_JSON = "bad-json"


class Finding(NamedTuple):
    """A refusal to read one agent-made item: where, which promise it hit, and a short detail."""

    path: str
    what: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.what}: {self.path}" + (f" ({self.detail})" if self.detail else "")


@dataclass
class Tally:
    """Findings counted by kind, with the first few kept as examples.

    What ``result.json`` records.
    """

    keep: int = 20
    counts: Counter[str] = field(default_factory=Counter)
    examples: list[Finding] = field(default_factory=list)

    def add(self, finding: Finding) -> Finding:
        """Count a finding (kept as an example while fewer than ``keep`` are); returns it."""
        self.counts[finding.what] += 1
        if len(self.examples) < self.keep:
            self.examples.append(finding)
        return finding

    def extend(self, findings: Iterable[Finding]) -> None:
        """Count each of ``findings``."""
        for finding in findings:
            self.add(finding)

    def merge(self, other: Tally) -> None:
        """Add another tally's counts and, room permitting, its examples."""
        self.counts.update(other.counts)
        for f in other.examples:
            if len(self.examples) < self.keep:
                self.examples.append(f)

    def __bool__(self) -> bool:
        return bool(self.counts)

    @property
    def total(self) -> int:
        """The number of findings of every kind."""
        return sum(self.counts.values())

    def to_dict(self) -> dict:
        """The tally as ``result.json`` records it: total, counts by kind, examples."""
        return {
            "total": self.total,
            "counts": dict(sorted(self.counts.items())),
            "examples": [{"path": plain(f.path), "what": f.what, "detail": plain(f.detail)} for f in self.examples],
        }


def plain(text: str, limit: int = 300) -> str:
    """Agent-chosen text (a file name, a link's target) as one short printable line.

    Control characters, newlines included, escaped, cut to ``limit`` characters; for ``result.json``
    and the audit's evidence.
    """
    out = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text)[:limit])
    return out[:limit]


def describe_mode(mode: int) -> str:
    """A file type in words ("a FIFO", "a directory"), for findings and the audit's evidence."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a link"),
    ):
        if test(mode):
            return name
    return "not a regular file"
