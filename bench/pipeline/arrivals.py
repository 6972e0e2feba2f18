"""When each checkpoint appeared, as the harness saw it (beside the watch step).

A file's modification time is the agent's to set (``touch -d``, ``cp -p``), so the collect step does not
place checkpoints in time by it: this thread lists ``checkpoints/`` about once a second while the agent
runs and remembers when each file was first seen; a last look is taken once the agent's tree has ended.
A checkpoint is thus at most about a second late on the anytime curve, and never earlier than it was.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path


class Arrivals:
    """Polls a folder in a daemon thread; ``seen`` maps each file to the ``time.time()`` it was first listed."""

    def __init__(self, directory: Path, interval: float = 1.0, on_new: Callable[[Path, float], None] | None = None):
        """``on_new(path, seen_at)`` is called for each new file (the evidence keeps it on disk as it comes)."""
        self.directory, self.interval, self.on_new = Path(directory), interval, on_new
        self.seen: dict[Path, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-arrivals", daemon=True)

    def start(self) -> Arrivals:
        self.scan()  # what is there before the agent starts (nothing, in a fresh workspace)
        self._thread.start()
        return self

    def stop(self) -> dict[Path, float]:
        """End the polling and take the last look; returns ``seen``."""
        self._stop.set()
        self._thread.join(timeout=10)
        self.scan()
        return self.seen

    def scan(self) -> None:
        now = time.time()
        try:
            for path in self.directory.rglob("*"):
                if path not in self.seen and path.is_file():
                    self.seen[path] = now
                    if self.on_new is not None:
                        try:
                            self.on_new(path, now)
                        except Exception:  # the evidence is kept best-effort; the arrival itself is noted above
                            pass
        except OSError:  # the agent may remove files or folders while they are listed: look again next time
            pass

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.scan()
