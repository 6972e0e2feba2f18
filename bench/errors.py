"""The toolkit's errors: one base at the lowest floor, and the kinds the command line tells apart.

Every error class of ``bench/`` derives from :class:`BenchError`, so ``bench`` catches one class and
prints one line; its ``exit_code`` says what kind of problem it is. This module imports nothing of
the project, so any module may raise these without climbing a floor.

- :class:`InputError` (exit 2): an argument, a file or a setting the user gave cannot be used;
  nothing was created, and the message says what to change.
- :class:`Problems` (exit 2): every such problem found at once, one line each.
- any other :class:`BenchError` (exit 1): the work started and could not finish (data, tracking, a
  sandbox); what was recorded is kept, and the message says what to do.
"""

from __future__ import annotations


class BenchError(Exception):
    """The base of every error the toolkit raises on purpose.

    ``bench`` prints its message and exits ``exit_code``.
    """

    exit_code: int = 1


class InputError(BenchError, ValueError):
    """An argument, file or setting a run cannot start with.

    The message says what to do (exit 2).
    """

    exit_code = 2


class Problems(InputError):
    """Every problem found before a run, at once, one line each.

    A researcher fixing a campaign of two agents should not need three tries to learn of two missing
    keys and a closed endpoint. One problem reads as its own line (as a single InputError does);
    several read as a count, then one indented line each, each saying what to do.
    """

    def __init__(self, lines: list[str]) -> None:
        self.lines = list(dict.fromkeys(lines))  # the same problem found for two agents (a folder, the sandbox): once
        if len(self.lines) == 1:
            super().__init__(self.lines[0])
        else:
            head = f"{len(self.lines)} problems, found before anything was created (fix each, then run again):"
            super().__init__("\n".join([head, *(f"  - {line}" for line in self.lines)]))
