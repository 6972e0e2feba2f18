"""The ``bench`` executable around :func:`bench.cli.main`: a closed pipe, and a quick exit.

Two things a command line is expected to get right that Python does not by default:

- ``bench tasks | head -1`` or ``bench run ... | less`` closed early: Python raises BrokenPipeError
  at the next print, which for ``bench run`` would end the harness in the middle of a run. Here the
  output goes on into ``/dev/null`` instead, the command carries on (a run is still recorded; the
  run directory's logs have everything), and its exit status is its own.
- Tearing down an interpreter that loaded MLflow, pandas and matplotlib (about 2,600 modules) took
  0.7 s here after every command. Once the command is done and no other thread is left, the exit
  handlers run (MLflow's, logging's), the streams are flushed and the process ends. With another
  thread still alive the ordinary exit waits for it.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import TextIO


class PipeGuard:
    """A text stream that sends the rest to /dev/null, not an error, once its reader is gone."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.closed_by_reader = False

    def write(self, text: str) -> int:
        """Write ``text``, or count it as written once the reader has gone."""
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._to_devnull()
            return len(text)

    def flush(self) -> None:
        """Flush, into /dev/null once the reader has gone."""
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_devnull()
            self._stream.flush()  # what was pending now goes to /dev/null

    def _to_devnull(self) -> None:
        self.closed_by_reader = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)

    def __getattr__(self, name: str):  # fileno, isatty, encoding, ...: the real stream's
        return getattr(self._stream, name)


def main() -> None:
    """``bench``: :func:`bench.cli.main` with both guards of the module docstring."""
    from bench.cli import main as cli_main

    sys.stdout, sys.stderr = PipeGuard(sys.stdout), PipeGuard(sys.stderr)
    code = cli_main()
    if threading.active_count() > 1:
        sys.exit(code)
    atexit._run_exitfuncs()  # what an ordinary exit runs first, in the same (reverse) order
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a stream closed some other way: nothing more can be said on it
            pass
    os._exit(code)


if __name__ == "__main__":
    main()
