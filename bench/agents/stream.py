"""The agent's output, live (paper §3.3 step 3; part of the launch step).

To the log, the console, as events.

Every line the agent prints goes unchanged to ``agent.log`` (harness-side: the agent cannot rewrite
it); every line shown on the console passes through :func:`bench.markup.shown`, the one console
filter. When the agent's adapter names a stream parser (``Agent.parser_name``), each line is also
parsed into normalised events (``bench.agents.events``): appended to ``events.jsonl``, counted in a
:class:`~bench.agents.events.Tally` that feeds the live status line, and shown on the console as one
short line per event instead of the CLI's raw JSON.

Bounded, whatever the agent prints (:mod:`bench.sandbox.resource_limits`): a line is read at most
``Limits.line_bytes`` long (a 600 MB line with no newline costs the harness one chunk of memory, not
600 MB; the rest of it is dropped, counted and noted in the log), and ``agent.log`` keeps its first
and its last half of ``Limits.log_bytes``: the head is written as it comes, the tail goes to two
alternating segment files of a quarter each, and at the end the newest ~half is appended after a
line saying how many bytes were cut. ``events.jsonl`` stops growing at the same size (events past it
are still counted for the status line and the summary).
"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Protocol

from bench.markup import shown
from bench.progress import StatusLine
from bench.sandbox.resource_limits import Limits


class Meter(Protocol):
    """What the status line reads of the metering gateway (:class:`bench.gateway.proxy.Gateway`).

    The gateway sits above the adapters and is never imported by them.
    """

    tokens: int
    unpriced: bool

    @property
    def spent(self) -> float:
        """The dollars the gateway has metered so far."""
        ...


CONSOLE_CHARS = 2000  # a plain line shown on the console at most this long


class CappedLog:
    """An append-only log that keeps its first ``cap // 2`` bytes and about its last ``cap // 2``.

    Never more than ``cap`` on disk in all; the cut is noted; :meth:`close` puts the tail after the
    head.
    """

    def __init__(self, path: Path, cap: int) -> None:
        self.path, self.head_cap, self.seg_cap = Path(path), cap // 2, max(1, cap // 4)
        self.f = open(self.path, "ab")
        self.written = self.f.tell()  # a resumed log keeps what it had
        self.segments = [self.path.with_name(f".{self.path.name}.tail{i}") for i in (0, 1)]
        self.seg: int | None = None  # the tail segment being written
        self.seg_f = None
        self.seg_written = 0
        self.dropped = 0  # bytes written to segments and then overwritten (the cut)

    def write(self, data: bytes) -> None:
        """Append ``data``: to the head while it has room, then to the rolling tail."""
        room = self.head_cap - self.written
        if room > 0:
            self.f.write(data[:room])
            self.f.flush()
            self.written += min(room, len(data))
            data = data[room:]
        while data:
            if self.seg_f is None or self.seg_written >= self.seg_cap:
                self._next_segment()
            part = data[: self.seg_cap - self.seg_written]
            self.seg_f.write(part)
            self.seg_f.flush()
            self.seg_written += len(part)
            data = data[len(part) :]

    def _next_segment(self) -> None:
        if self.seg_f is not None:
            self.seg_f.close()
        self.seg = 0 if self.seg is None else 1 - self.seg
        path = self.segments[self.seg]
        if path.exists():
            self.dropped += path.stat().st_size  # the older segment is overwritten: those bytes are cut
        self.seg_f, self.seg_written = open(path, "wb"), 0

    def close(self) -> int:
        """Append the tail (the older segment, then the newer) after a note of the cut.

        Returns the bytes cut.
        """
        if self.seg_f is not None:
            self.seg_f.close()
            self.seg_f = None
            order = [self.segments[1 - self.seg], self.segments[self.seg]]
            if self.dropped:
                self.f.write(f"\n[bench] agent.log cut here: {self.dropped} bytes left out (log limit)\n".encode())
            for seg in order:
                if seg.exists():
                    with open(seg, "rb") as src:
                        while chunk := src.read(1 << 20):
                            self.f.write(chunk)
                    seg.unlink()
        self.f.close()
        return self.dropped


def _render(ev) -> str | None:
    r"""One console line per event, through the console filter; None for events not worth a line.

    A newline in a tool's target is shown as ``\n``, an escape sequence removed. Usage and bare
    results get no line.
    """
    if ev.kind == "tool_call":
        return shown(f"  > {ev.tool}: {(ev.target or '')[:160]}")
    if ev.kind == "message" and ev.text:
        return shown("  " + ev.text.strip().replace("\n", " ")[:240])
    if ev.kind == "final" and ev.is_error:
        return shown(f"  ! {ev.text or 'error'}")
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
        limits: Limits | None = None,
        gateway: Meter | None = None,
    ):
        self.proc, self.log, self.events_file, self.status, self.console = proc, log, events_file, status, console
        self.gateway = gateway  # the metering gateway: its live tokens and cost on the status line
        self.limits = limits or Limits()
        self.log_cut = 0  # bytes of agent.log left out between its head and its tail
        self.lines_cut = 0  # lines longer than the line limit
        self.line_bytes_dropped = 0  # what those lines lost past the limit
        self.events_dropped = 0  # events parsed but not written (events.jsonl at its limit)
        self._events_written = events_file.stat().st_size if events_file.exists() else 0
        self._said = ""  # the text of the last message shown on the console
        self.parser = self.tally = self.health = None
        if parser_name:
            from bench.agents import make_parser
            from bench.agents.events import Tally
            from bench.agents.health import ApiHealth

            self.parser, self.tally = make_parser(parser_name, model=model), Tally()
            self.health = ApiHealth()  # the model API failing for minutes ends the run (bench.agents.health)
        self._thread = threading.Thread(target=self._run, name="bench-stream", daemon=True)

    def start(self) -> AgentStream:
        """Start reading the agent's output in a thread of its own; returns the stream."""
        self._thread.start()
        return self

    def join(self, timeout: float = 10.0) -> None:
        """Wait for the reader (at most ``timeout`` s), then take the parser's closing events."""
        self._thread.join(timeout)
        if self.parser is not None:
            self._handle(self.parser.finish(), None)

    def _lines(self, log: CappedLog):
        """The agent's lines, each at most ``line_bytes``.

        What a longer line has past that is counted, dropped, and noted in the log where it was cut.
        """
        cap, stdout = self.limits.line_bytes, self.proc.stdout
        while raw := stdout.readline(cap):
            log.write(raw)
            if not raw.endswith(b"\n") and len(raw) >= cap:
                dropped = 0
                while (more := stdout.readline(cap)) and not more.endswith(b"\n"):
                    dropped += len(more)
                dropped += len(more.rstrip(b"\n"))
                self.lines_cut += 1
                self.line_bytes_dropped += dropped
                log.write(f"\n[bench] line cut at {cap} bytes: {dropped} more bytes left out\n".encode())
            yield raw.decode("utf-8", errors="replace").rstrip("\n")

    def _run(self) -> None:
        log = CappedLog(self.log, self.limits.log_bytes)
        try:
            for line in self._lines(log):
                if self.parser is None:
                    if self.console:
                        self.status.print(shown(line[:CONSOLE_CHARS]))
                    continue
                try:
                    events = self.parser.feed(line)
                except Exception as e:  # a parser bug must not stop the log
                    events = []
                    if self.console:
                        self.status.print(f"[bench] could not parse agent output: {e}")
                self._handle(events, line)
        finally:
            self.log_cut = log.close()

    def _handle(self, events: list, line: str | None) -> None:
        if events:
            with open(self.events_file, "a", encoding="utf-8") as f:
                for ev in events:
                    self.tally.add(ev)
                    self.health.add(ev)
                    text = json.dumps(ev.to_dict(), default=str) + "\n"
                    if self._events_written + len(text) > self.limits.log_bytes:
                        self.events_dropped += 1
                        continue
                    f.write(text)
                    self._events_written += len(text)
            self.status.set(**self.status_fields())
        if not self.console:
            return
        for ev in events:
            if not (text := _render(ev)):
                continue
            said = (ev.text or "").strip()
            if ev.kind == "final" and said == self._said:
                continue  # Claude Code's error result repeats the assistant message just shown (an API error)
            self._said = said if ev.kind == "message" else ""
            self.status.print(text)
        if not events and line and not line.lstrip().startswith("{") and self.parser.shown(line):
            self.status.print(shown(line[:CONSOLE_CHARS]))  # plain text from a JSON-speaking CLI (warnings, errors)

    def status_fields(self) -> dict[str, str]:
        """The status line's tools, tokens and cost.

        Tokens and cost are the metering gateway's once it has answered a model request: they are
        the run's own figures (what the record keeps), and they move while a CLI that says its usage
        only at the end of its turn (Codex) still reports none; else the CLI's stream's.
        """
        fields = self.tally.status_fields() if self.tally is not None else {}
        gw = self.gateway
        if gw is not None and (gw.tokens or gw.spent):
            from bench.agents.events import short_count

            fields.update(tokens=short_count(gw.tokens), cost="-" if gw.unpriced else f"${gw.spent:.2f}")
        return fields

    def limits_hit(self) -> list[dict]:
        """``result.json``'s lines for the output limits this run passed (empty: none)."""
        out = []
        if self.log_cut:
            out.append({"limit": "log", "value": self.limits.log_bytes, "dropped_bytes": self.log_cut})
        if self.lines_cut:
            out.append(
                {"limit": "line", "value": self.limits.line_bytes, "lines": self.lines_cut,
                 "dropped_bytes": self.line_bytes_dropped}
            )  # fmt: skip
        if self.events_dropped:
            out.append({"limit": "events", "value": self.limits.log_bytes, "dropped_events": self.events_dropped})
        return out

    def summary(self) -> dict:
        """What the event stream says about the run (empty for agents without a parser).

        ``api_failure`` when the model API failed as :mod:`bench.agents.health` says (an
        infrastructure failure, bench.outcome).
        """
        if self.tally is None:
            return {}
        failure = self.health.failure()
        return {**self.tally.summary(), **({"api_failure": failure} if failure else {})}
