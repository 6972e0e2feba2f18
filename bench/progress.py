"""A live status line for long steps: what runs, time elapsed and budget left.

On a terminal the line is redrawn in place below the agent's streamed output; in a log
(CI, Slurm, nohup) it is printed as a plain line every ``every_s`` seconds instead.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from bench.durations import fmt_s
from bench.markup import shown


class StatusLine:
    """Thread-safe: the output streamer calls :meth:`print`, the watchdog calls :meth:`update`."""

    def __init__(self, label: str, stream: TextIO | None = None, every_s: float = 30.0, enabled: bool = True):
        self.label, self.stream, self.every_s, self.enabled = label, stream or sys.stderr, every_s, enabled
        self.tty = self.stream.isatty()
        self.fields: dict[str, str] = {}
        self._text = ""
        self._last_plain = 0.0
        self._lock = threading.Lock()

    def set(self, **fields: object) -> None:
        """Extra fields shown on the line (scripts launched, best score, ...)."""
        with self._lock:
            self.fields.update({k: str(v) for k, v in fields.items()})

    def update(self, elapsed_s: float, left_s: float) -> None:
        """Redraw the line with the time elapsed and left (every ``every_s`` off a terminal)."""
        extra = shown("".join(f" | {k} {v}" for k, v in self.fields.items()))
        text = f"[{self.label}] {fmt_s(elapsed_s)} elapsed | {fmt_s(left_s)} left{extra}"
        with self._lock:
            self._text = text
            if not self.enabled:
                return
            if self.tty:
                self.stream.write("\r\x1b[K" + text)
                self.stream.flush()
            elif time.monotonic() - self._last_plain >= self.every_s:
                self._last_plain = time.monotonic()
                self.stream.write(text + "\n")
                self.stream.flush()

    def print(self, line: str, stream: TextIO | None = None) -> None:
        """Print a line of output above the status line, through the console filter.

        The filter (:func:`bench.markup.shown`) lets no escape sequence, control character or
        bidirectional control of the agent's reach the terminal.
        """
        out = stream or sys.stdout
        line = shown(line, lines=True)
        with self._lock:
            if self.enabled and self.tty:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
            out.write(line if line.endswith("\n") else line + "\n")
            out.flush()
            if self.enabled and self.tty and self._text:
                self.stream.write(self._text)
                self.stream.flush()

    def close(self) -> None:
        """Clear the line from the terminal."""
        with self._lock:
            if self.enabled and self.tty and self._text:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
            self._text = ""
