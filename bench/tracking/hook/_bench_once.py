"""Exactly once: a metric value traced by a script and printed by it is one value, not two or three.

The task helper ``log_metrics`` traces a value at full precision into the spool, then prints it
rounded (``step 100 | loss 0.1235``); many scripts print the same value again in their own format.
The output tee (``_bench_tee.py``) reads metrics from printed lines, and must not spool those
copies. It reads them up to a pipe's worth of output after the script wrote them (under load, >1,000
steps late), so a window of "the last few steps" is not enough; what it relies on instead is order:
the helper traces before it prints, so when the tee reads a printed line, the traced value is
already in the spool. Before spooling a printed line, the tee reads the spool's new traced events
(:class:`TracedReader`) into :class:`Seen` and drops each printed value that is a copy, at its
printed precision (:func:`same_value`), of a value seen at the same key and step.

Memory is bounded: :class:`Seen` keeps the last ``capacity`` (key, step) pairs. The tee reads a line
at most a pipe (64 KiB) and one read (64 KiB) behind the script, so the spool holds at most ~128 KiB
of printed lines, ~15,000 values of >= 9 bytes (``| a 1.0000``), beyond the line being read; the
default keeps twice that (a few MB at most). The relay keeps a smaller one
(``bench/tracking/script_events.py``) for what is left: a line printed just before the helper traces
the same value, which the tee may read first.

Standard library only (it runs in the tee's ``python -I -S``); the relay imports it as
``bench.tracking.hook._bench_once``.
"""

import os

PAIRS = 1 << 15  # (key, step) pairs the tee remembers
VALUES_PER_PAIR = 64  # a pair logged over and over (a script that never advances its step) keeps its first values
MAX_TRACED_LINE = 1 << 22  # a spool line longer than this (a script's source is <= 1 MB) is not read


def decimals(x):
    """Decimal places of ``x`` written the shortest way.

    0.1235 -> 4, 1.2e-05 -> 6, 1200.0 -> 0, 1.2e+20 -> -19.
    """
    mantissa, _, exponent = repr(float(x)).partition("e")
    return len(mantissa.partition(".")[2].rstrip("0")) - (int(exponent) if exponent else 0)


def same_value(a, a_exact, b, b_exact):
    """True when ``a`` and ``b`` can be one value, each either exact (traced) or printed.

    Printed: rounded to what it shows.

    Two exact values are one only when equal (a script may trace a value twice on purpose);
    otherwise the printed side's rounding, half a unit of its last decimal (the coarser of two
    printed ones), is the tolerance: 0.12344999 traced and 0.1234 printed are one value, 0.1234 and
    0.1236 printed are two.
    """
    if a == b:
        return True
    if a_exact and b_exact:
        return False
    places = min(decimals(x) for x, exact in ((a, a_exact), (b, b_exact)) if not exact)
    return abs(a - b) <= 0.5 * 10.0**-places * (1 + 1e-9)


class Seen:
    """The values of the last ``capacity`` (key, step) pairs, each marked exact or printed.

    Exact: traced; printed: read from the output, rounded to what it shows.
    """

    def __init__(self, capacity=PAIRS):
        self.capacity = capacity
        self.values = {}  # (key, step) -> [(value, exact), ...]; insertion order is age

    def add(self, key, step, value, exact):
        at = self.values.get((key, step))
        if at is None:
            if len(self.values) >= self.capacity:
                del self.values[next(iter(self.values))]
            self.values[(key, step)] = [(value, exact)]
        elif len(at) < VALUES_PER_PAIR:
            at.append((value, exact))

    def copy_of(self, key, step, value, exact):
        """True when ``value`` is one of the values seen at (key, step).

        Two exact values never are.
        """
        return any(same_value(value, exact, v, e) for v, e in self.values.get((key, step), ()))

    def rows(self):
        """The contents as JSON rows ``[key, step, value, exact]``, oldest first.

        The relay keeps them on disk.
        """
        return [[k, s, v, e] for (k, s), vals in self.values.items() for v, e in vals]

    @classmethod
    def of(cls, capacity, rows):
        """Rebuilt from :meth:`rows`."""
        seen = cls(capacity)
        for k, s, v, e in rows or ():
            seen.add(k, s, v, e)
        return seen


def event_values(ev):
    """``(step, {key: float})`` of a spooled metrics event, or None for anything else.

    Spools are untrusted.
    """
    if not isinstance(ev, dict) or ev.get("ev") != "metrics" or not isinstance(ev.get("metrics"), dict):
        return None
    step = ev.get("step")
    if isinstance(step, float) and step.is_integer():
        step = int(step)
    if not isinstance(step, int) or isinstance(step, bool):
        return None
    return step, {
        k: float(v)
        for k, v in ev["metrics"].items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: UP038 (any Python 3 runs this)
    }


class TracedReader:
    """Reads the values a script traced into its spool into ``seen``.

    It skips the tee's own ``"src": "stdout"`` lines.
    """

    def __init__(self, spool, seen):
        self.spool, self.seen = spool, seen
        self.fd, self.buf = None, b""

    def read(self):
        """Everything appended since the last call (complete lines only)."""
        if self.fd is None:
            try:
                self.fd = os.open(self.spool, os.O_RDONLY)
            except OSError:
                self.fd = -1
        while self.fd >= 0:
            try:
                data = os.read(self.fd, 1 << 16)
            except OSError:
                data = b""
            if not data:
                return
            lines = (self.buf + data).split(b"\n")
            self.buf = lines.pop()
            if len(self.buf) > MAX_TRACED_LINE:
                self.buf = b""
            for line in lines:
                if b'"metrics"' in line and b'"src":"stdout"' not in line:
                    self.line(line)

    def line(self, line):
        import json

        try:
            ev = json.loads(line)
        except ValueError:
            return
        found = event_values(ev) if isinstance(ev, dict) and ev.get("src") != "stdout" else None
        if found is not None:
            step, values = found
            for k, v in values.items():
                self.seen.add(k, step, v, True)
