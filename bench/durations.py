"""Durations as people type and read them: ``3m``, ``1h30m``, ``90s`` in; ``12:05`` out."""

from __future__ import annotations

import argparse
import re


def parse_duration(text: str) -> float:
    """'3m', '90s', '1h', '1h30m', '2.5' (minutes) -> seconds; argparse's type error otherwise."""
    text = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text) * 60
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([hms])", text)
    if not parts or "".join(f"{n}{u}" for n, u in parts) != text.replace(" ", ""):
        raise argparse.ArgumentTypeError(f"bad duration {text!r}: use e.g. 90s, 3m, 1h30m or plain minutes")
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


def fmt_s(seconds: float) -> str:
    """Seconds -> ``MM:SS`` (or ``H:MM:SS`` from an hour on), for status lines."""
    seconds = max(0, int(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"
