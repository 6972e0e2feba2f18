"""The agent's output, live (paper §3.3 step 3; part of the launch step): to the log, the console, as events.

Every line the agent prints goes unchanged to ``agent.log`` (harness-side: the agent cannot
rewrite it). When the agent's adapter names a stream parser (``parser_name``), each line is
also parsed into normalised events (``bench.agents.events``): appended to ``events.jsonl``,
counted in a :class:`~bench.agents.events.Tally` that feeds the live status line, and shown on the
console as one short line per event instead of the CLI's raw JSON.
"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

from bench.progress import StatusLine


def _render(ev) -> str | None:
    """One console line per event; None for events not worth a line (usage, bare results)."""
    if ev.kind == "tool_call":
        return f"  > {ev.tool}: {(ev.target or '')[:160]}"
    if ev.kind == "message" and ev.text:
        return "  " + ev.text.strip().replace("\n", " ")[:240]
    if ev.kind == "final" and ev.is_error:
        return f"  ! {ev.text or 'error'}"
    return None


class AgentStream:
    """Reads the agent's stdout in a thread until it closes."""

    def __init__(
        self,
        proc: subprocess.Popen,
        log: Path,
        events_file: Path,
        status: StatusLine,
        console: bool,
        parser_name: str | None = None,
        model: str | None = None,
    ):
        self.proc, self.log, self.events_file, self.status, self.console = proc, log, events_file, status, console
        self.parser = self.tally = None
        if parser_name:
            from bench.agents.events import Tally
            from bench.agents.parsers import make_parser

            self.parser, self.tally = make_parser(parser_name, model=model), Tally()
        self._thread = threading.Thread(target=self._run, name="bench-stream", daemon=True)

    def start(self) -> AgentStream:
        self._thread.start()
        return self

    def join(self, timeout: float = 10.0) -> None:
        self._thread.join(timeout)
        if self.parser is not None:
            self._handle(self.parser.finish(), None)

    def _run(self) -> None:
        with open(self.log, "ab") as f:
            for raw in iter(self.proc.stdout.readline, b""):
                f.write(raw)
                f.flush()
                line = raw.decode("utf-8", errors="replace").rstrip("\n")
                if self.parser is None:
                    if self.console:
                        self.status.print(line)
                    continue
                try:
                    events = self.parser.feed(line)
                except Exception as e:  # a parser bug must not stop the log
                    events = []
                    if self.console:
                        self.status.print(f"[bench] could not parse agent output: {e}")
                self._handle(events, line)

    def _handle(self, events: list, line: str | None) -> None:
        if events:
            with open(self.events_file, "a", encoding="utf-8") as f:
                for ev in events:
                    self.tally.add(ev)
                    f.write(json.dumps(ev.to_dict(), default=str) + "\n")
            self.status.set(**self.tally.status_fields())
        if not self.console:
            return
        shown = [text for text in map(_render, events) if text]
        for text in shown:
            self.status.print(text)
        if not events and line and not line.lstrip().startswith("{"):
            self.status.print(line)  # plain text from a JSON-speaking CLI (warnings, errors)

    def summary(self) -> dict:
        """What the event stream says about the run (empty for agents without a parser)."""
        return {} if self.tally is None else self.tally.summary()
