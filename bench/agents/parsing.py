"""What every stream parser shares.

The :class:`Parser` base and the helpers that map a CLI's tool calls, usage counts and errors onto
normalised :class:`~bench.agents.events.Event` objects.

Each CLI's own parser lives in that agent's module (``claude_code.py`` holds ``ClaudeCodeParser``
beside ``ClaudeCodeAgent``); :data:`bench.agents.PARSERS` is the table that finds them by name.
``feed(line)`` for every line the CLI prints, then ``finish()`` at end of stream. Parsers never
raise on unknown or malformed lines (a CLI upgrade must not take a run down).
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from bench.agents import pricing
from bench.agents.events import Event

_TOOL_NAMES = {  # tool names, lower case without "_", of the five CLIs
    "shell": {"bash", "shell", "runshellcommand", "commandexecution", "execcommand", "localshell", "execute"},
    "write": {"write", "writefile", "createfile", "filewrite"},
    "edit": {"edit", "multiedit", "replace", "strreplace", "applypatch", "patch", "editfile", "notebookedit"},
    "read": {"read", "readfile", "readmanyfiles", "view", "notebookread"},
}
_PATH_KEYS = ("file_path", "filePath", "path", "notebook_path", "absolute_path", "file", "filename", "paths")
_PATCH_FILE = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+)$", re.M)


def tool_kind(name: Any) -> str:
    """The normalised tool kind (one of TOOLS) of a CLI's tool name, "other" when unknown."""
    key = re.sub(r"[^a-z]", "", str(name or "").lower())
    return next((kind for kind, names in _TOOL_NAMES.items() if key in names), "other")


def unwrap_shell(cmd: Any) -> str:
    """The command a shell wrapper runs, unwrapped.

    ["bash", "-lc", "python x.py"] and "/bin/bash -c 'python x.py'" -> "python x.py".
    """
    try:
        argv = [str(a) for a in cmd] if isinstance(cmd, list) else shlex.split(str(cmd))
    except ValueError:
        return str(cmd)
    if len(argv) == 3 and argv[0].rsplit("/", 1)[-1] in ("bash", "sh", "zsh") and argv[1] in ("-c", "-lc"):
        return argv[2]
    return shlex.join(argv) if isinstance(cmd, list) else str(cmd)


def tool_events(name: Any, args: Any, raw: dict | None = None) -> list[Event]:
    """tool_call events of one tool invocation (an apply_patch touching two files gives two)."""
    args, tool = args if isinstance(args, dict) else {}, tool_kind(name)
    if tool == "shell":
        cmd = args.get("command", args.get("cmd"))
        return [Event("tool_call", "shell", None if cmd is None else unwrap_shell(cmd), raw=raw)]
    patch = args.get("patchText", args.get("patch", args.get("input")))
    if tool == "edit" and isinstance(patch, str) and _PATCH_FILE.search(patch):
        return [
            Event("tool_call", "write" if op == "Add" else "edit", p, raw=raw) for op, p in _PATCH_FILE.findall(patch)
        ]
    path = name if tool == "other" else next((args[k] for k in _PATH_KEYS if args.get(k)), None)
    return [Event("tool_call", tool, ", ".join(map(str, path)) if isinstance(path, list) else path, raw=raw)]


def error_text(err: Any, default: str | None = None) -> str | None:
    """An error's message, whether the CLI gives a string or an object with a message."""
    if isinstance(err, dict):
        return error_text(err.get("message") or (err.get("data") or {}).get("message") or err.get("name"), default)
    return str(err) if err else default


def count(d: Any, *keys: str) -> int:
    """The sum of the counts under keys (missing or null count 0)."""
    return sum(int(d.get(k) or 0) for k in keys) if isinstance(d, dict) else 0


def usage_event(kind: str, tin: int, tout: int, cached: int, cost: float | None, raw: dict | None = None) -> Event:
    """A usage event: tokens and, when known, cost."""
    return Event(kind, tokens_input=tin, tokens_output=tout, tokens_cached=cached, cost_usd=cost, raw=raw)


def result_event(call: Event | None, out: Any, is_error: bool, raw: dict | None) -> Event:
    """The tool_result event of a call.

    ``out``: a string or a list of {type: text, text} blocks, kept to 2000 chars.
    """
    if isinstance(out, list):
        out = "\n".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in out)
    text = "" if out is None else str(out)[:2000]
    tool, target = (call.tool, call.target) if call else ("other", None)
    return Event("tool_result", tool, target, text, is_error=is_error, raw=raw)


class Parser:
    """Base of the parsers: one instance per run, fed from one thread.

    ``model`` prices runs without a cost.
    """

    def __init__(self, model: str | None = None):
        self.model, self.last_text, self.done = model, None, False  # done: a final event was emitted
        self._calls: dict[Any, list[Event]] = {}  # open tool calls by the CLI's call id
        self._seen: set = set()  # ids already counted

    def feed(self, line: str) -> list[Event]:
        """One line of the CLI -> events; none for a line that is no JSON object or fails."""
        line = line.strip()
        try:
            obj = json.loads(line) if line.startswith("{") else None
            return self.on_json(obj) if isinstance(obj, dict) else []
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):
            return []

    def on_json(self, obj: dict) -> list[Event]:
        """One JSON event of the CLI -> normalised events.

        Every JSON-speaking parser overrides this.
        """
        return []

    def shown(self, line: str) -> bool:
        """Whether a plain (non-JSON) line of the CLI is worth the console.

        It is in agent.log whatever this says. Warnings and errors by default; a parser leaves out
        what its CLI always prints that says nothing.
        """
        return True

    def finish(self) -> list[Event]:
        """A final event from the last assistant text when the CLI printed none.

        It prints none when it is killed, or when its format has none.
        """
        done, self.done = self.done, True
        return [] if done else [Event("final", text=self.last_text)]

    def message(self, text: Any, raw: dict | None = None, is_error: bool = False) -> list[Event]:
        """``text`` as a message event (none when empty); the last one becomes the final answer."""
        if not text or not str(text).strip():
            return []
        self.last_text = self.last_text if is_error else str(text)
        return [Event("message", text=str(text), is_error=is_error, raw=raw)]

    def cost(self, tin: int, tout: int, cached: int) -> float | None:
        """The dollar cost of a call from its tokens, at the model's list price (None: no price)."""
        return pricing.cost(self.model, tin, tout, cached)
