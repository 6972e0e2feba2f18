"""What the agent asked its model and was told.

Each LLM request's and answer's body, capped and without secrets.

The metering gateway (:mod:`bench.gateway.proxy`) hands every model request it forwards to
:class:`Transcript`, which appends one line per request to ``<run_dir>/evidence/llm-bodies.jsonl``
when the request ends; the line's ``id`` is also written into the request's ``llm.jsonl`` line
(``body``), and :mod:`bench.pipeline.traces` joins the two into the run's MLflow trace.

What is kept, and why:

- **The request, as its newest part.** A CLI resends the whole conversation with every request
  (hundreds of kB late in a run), so the stored view keeps the request's scalar fields (model,
  max_tokens, ...), notes the size of the system prompt and tool list (the same in every request)
  and keeps the *last* messages, each long string cut to its head and tail: what this request added
  to the conversation (the tool results the model is about to read).
- **The answer, assembled.** A streamed (SSE) answer is one event per few tokens, mostly framing;
  its text, thinking and tool calls are rebuilt from the events (Anthropic Messages, OpenAI
  Responses and Chat Completions, Gemini), so a cap of a few KiB holds the whole answer of a typical
  turn. A JSON answer is read the same way. An answer in no known shape (an error page) is kept as
  raw text, capped.
- **Caps.** ``REQUEST_CAP`` and ``RESPONSE_CAP`` characters per body (head and tail kept,
  the omitted count said), ``Transcript.cap`` bytes for the whole file
  (``BENCH_LLM_BODIES_MB``, default 5): past it, a line keeps the sizes and the answer's
  first ``LATE_CAP`` characters (``omitted: "run cap"``), and past another ``LATE_BYTES``
  (1 MiB) the sizes only. A 2-hour run of 500 requests stays within the first cap (figures:
  docs/agents-and-credentials.md, tests/benchmarks/trace_size.py).
- **No secrets.** Headers are never stored. In bodies, every secret the one redactor knows
  (:mod:`bench.redact`: the harness's credential variables, the gateway's run tokens), the request's
  own credential header values, and strings shaped like keys (``sk-...``, ``AIza...``, bearer
  tokens, JWTs, run tokens) are replaced by ``[REDACTED]`` before anything is cut or written; the
  writer redacts once more on the way to the store.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from pathlib import Path

from bench import redact, settings

BODIES_NAME = "llm-bodies.jsonl"
REQUEST_CAP = 6 * 1024  # characters of a request's stored view
RESPONSE_CAP = 4 * 1024  # characters of an answer's stored view
STRING_CAP = 2 * 1024  # characters of one string inside a request's kept messages
LATE_CAP = 512  # characters of an answer kept past the run cap, for LATE_BYTES more; then sizes only
LATE_BYTES = 1 << 20
RAW_CAP = 8 << 20  # bytes of a JSON answer read for its content (a larger one is kept raw, capped)
REDACTED = "[REDACTED]"
CREDENTIAL_VARS = redact.CREDENTIAL_VARS
CREDENTIAL_HEADERS = {"authorization", "x-api-key", "x-goog-api-key", "api-key", "cookie", "proxy-authorization"}
_TOKEN = re.compile(redact.KEY_SHAPES + r"|(?i:bearer)\s+[A-Za-z0-9_\-.~+/=]{16,}")
_DROPPED = ("system", "tools", "instructions", "systemInstruction", "tool_config", "toolConfig", "functions")
_CONVERSATION = ("messages", "input", "contents")


def env_secrets(env: dict[str, str] | None = None) -> set[str]:
    """The run's secrets of 8 characters or more, as the one redactor knows them.

    See :func:`bench.redact.secrets`: the environment's credential values, a database URL's
    password, the gateway's run tokens.
    """
    return set(redact.secrets(env))


class Redactor:
    """Replaces known secret values and key-shaped strings by ``[REDACTED]``."""

    def __init__(self, secrets: set[str] | None = None) -> None:
        self.secrets = {s for s in (secrets or set()) if len(s) >= 8}
        forms = self.secrets | {json.dumps(s)[1:-1] for s in self.secrets}  # as they appear inside JSON text too
        values = sorted(forms, key=len, reverse=True)
        self._values = re.compile("|".join(map(re.escape, values))) if values else None

    def with_values(self, extra: set[str]) -> Redactor:
        """This redactor with more values (a request's own credential headers)."""
        return Redactor(self.secrets | extra) if {v for v in extra if len(v) >= 8} - self.secrets else self

    def __call__(self, text: str) -> str:
        """``text`` with every secret and run token replaced by the redaction mark."""
        if self._values is not None:
            text = self._values.sub(REDACTED, text)
        return redact.RUN_TOKEN.sub(REDACTED, _TOKEN.sub(REDACTED, text))


def cap(text: str, limit: int) -> tuple[str, int]:
    """``text`` cut to about ``limit`` characters, and the omitted count.

    The head and tail of ``text`` are kept around a note.
    """
    if len(text) <= limit:
        return text, 0
    omitted = len(text) - limit
    half = limit // 2
    return f"{text[:half]}\n...[{omitted} characters omitted]...\n{text[len(text) - (limit - half) :]}", omitted


def _shrink(o: object) -> object:
    """Every string longer than ``STRING_CAP`` inside ``o`` cut to its head and tail."""
    if isinstance(o, str):
        return cap(o, STRING_CAP)[0]
    if isinstance(o, list):
        return [_shrink(x) for x in o]
    if isinstance(o, dict):
        return {k: _shrink(v) for k, v in o.items()}
    return o


def _loads(text: str) -> object:
    """JSON text back to its value; the text itself if redaction made it unreadable."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def request_view(body: bytes, redact: Redactor) -> dict:
    """The stored view of one request body (see the module's text); ``bytes``: its full size."""
    view: dict = {"bytes": len(body)}
    try:
        o = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        o = None
    if not isinstance(o, dict):
        text, omitted = cap(redact(body.decode("utf-8", "replace")), REQUEST_CAP)
        return {**view, "text": text, "omitted": omitted} if body else view
    sizes = {k: len(json.dumps(o[k])) for k in _DROPPED if k in o}
    fields = {k: v for k, v in o.items() if k not in _DROPPED and k not in _CONVERSATION}
    if fields:
        view["fields"] = _loads(redact(json.dumps(_shrink(fields))))
    if sizes:
        view["left_out_bytes"] = sizes
    conv = next((k for k in _CONVERSATION if isinstance(o.get(k), list)), None)
    if conv is None:
        return view
    turns = o[conv]
    kept: list = []
    used = len(json.dumps(view))
    for turn in reversed(turns):  # the newest first, while they fit
        text = redact(json.dumps(_shrink(turn)))
        if kept and used + len(text) > REQUEST_CAP:
            break
        kept.insert(0, _loads(text) if used + len(text) <= REQUEST_CAP else cap(text, REQUEST_CAP - used)[0])
        used += len(text)
    view.update(messages=kept, messages_total=len(turns), messages_omitted=len(turns) - len(kept))
    return view


class Answer:
    """An answer's content rebuilt from its JSON body or SSE events.

    ``blocks`` of text, thinking and tool calls.
    """

    def __init__(self, api: str | None) -> None:
        self.api = api
        self.blocks: dict[object, dict] = {}
        self.events = 0
        self._buf = b""
        self.raw = bytearray()  # a JSON answer's bytes (read at the end), or the start of an unknown one

    def feed_sse(self, data: bytes) -> None:
        """Bytes of an SSE answer as they arrive, in any cut; each whole ``data:`` line is read."""
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            line = line.rstrip(b"\r")
            if not line.startswith(b"data:") or line[5:].strip() in (b"", b"[DONE]"):
                continue
            try:
                o = json.loads(line[5:])
            except (ValueError, UnicodeDecodeError):
                continue
            if isinstance(o, dict):
                self.events += 1
                self.event(o)
        if len(self._buf) > 1 << 20:
            self._buf = b""

    def read_json(self, body: bytes) -> bool:
        """Read a whole JSON answer; False when it is not one of the known shapes."""
        try:
            o = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return False
        for chunk in o if isinstance(o, list) else [o]:
            if isinstance(chunk, dict):
                self.event(chunk, whole=True)
        return bool(self.blocks)

    def _block(self, key: object, kind: str, **extra: object) -> dict:
        b = self.blocks.setdefault(key, {"type": kind, "text": ""})
        b.update({k: v for k, v in extra.items() if v})
        return b

    def event(self, o: dict, whole: bool = False) -> None:  # noqa: C901 - one branch per wire format
        """Add one JSON event (or, ``whole``, a whole JSON answer) of the API to the blocks."""
        t = o.get("type")
        if self.api == "anthropic":
            if whole or t == "message":
                for i, c in enumerate(o.get("content") or []):
                    if isinstance(c, dict):
                        self._anthropic_block(i, c)
            elif t == "content_block_start" and isinstance(c := o.get("content_block"), dict):
                self._anthropic_block(o.get("index"), c)
            elif t == "content_block_delta" and isinstance(d := o.get("delta"), dict):
                b = self._block(o.get("index"), "text")
                b["text"] += str(d.get("text") or d.get("partial_json") or d.get("thinking") or "")
            elif t == "error":
                self._block("error", "error")["text"] += json.dumps(o.get("error"))
        elif self.api == "responses":
            r = o.get("response") if isinstance(o.get("response"), dict) else (o if whole else None)
            if r is not None and isinstance(r.get("output"), list) and r["output"]:
                self.blocks = {}
                for i, item in enumerate(r["output"]):
                    self._responses_item(i, item if isinstance(item, dict) else {})
            elif t == "response.output_item.added" and isinstance(item := o.get("item"), dict):
                self._responses_item(o.get("output_index"), {**item, "content": [], "arguments": ""})
            elif isinstance(t, str) and t.endswith(".delta") and isinstance(o.get("delta"), str):
                kind = "tool_use" if "function_call" in t else "thinking" if "reasoning" in t else "text"
                self._block(o.get("output_index"), kind)["text"] += o["delta"]
        elif self.api == "chat":
            for ch in o.get("choices") or []:
                m = (ch.get("message") or ch.get("delta") or {}) if isinstance(ch, dict) else {}
                if isinstance(m.get("content"), str):
                    self._block("content", "text")["text"] += m["content"]
                for tc in m.get("tool_calls") or []:
                    f = tc.get("function") or {}
                    b = self._block(("tool", tc.get("index", tc.get("id"))), "tool_use", name=f.get("name"))
                    b["text"] += str(f.get("arguments") or "")
        elif self.api == "gemini":
            for cand in o.get("candidates") or []:
                for p in ((cand or {}).get("content") or {}).get("parts") or []:
                    if not isinstance(p, dict):
                        continue
                    if isinstance(p.get("functionCall"), dict):
                        fc = p["functionCall"]
                        self._block(len(self.blocks), "tool_use", name=fc.get("name"))["text"] = json.dumps(
                            fc.get("args")
                        )
                    elif isinstance(p.get("text"), str):
                        kind = "thinking" if p.get("thought") else "text"
                        last = list(self.blocks.values())[-1] if self.blocks else None
                        b = last if last and last["type"] == kind else self._block(len(self.blocks), kind)
                        b["text"] += p["text"]

    def _anthropic_block(self, key: object, c: dict) -> None:
        kind = {"tool_use": "tool_use", "thinking": "thinking"}.get(str(c.get("type")), "text")
        b = self._block(key, kind, name=c.get("name"))
        b["text"] = str(c.get("text") or c.get("thinking") or "") or (json.dumps(c["input"]) if c.get("input") else "")

    def _responses_item(self, key: object, item: dict) -> None:
        kind = {"function_call": "tool_use", "reasoning": "thinking", "custom_tool_call": "tool_use"}
        b = self._block(key, kind.get(str(item.get("type")), "text"), name=item.get("name"))
        parts = [c.get("text") for c in item.get("content") or [] if isinstance(c, dict)]
        parts += [s.get("text") for s in item.get("summary") or [] if isinstance(s, dict)]
        b["text"] = "".join(p for p in parts if isinstance(p, str)) or str(
            item.get("arguments") or item.get("input") or ""
        )


class Capture:
    """One request on its way through the gateway.

    Its stored view and the answer as it streams back.
    """

    def __init__(self, api: str | None, body: bytes, redact: Redactor) -> None:
        self.redact = redact
        self.request = request_view(body, redact)
        self.answer = Answer(api)
        self.sse: bool | None = None
        self.size = 0

    def feed(self, data: bytes, sse: bool) -> None:
        """Bytes of the answer as they are forwarded (any cut)."""
        self.sse = sse
        self.size += len(data)
        if sse:
            self.answer.feed_sse(data)
        elif len(self.answer.raw) < RAW_CAP:
            self.answer.raw += data[: RAW_CAP - len(self.answer.raw)]

    def response_view(self) -> dict:
        """The answer as the trace stores it: its blocks, or its redacted text capped."""
        ans = self.answer
        view: dict = {"bytes": self.size}
        if ans.raw and not ans.read_json(bytes(ans.raw)):
            text, omitted = cap(self.redact(bytes(ans.raw).decode("utf-8", "replace")), RESPONSE_CAP)
            return {**view, "text": text, "omitted": omitted + self.size - len(ans.raw)}
        blocks, used, omitted = [], 0, 0
        for b in ans.blocks.values():
            text = self.redact(b["text"])
            if used >= RESPONSE_CAP:
                omitted += len(text)
                continue
            kept, cut = cap(text, max(256, RESPONSE_CAP - used))
            blocks.append({**b, "text": kept})
            used, omitted = used + len(kept), omitted + cut
        return {**view, "blocks": blocks, "omitted": omitted} if omitted else {**view, "blocks": blocks}


class Transcript:
    """The run's ``llm-bodies.jsonl``.

    One line per model request, ``id`` = its order, capped per run.
    """

    def __init__(self, path: Path, secrets: set[str] | None = None) -> None:
        self.path = Path(path)
        self.redact = Redactor(env_secrets() | (secrets or set()))
        self._lock = threading.Lock()
        self._next = 0
        self._written = 0
        # bytes of llm-bodies.jsonl per run (BENCH_LLM_BODIES_MB, default 5; 0: keep sizes only);
        # later lines keep less
        self.cap = int(settings.LLM_BODIES_MB.get() * (1 << 20))

    def start(self, api: str | None, headers: list[tuple[str, str]], body: bytes) -> Capture | None:
        """A capture for a model request (None for anything else: model lists, token counts).

        The request's own credential header values are redacted from its bodies too.
        """
        if not api:
            return None
        own = set()
        for k, v in headers:
            if k.lower() in CREDENTIAL_HEADERS:
                own |= {v.strip(), v.split(None, 1)[-1].strip()}
        try:
            return Capture(api, body, self.redact.with_values(own))
        except Exception:  # never let a capture stop a request
            return None

    def finish(self, capture: Capture | None, rec: dict) -> None:
        """Append the capture's line and put its ``id`` in the request's gateway line.

        The gateway line's ``rec["body"]``.
        """
        if capture is None:
            return
        try:
            line = {"request": capture.request, "response": capture.response_view()}
        except Exception as e:  # a shape nobody foresaw: say so, never fail the request
            line = {"error": f"{type(e).__name__}: {e}"[:300]}
        with self._lock:
            ident, self._next = self._next, self._next + 1
            text = json.dumps({"id": ident, "t": rec.get("t"), **line}) + "\n"
            if self._written + len(text) > self.cap:
                sizes = {k: {"bytes": (line.get(k) or {}).get("bytes")} for k in ("request", "response")}
                if self.cap and self._written < self.cap + LATE_BYTES:
                    answer = (line.get("response") or {}).get("blocks") or line.get("response")
                    sizes["response"]["text"] = cap(self.redact(json.dumps(answer)), LATE_CAP)[0]
                text = json.dumps({"id": ident, "t": rec.get("t"), **sizes, "omitted": "run cap"}) + "\n"
            self._written += len(text)
            with contextlib.suppress(OSError), open(self.path, "a") as f:
                f.write(text)
        rec["body"] = ident


def read(path: Path) -> dict[int, dict]:
    """The bodies file by id (a torn last line is skipped)."""
    out: dict[int, dict] = {}
    with contextlib.suppress(OSError):
        for line in Path(path).read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                o = json.loads(line)
                if isinstance(o, dict) and isinstance(o.get("id"), int):
                    out[o["id"]] = o
    return out


def redacted_copy(src: Path, dest_dir: Path, redact: Redactor | None = None, *, shown: bool = False) -> Path:
    """A copy of ``src`` in ``dest_dir`` with the secrets :class:`Redactor` knows replaced.

    Same name, redacted line by line.

    The run's own files (``agent.log``, ``events.jsonl``) keep what the agent printed; what goes to
    a tracking store that others read must not carry a key the agent echoed
    (``echo $ANTHROPIC_API_KEY``). Lines are bounded by the output stream's line cap, so reading one
    at a time keeps memory flat even for a 128 MiB log. With ``shown`` each line also passes through
    the console filter (:func:`bench.markup.shown`): the copy a person reads in the UI carries no
    escape sequence and shows every control character and bidirectional control.
    """
    from bench.markup import shown as console_filter

    redact = redact or Redactor(env_secrets())
    dest = Path(dest_dir) / Path(src).name
    with open(src, errors="replace", newline="") as fin, open(dest, "w", newline="") as fout:
        for line in fin:
            fout.write(console_filter(redact(line), lines=True) if shown else redact(line))
    return dest
