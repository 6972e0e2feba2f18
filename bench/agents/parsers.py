"""Stream parsers: one per coding-agent CLI, each turning its stdout into :class:`bench.agents.events.Event` objects.

``feed(line)`` for every line the CLI prints, then ``finish()`` at end of stream. Parsers never raise
on unknown or malformed lines (a CLI upgrade must not take a run down); ``make_parser`` builds the
parser of a run, with the model so that runs whose CLI reports no cost are priced (:mod:`bench.agents.pricing`).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
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
    key = re.sub(r"[^a-z]", "", str(name or "").lower())
    return next((kind for kind, names in _TOOL_NAMES.items() if key in names), "other")


def unwrap_shell(cmd: Any) -> str:
    """The command itself: ["bash", "-lc", "python x.py"] and "/bin/bash -c 'python x.py'" -> "python x.py"."""
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


def _msg(err: Any, default: str | None = None) -> str | None:
    """An error's message, whether the CLI gives a string or an object with a message."""
    if isinstance(err, dict):
        return _msg(err.get("message") or (err.get("data") or {}).get("message") or err.get("name"), default)
    return str(err) if err else default


def _n(d: Any, *keys: str) -> int:
    """The sum of the counts under keys (missing or null count 0)."""
    return sum(int(d.get(k) or 0) for k in keys) if isinstance(d, dict) else 0


def _usage(kind: str, tin: int, tout: int, cached: int, cost: float | None, raw: dict | None = None) -> Event:
    return Event(kind, tokens_input=tin, tokens_output=tout, tokens_cached=cached, cost_usd=cost, raw=raw)


def _result(call: Event | None, out: Any, is_error: bool, raw: dict | None) -> Event:
    """The tool_result of a call; out: a string or a list of {type: text, text} blocks, kept to 2000 chars."""
    if isinstance(out, list):
        out = "\n".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in out)
    text = "" if out is None else str(out)[:2000]
    tool, target = (call.tool, call.target) if call else ("other", None)
    return Event("tool_result", tool, target, text, is_error=is_error, raw=raw)


class Parser:
    """Base of the parsers: one instance per run, fed from one thread. ``model`` prices runs without a cost."""

    def __init__(self, model: str | None = None):
        self.model, self.last_text, self.done = model, None, False  # done: a final event was emitted
        self._calls: dict[Any, list[Event]] = {}  # open tool calls by the CLI's call id
        self._seen: set = set()  # ids already counted

    def feed(self, line: str) -> list[Event]:
        line = line.strip()
        try:
            obj = json.loads(line) if line.startswith("{") else None
            return self.on_json(obj) if isinstance(obj, dict) else []
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):
            return []

    def on_json(self, obj: dict) -> list[Event]:
        """One JSON event of the CLI -> normalised events; every JSON-speaking parser overrides this."""
        return []

    def finish(self) -> list[Event]:
        """A final event from the last assistant text when the CLI printed none (killed, or none in its format)."""
        done, self.done = self.done, True
        return [] if done else [Event("final", text=self.last_text)]

    def message(self, text: Any, raw: dict | None = None, is_error: bool = False) -> list[Event]:
        if not text or not str(text).strip():
            return []
        self.last_text = self.last_text if is_error else str(text)
        return [Event("message", text=str(text), is_error=is_error, raw=raw)]

    def cost(self, tin: int, tout: int, cached: int) -> float | None:
        return pricing.cost(self.model, tin, tout, cached)


class ClaudeCodeParser(Parser):
    """``claude -p --output-format stream-json --verbose``: run totals and cost on the final ``result`` event."""

    def on_json(self, o: dict) -> list[Event]:
        t, msg, out = o.get("type"), o.get("message") or {}, []
        if t == "system" and o.get("subtype") == "init":
            self.model = self.model or o.get("model")
        elif t == "assistant":  # one event per content block; the usage is repeated on each
            for b in msg.get("content") or []:
                if b.get("type") == "tool_use":
                    out += self._calls.setdefault(b.get("id"), tool_events(b.get("name"), b.get("input"), o))
                elif b.get("type") == "text":
                    out += self.message(b.get("text"), o, is_error=bool(o.get("error")))
            if msg.get("usage") and (msg.get("id") is None or msg.get("id") not in self._seen):
                self._seen.add(msg.get("id"))  # per API call; its output_tokens are provisional
                out.append(self._tokens("usage", msg["usage"], None, o))
        elif t == "user" and isinstance(msg.get("content"), list):
            for b in msg["content"]:
                if b.get("type") == "tool_result":
                    calls = self._calls.pop(b.get("tool_use_id"), [None])
                    out += [_result(c, b.get("content"), bool(b.get("is_error")), o) for c in calls]
        elif t == "result":  # an API error says subtype "success" with is_error true
            ev, self.done = self._tokens("final", o.get("usage"), o.get("total_cost_usd"), o), True
            ev.is_error = bool(o.get("is_error")) or o.get("subtype", "success") != "success"
            ev.text = o.get("result") or "; ".join(map(str, o.get("errors") or [])) or o.get("subtype")
            out.append(ev)
        return out

    def _tokens(self, kind: str, u: Any, cost: Any, raw: dict) -> Event:
        cached, tout = _n(u, "cache_read_input_tokens"), _n(u, "output_tokens")
        tin = _n(u, "input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        cost = float(cost) if isinstance(cost, int | float) else self.cost(tin, tout, cached)
        return _usage(kind, tin, tout, cached, cost, raw)


class CodexParser(Parser):
    """``codex exec --json``: items started and completed; usage on ``turn.completed``; no cost, no model name."""

    def on_json(self, o: dict) -> list[Event]:
        t, item = o.get("type"), o.get("item") or {}
        it, iid = item.get("type"), item.get("id")
        if t in ("item.started", "item.updated", "item.completed") and it in self._KINDS:
            out = [] if iid in self._calls else self._calls.setdefault(iid, self._item_calls(item, o))
            if t == "item.completed":  # some items come only completed
                err = item.get("status") in ("failed", "declined") or item.get("exit_code") not in (None, 0)
                text = item.get("aggregated_output") or _msg(item.get("error"))
                out = out + [_result(c, text, err, o) for c in self._calls.pop(iid)]
            return out
        if t == "item.completed" and it in ("agent_message", "error"):
            return self.message(item.get("text") or item.get("message"), o, is_error=it == "error")
        if t == "error":  # also "Reconnecting... n/5" while the API is unreachable
            return self.message(o.get("message") or "error", o, is_error=True)
        if t == "turn.failed":
            self.done = True
            return [Event("final", text=_msg(o.get("error"), "turn failed"), is_error=True, raw=o)]
        if t == "turn.completed":  # input_tokens include the cached ones (OpenAI)
            u, self.done = o.get("usage"), True
            tin, tout, cached = _n(u, "input_tokens"), _n(u, "output_tokens"), _n(u, "cached_input_tokens")
            return [
                _usage("usage", tin, tout, cached, self.cost(tin, tout, cached), o),
                Event("final", text=self.last_text),
            ]
        return []

    _KINDS = ("command_execution", "file_change", "mcp_tool_call", "web_search")

    @staticmethod
    def _item_calls(item: dict, raw: dict) -> list[Event]:
        if item["type"] == "command_execution":
            return tool_events("shell", {"command": item.get("command")}, raw)
        if item["type"] == "file_change":
            kinds = [("write" if c.get("kind") == "add" else "edit", c.get("path")) for c in item.get("changes") or []]
            return [Event("tool_call", tool, path, raw=raw) for tool, path in kinds]
        name = f"{item.get('server')}.{item.get('tool')}" if item["type"] == "mcp_tool_call" else item["type"]
        return [Event("tool_call", "other", name, raw=raw)]


class OpenCodeParser(Parser):
    """``opencode run --format json``: a tool event printed once, when it ends; tokens and cost per step."""

    def on_json(self, o: dict) -> list[Event]:
        t, part = o.get("type"), o.get("part") or {}
        if t == "tool_use":
            state = part.get("state") or {}
            files = (state.get("metadata") or {}).get("files") if part.get("tool") == "apply_patch" else None
            calls = [
                Event("tool_call", "write" if f.get("type") == "add" else "edit", f.get("filePath"))
                for f in files or []
            ]
            calls = calls or tool_events(part.get("tool"), state.get("input"), o)  # (apply_patch: absolute paths)
            err = state.get("status") == "error"
            return calls + [_result(c, state.get("error") if err else state.get("output"), err, o) for c in calls]
        if t == "text":
            return self.message(part.get("text"), o)
        if t == "step_finish":  # its input excludes cache reads and writes, its output excludes reasoning
            tok = part.get("tokens") or {}
            cached, tout = _n(tok.get("cache"), "read"), _n(tok, "output", "reasoning")
            tin = _n(tok, "input") + _n(tok.get("cache"), "read", "write")
            cost = part.get("cost") if isinstance(part.get("cost"), int | float) else None
            cost = cost or self.cost(tin, tout, cached)  # 0 means "no price configured", not free
            return [_usage("usage", tin, tout, cached, cost, o)]
        return self.message(_msg(o.get("error"), "error"), o, is_error=True) if t == "error" else []


class GeminiParser(Parser):
    """``gemini -o stream-json``: assistant text comes in deltas (joined here); totals on ``result``; no cost."""

    def __init__(self, model: str | None = None):
        super().__init__(model)
        self._buf: list[str] = []

    def on_json(self, o: dict) -> list[Event]:
        t = o.get("type")
        if t == "message" and o.get("role") == "assistant":
            self._buf.append(str(o.get("content") or ""))
            return [] if o.get("delta") else self.finish_text()
        out = self.finish_text()
        if t == "init":
            self.model = self.model or o.get("model")
        elif t == "tool_use":
            out += self._calls.setdefault(o.get("tool_id"), tool_events(o.get("tool_name"), o.get("parameters"), o))
        elif t == "tool_result":
            err = o.get("status") != "success"
            text = _msg(o.get("error")) if err else o.get("output")
            out += [_result(c, text, err, o) for c in self._calls.pop(o.get("tool_id"), [None])]
        elif t == "error":  # severity "warning" (e.g. a loop detected) is not an error
            out += self.message(o.get("message") or "error", o, is_error=o.get("severity", "error") == "error")
        elif t == "result":
            s, err, self.done = o.get("stats") or {}, o.get("status") != "success", True
            ev = _usage("final", _n(s, "input_tokens"), _n(s, "output_tokens"), _n(s, "cached"), None, o)
            ev.is_error, ev.text = err, _msg(o.get("error"), "error") if err else self.last_text
            ev.cost_usd = self._cost(s)
            out.append(ev)
        return out

    def _cost(self, s: dict) -> float | None:
        """Per model where the stats name a known one (the CLI may route to several), else at the run's model."""
        total = 0.0
        for name, m in [(n, m) for n, m in (s.get("models") or {}).items() if isinstance(m, dict)] or [(None, s)]:
            counts = (_n(m, "input_tokens"), _n(m, "output_tokens"), _n(m, "cached"))
            c = pricing.cost(name, *counts)
            if (c := self.cost(*counts) if c is None else c) is None:
                return None
            total += c
        return round(total, 6)

    def finish_text(self) -> list[Event]:
        text, self._buf = "".join(self._buf), []
        return self.message(text)


_AIDER_TOKENS = re.compile(
    r"^Tokens: (?P<sent>[\d.]+[kM]?) sent(?:, (?P<write>[\d.]+[kM]?) cache write)?(?:, (?P<hit>[\d.]+[kM]?) cache "
    r"hit)?, (?P<recv>[\d.]+[kM]?) received\.(?: Cost: \$(?P<cost>[\d.]+) message, \$[\d.]+ session\.)?"
)
_AIDER_PROMPT = re.compile(r"^(?P<q>.*?)\? \(Y\)es/\(N\)o[^\]]*\]: ?(?P<rest>.*)$")
_AIDER_CHROME = re.compile(
    r"^(?:Aider v\d|(?:Main |Weak |Editor )?[Mm]odel: |Git repo: |Repo-map: |Added .* to the chat|Analytics |"
    r"Cur working dir|Warning|Note: |https?://|HTTPSConnectionPool|Use /help|Newer aider version|Can't initialize)"
)
_AIDER_API_ERROR = re.compile(
    r"^(?:litellm\.\w+|\w*(?:APIConnection|Authentication|RateLimit|BadRequest|NotFound|ServiceUnavailable|"
    r"InternalServer|APIError|Timeout)Error)\b|^The API provider "
)


def _aider_count(s: str | None) -> int:
    """Aider's rounded counts: "950", "1.2k", "12k", "1.5M"."""
    try:
        return round(float(s.rstrip("kM")) * {"k": 1_000, "M": 1_000_000}.get(s[-1], 1)) if s else 0
    except ValueError:
        return 0


class AiderParser(Parser):
    """Aider prints text: the reply, "Tokens: ..." after it, then "Applied edit to X" and "Running CMD" + output."""

    def __init__(self, model: str | None = None):
        super().__init__(model)
        self._buf: list[str] = []  # reply text since the last token report
        self._new_files: set[str] = set()
        self._running: Event | None = None  # the shell command whose output is being printed
        self._output: list[str] = []

    def feed(self, line: str) -> list[Event]:
        s, out = line.rstrip("\r\n"), []
        if m := _AIDER_PROMPT.match(s):  # a question; with stdin not a tty, the next output goes on the same line
            out += self._end_command()
            if m["q"].endswith("Create new file") and any(x.strip() for x in self._buf):
                self._new_files.add(next(x.strip() for x in reversed(self._buf) if x.strip()))
            self._buf, s = [], m["rest"]  # the lines before it named what is confirmed: not reply text
            if s.strip().lower() in ("", "y", "n", "yes", "no", "d", "a", "s"):  # an echoed answer (--yes-always)
                return out
        if self._running is not None and not (s.startswith("Running ") or _AIDER_TOKENS.match(s)):
            self._output.append(s)
            return out
        self._buf = [] if s.startswith("Aider v") else self._buf  # what came before the banner: start-up warnings
        if (model := re.match(r"^(?:Main )?[Mm]odel: (\S+)", s)) and not self.model:
            self.model = model[1]
        if tokens := _AIDER_TOKENS.match(s):
            out += self._end_command() + self.finish_text() + [self._tokens(tokens)]
        elif s.startswith("Applied edit to "):
            path = s.removeprefix("Applied edit to ").strip()
            call = Event("tool_call", "write" if path in self._new_files else "edit", path)
            out += [call, _result(call, s, False, None)]
        elif s.startswith("Running "):
            out += self._end_command()
            self._running = Event("tool_call", "shell", s.removeprefix("Running ").strip())
            out.append(self._running)
        elif "SEARCH/REPLACE block" in s and "failed to match" in s or s.startswith("The LLM did not conform"):
            out.append(Event("tool_result", "edit", None, s, is_error=True))
        elif _AIDER_API_ERROR.match(s):
            out += self.message(s, is_error=True)
        elif not _AIDER_CHROME.match(s):
            self._buf.append(s)
        return out

    def _tokens(self, m: re.Match) -> Event:
        cached = _aider_count(m["hit"])
        tin, tout = _aider_count(m["sent"]) + _aider_count(m["write"]) + cached, _aider_count(m["recv"])
        return _usage("usage", tin, tout, cached, float(m["cost"]) if m["cost"] else self.cost(tin, tout, cached))

    def _end_command(self) -> list[Event]:
        if self._running is None:
            return []
        (prev, done), self._running, self._output = (self._running, self._output), None, []
        return [_result(prev, "\n".join(done), False, None)]

    def finish_text(self) -> list[Event]:
        text, self._buf = "\n".join(self._buf).strip(), []
        return self.message(text)

    def finish(self) -> list[Event]:
        return self._end_command() + self.finish_text() + super().finish()


# Generic: each field is a dotted path ("usage.input_tokens", "content.0.text") or alternatives "a|b".
GENERIC_DEFAULTS: dict[str, Any] = {
    "type": "type|event",
    "kinds": {"tool_call": "tool_use|tool_call", "tool_result": "tool_result", "message": "message|text"}
    | {"usage": "usage", "final": "result|final"},  # Event kind <- the type values that mean it
    "tool": "tool|tool_name|name",
    "command": "command|input.command|args.command|parameters.command",
    "path": "path|file_path|input.file_path|input.path|args.path|parameters.file_path",
    "text": "text|content|message",
    "tokens_input": "usage.input_tokens|tokens_input",
    "tokens_output": "usage.output_tokens|tokens_output",
    "tokens_cached": "usage.cached_input_tokens|tokens_cached",
    "cost": "cost_usd|total_cost_usd|cost",
    "error": "error.message|error",
    "tools": {},  # extra tool names -> shell/write/edit/read/other
}


def get_path(obj: Any, path: str | list[str] | None) -> Any:
    """JSONPath-like lookup: "a.b.0.c" (a leading "$." is allowed); "a|b" or a list: the first found."""
    for p in path.split("|") if isinstance(path, str) else path or []:
        cur = obj
        for key in p.removeprefix("$.").split("."):
            if isinstance(cur, list) and key.isdigit() and int(key) < len(cur):
                cur = cur[int(key)]
            else:
                cur = cur.get(key) if isinstance(cur, dict) else None
        if cur is not None:
            return cur
    return None


class GenericParser(Parser):
    """JSON lines of a CLI without a parser of its own, read through a mapping (keys of GENERIC_DEFAULTS).
    A final event's tokens and cost are run totals; a tool_result belongs to the last tool_call."""

    def __init__(self, mapping: dict | None = None, model: str | None = None):
        super().__init__(model)
        self.mapping = m = {**GENERIC_DEFAULTS, **(mapping or {})}
        self._kind = {v: k for k, vs in m["kinds"].items() for v in (vs.split("|") if isinstance(vs, str) else vs)}

    @classmethod
    def from_file(cls, path: str | Path, model: str | None = None) -> GenericParser:
        """The mapping from a .json or .toml file (an agent's config): at its top level or in a "parser" table."""
        import tomllib

        text = Path(path).read_text(encoding="utf-8")
        data = json.loads(text) if str(path).endswith(".json") else tomllib.loads(text)
        return cls(next((data[k] for k in ("parser_mapping", "parser") if isinstance(data.get(k), dict)), data), model)

    def on_json(self, o: dict) -> list[Event]:
        m, kind = self.mapping, self._kind.get(str(get_path(o, self.mapping["type"])))
        error = _msg(get_path(o, m["error"])) if get_path(o, m["error"]) not in (None, False) else None
        if kind == "tool_call":
            name = get_path(o, m["tool"])
            tool = m["tools"].get(name) or tool_kind(name)
            target = name if tool == "other" else get_path(o, m["command" if tool == "shell" else "path"])
            target = unwrap_shell(target) if tool == "shell" and target is not None else target
            self._calls["last"] = [Event("tool_call", tool, target, raw=o)]
            return self._calls["last"]
        text = get_path(o, m["text"]) if isinstance(get_path(o, m["text"]), str) else None
        if kind == "tool_result":
            return [_result(self._calls.pop("last", [None])[0], text, bool(error), o)]
        if kind in (None, "message"):
            return self.message(error, o, is_error=True) if error else self.message(text, o) if kind else []
        tin, tout, cached = (int(get_path(o, m[k]) or 0) for k in ("tokens_input", "tokens_output", "tokens_cached"))
        cost = get_path(o, m["cost"])
        ev = _usage(kind, tin, tout, cached, float(cost) if isinstance(cost, int | float) else None, o)
        ev.cost_usd = ev.cost_usd if ev.cost_usd is not None else self.cost(tin, tout, cached)
        ev.text, ev.is_error = error or text or (self.last_text if kind == "final" else None), bool(error)
        self.done = self.done or kind == "final"
        return [ev]


PARSERS: dict[str, type[Parser]] = {
    "claude-code": ClaudeCodeParser,
    "codex": CodexParser,
    "opencode": OpenCodeParser,
    "gemini": GeminiParser,
    "aider": AiderParser,
    "generic": GenericParser,
}


def make_parser(name: str, model: str | None = None, mapping: dict | str | Path | None = None) -> Parser:
    """The parser of a run: the model prices runs whose CLI reports no cost; mapping (a dict or a .toml/.json
    file) configures the generic parser."""
    if name == "generic" and mapping is not None:
        return GenericParser(mapping, model) if isinstance(mapping, dict) else GenericParser.from_file(mapping, model)
    return PARSERS[name](model=model)
