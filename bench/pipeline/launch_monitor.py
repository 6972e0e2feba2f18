"""An independent launch counter: process monitoring that cross-checks the tracer.

The tracer counts the scripts that announce themselves; this counts the Python processes
the harness *sees* running a top-level script of the workspace, by polling the agent's
process tree. The two agree unless a script defeats the tracer (e.g. ``python -S``, a
scrubbed environment), or lives shorter than the polling interval (default 0.5 s), which
only the tracer then sees. Both counts are recorded on the agent run.

It is also the audit's eye on the process tree (:mod:`bench.evidence`): every command line it sees
goes to ``commands.jsonl`` (a ``pip install``, a ``curl``, a ``git clone`` run by a script or a
shell, with or without an agent's tool call saying so), and every workspace script it sees running
has its source copied at that moment (``launches.jsonl``, ``sources/``), so that a script rewritten
afterwards is judged as it ran.
"""

from __future__ import annotations

import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from bench.evidence import Evidence
from bench.processes import find_tree

# interpreter options that take a separate argument (python -X dev, -W ignore, ...)
_OPTS_WITH_ARG = {"-X", "-W", "-Q"}


@dataclass(frozen=True)
class Launch:
    """One script process seen running: its pid, its start, its command line and script."""

    pid: int
    script: str
    started: float
    argv: tuple[str, ...]

    def to_dict(self) -> dict:
        """The launch as ``result.json`` and ``run.json`` keep it."""
        return asdict(self)


def workspace_script(cmdline: list[str], cwd: str, workspace: Path) -> str | None:
    """The workspace script a command line runs (``run_1.py``), or None if it is not one.

    Only ``python [options] script.py ...`` where script.py sits at the top level of the
    workspace counts; ``-c``, ``-m`` and the locked ``prepare.py`` do not (as in the tracer).
    """
    if not cmdline or not os.path.basename(cmdline[0]).startswith("python"):
        return None
    args = iter(cmdline[1:])
    for arg in args:
        if arg in ("-c", "-m"):
            return None
        if arg in _OPTS_WITH_ARG:
            next(args, None)
            continue
        if arg.startswith("-"):
            continue
        path = Path(arg) if os.path.isabs(arg) else Path(cwd) / arg
        try:
            path = path.resolve()
        except OSError:
            return None
        if path.suffix == ".py" and path.parent == workspace.resolve() and path.name != "prepare.py":
            return path.name
        return None
    return None


class LaunchMonitor:
    """Polls the agent's process tree in a daemon thread; remembers every script process it sees."""

    def __init__(
        self, root_pid: int, token: str | None, workspace: Path, interval: float = 0.5, evidence: Evidence | None = None
    ):
        self.root_pid, self.token, self.workspace, self.interval = root_pid, token, Path(workspace), interval
        self.evidence = evidence
        self.launches: dict[tuple[int, float], Launch] = {}
        self._seen: dict[tuple[int, float], tuple[str, ...]] = {}  # process -> command line last looked at
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-launches", daemon=True)

    def start(self) -> LaunchMonitor:
        """Start polling in a daemon thread; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the polling."""
        self._stop.set()
        self._thread.join(timeout=10)

    @property
    def count(self) -> int:
        """How many script processes were seen."""
        return len(self.launches)

    def _loop(self) -> None:
        while True:
            try:
                self.scan()
            except Exception:  # monitoring must never take the run down
                pass
            if self._stop.wait(self.interval):
                return

    def scan(self) -> None:
        """One look at the agent's process tree: every new script process remembered."""
        for proc in find_tree(self.root_pid, self.token):
            try:
                key = (proc.pid, proc.create_time())
                if key in self.launches:
                    continue
                cmdline = tuple(proc.cmdline())
                if self._seen.get(key) == cmdline:
                    continue  # same process, same command line: already judged (a fork may exec later)
                self._seen[key] = cmdline
                cwd = proc.cwd()
                script = workspace_script(list(cmdline), cwd, self.workspace)
            except (psutil.Error, OSError):
                continue
            if self.evidence is not None:
                seen = {"pid": proc.pid, "started": key[1], "argv": [a[:2000] for a in cmdline[:200]], "cwd": cwd}
                self.evidence.append("commands.jsonl", seen)
            if script:
                self.launches[key] = Launch(proc.pid, script, key[1], cmdline)
                if self.evidence is not None:
                    digest = self.evidence.keep_source(self.workspace / script, self.workspace)
                    self.evidence.append("launches.jsonl", {**self.launches[key].to_dict(), "sha256": digest})
