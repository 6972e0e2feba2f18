"""One redactor of the run's secrets, for every string and file the harness records.

Why one: an agent that can read a key can print it anywhere the harness later copies: a metric or
param name, a script's source, its output tail, a checkpoint's bytes, its final message. Each of
those reached the tracking store through a different path, and each path had (or lacked) its own
filter. Here is the one list of what is secret and the one function that removes it;
:mod:`bench.tracking.writer` (the only MLflow writer) passes every name, value, text and uploaded
file through it, and :meth:`bench.result.RunResult.write` passes ``result.json`` through it.

What is secret:

- every credential value of the harness's environment (the names of :data:`CREDENTIAL_VARS`, and any
  name ending in ``_API_KEY``/``_TOKEN``/``_KEY`` or holding ``SECRET``/``PASSWORD``/``PASSWD``; a
  database URL's password (``scheme://user:PASSWORD@host``) in any variable), read when asked, so
  that ``bench record`` in another process redacts what the run's harness would have;
- values registered by this process (:func:`register`): the gateway's per-run tokens, a login's
  access token;
- anything shaped like a run token (``bench-run-`` and 32 hex digits: a past run's token is
  worthless, but it is the agent's credential while the run lives) or like a vendor key (``sk-...``,
  ``AIza...``, JWTs, ...).

Values shorter than 8 characters are never redacted (they would take words with them). A secret is
replaced by ``[redacted:NAME]`` (NAME: the variable it came from, ``run-token``, or ``key-shaped``);
in a metric, param or tag *name*, by ``redacted-NAME`` (MLflow's key characters). Both its raw form
and its JSON-escaped form are found.

Files: :func:`redacted_file` streams a file once in 1 MiB pieces (with an overlap, so a secret cut
by a piece boundary is still found) and returns either the file itself (nothing found) or a redacted
copy in a folder the caller owns; binary files (checkpoints) included: their bytes then differ from
the file the evaluation scored, which is the point. Files larger than :data:`SHAPES_UP_TO` (16 MiB:
checkpoints) are searched for the known secrets and run tokens only, not for vendor key shapes (each
shape is one more pass over the bytes). Measured on the 2-core machine, shared and loaded: about
25-60 MiB/s per literal searched (``bytes.find``), so a 100 MiB checkpoint with one key in the
environment costs a few seconds at the record step.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path

MIN_LEN = 8
CREDENTIAL_VARS = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "OPENROUTER_API_KEY",
    "HF_TOKEN",
)
_SECRET_NAME = re.compile(r"(_API_KEY|_TOKEN|_KEY|SECRET|PASSWORD|PASSWD)$|^(API_KEY|TOKEN)$|SECRET|PASSWORD", re.I)
_URL_PASSWORD = re.compile(r"[a-z][a-z0-9+.\-]*://[^/\s:@]*:([^@\s/]{8,})@", re.I)
RUN_TOKEN = re.compile(r"bench-run-[0-9a-f]{32}")
KEY_SHAPES = (  # the vendors' key formats, as one alternation (the gateway's transcript uses it too)
    r"sk-[A-Za-z0-9_\-]{16,}"  # OpenAI, Anthropic (sk-ant-...), OpenRouter
    r"|AIza[0-9A-Za-z_\-]{30,}"  # Google API keys
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}|AKIA[0-9A-Z]{16}|hf_[A-Za-z0-9]{30,}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"  # JWTs (OAuth access tokens)
)
_SHAPES = r"(?<![A-Za-z0-9_\-])(?:" + KEY_SHAPES + r")"
_SHAPE = re.compile(_SHAPES)
_SHAPE_B = re.compile(_SHAPES.encode())
# in bytes, each shape is looked for by its fixed prefix first (bytes.find), the regex checked
# only there
_PREFIXES = (b"sk-", b"AIza", b"gho_", b"ghp_", b"ghu_", b"ghs_", b"ghr_", b"github_pat_", b"xox", b"AKIA", b"hf_")
_PREFIXED = [(b"bench-run-", re.compile(RUN_TOKEN.pattern.encode()), "run-token")]
_PREFIXED += [(p, _SHAPE_B, "key-shaped") for p in (*_PREFIXES, b"eyJ")]
CHUNK = 1 << 20

_registered: dict[str, str] = {}  # value -> name
_lock = threading.Lock()


def register(value: str, name: str) -> None:
    """Add a secret this process knows (a gateway token, a login's access token).

    Named ``name`` when redacted.
    """
    if value and len(value) >= MIN_LEN:
        with _lock:
            _registered[value] = name


def env_secrets(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The credential values of ``env`` (default: this process's), each with its variable's name."""
    env = os.environ if env is None else env
    out: dict[str, str] = {}
    for name, value in env.items():
        value = value.strip()
        if (name in CREDENTIAL_VARS or _SECRET_NAME.search(name)) and len(value) >= MIN_LEN:
            out.setdefault(value, name)
        for m in _URL_PASSWORD.finditer(value):
            out.setdefault(m.group(1), name)
    return out


def secrets(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every secret known now: value -> name (the environment's, then the registered ones)."""
    with _lock:
        return {**env_secrets(env), **_registered}


def _forms(values: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for v, n in values.items():
        out[v] = n
        out.setdefault(json.dumps(v)[1:-1], n)
    return out


class Redactor:
    """Replaces the known secrets (and run-token- and key-shaped strings) in text and bytes."""

    def __init__(self, values: Mapping[str, str] | None = None, shapes: bool = True) -> None:
        self.values = _forms({v: n for v, n in (secrets() if values is None else values).items() if len(v) >= MIN_LEN})
        order = sorted(self.values, key=len, reverse=True)
        self._re = re.compile("|".join(map(re.escape, order))) if order else None
        self._literals = [v.encode() for v in order]
        self._prefixed = _PREFIXED if shapes else _PREFIXED[:1]  # the run token's shape always
        self.longest = max((len(v.encode()) for v in order), default=0)

    def text(self, s: str, key: bool = False) -> str:
        """``s`` without secrets; ``key``: the replacements use only MLflow's key characters."""
        if not isinstance(s, str) or not s:
            return s
        mark = "redacted-{}" if key else "[redacted:{}]"
        if self._re is not None:
            s = self._re.sub(lambda m: mark.format(self.values[m.group(0)]), s)
        s = RUN_TOKEN.sub(mark.format("run-token"), s)
        return _SHAPE.sub(mark.format("key-shaped"), s)

    def matches(self, b: bytes) -> list[tuple[int, int, str]]:
        """(start, end, name) of each secret, run token and key shape in ``b``, sorted, no overlaps.

        Found by ``bytes.find`` of each literal (a secret, a shape's fixed prefix) and a regex check
        only where one is: a regex alternation scanned over a checkpoint's random bytes ran at 8
        MiB/s on the 2-core machine.
        """
        found: list[tuple[int, int, str]] = []
        for v in self._literals:
            i = b.find(v)
            while i >= 0:
                found.append((i, i + len(v), self.values[v.decode()]))
                i = b.find(v, i + 1)
        for prefix, rx, name in self._prefixed:
            i = b.find(prefix)
            while i >= 0:
                m = rx.match(b, i)
                if m:
                    found.append((i, m.end(), name))
                i = b.find(prefix, i + 1)
        out: list[tuple[int, int, str]] = []
        for start, end, name in sorted(found, key=lambda t: (t[0], -t[1])):
            if not out or start >= out[-1][1]:
                out.append((start, end, name))
        return out

    def data(self, b: bytes) -> bytes:
        """``b`` without secrets (the same replacements as :meth:`text`, in UTF-8)."""
        found = self.matches(b)
        if not found:
            return b
        parts, at = [], 0
        for start, end, name in found:
            parts += [b[at:start], f"[redacted:{name}]".encode()]
            at = end
        return b"".join([*parts, b[at:]])

    def found(self, b: bytes) -> bool:
        """Whether ``b`` holds any secret, run token or key shape."""
        return bool(self.matches(b))

    def literal(self) -> Redactor:
        """This redactor without the vendor key shapes.

        Bytes of large files: each shape is one more pass.
        """
        r = Redactor.__new__(Redactor)
        r.__dict__.update(self.__dict__)
        r._prefixed = _PREFIXED[:1]
        return r

    def deep(self, o: object) -> object:
        """Every string inside ``o`` (dict keys included) redacted; other values as they are."""
        if isinstance(o, str):
            return self.text(o)
        if isinstance(o, list | tuple):
            return type(o)(self.deep(x) for x in o) if isinstance(o, tuple) else [self.deep(x) for x in o]
        if isinstance(o, dict):
            return {self.deep(k): self.deep(v) for k, v in o.items()}
        return o

    @property
    def overlap(self) -> int:
        """Bytes kept between two pieces of a file.

        The longest secret or key shape that can cross a boundary.
        """
        return max(self.longest, 4096)


def redactor() -> Redactor:
    """A redactor of every secret known now."""
    return Redactor()


def text(s: str, key: bool = False) -> str:
    """``s`` without the secrets known now (:meth:`Redactor.text`)."""
    return redactor().text(s, key)


SHAPES_UP_TO = 16 << 20  # bytes: larger files (checkpoints) are searched for the known secrets and run tokens only


def _for_size(r: Redactor, path: Path) -> Redactor:
    """Key shapes are looked for in files up to :data:`SHAPES_UP_TO` (sources, tails, logs).

    In larger ones (a checkpoint's bytes) only the run's known secrets and run tokens: each shape is
    a pass over the bytes, and a vendor key the harness does not hold is not one the agent could
    have been given.
    """
    try:
        big = Path(path).stat().st_size > SHAPES_UP_TO
    except OSError:
        big = False
    return r.literal() if big else r


def contains_secret(path: Path, r: Redactor | None = None) -> bool:
    """Whether the regular file ``path`` holds a secret.

    Read once, piece by piece, an overlap kept between.
    """
    r = _for_size(r or redactor(), path)
    tail = b""
    with open(path, "rb") as f:
        while piece := f.read(CHUNK):
            if r.found(tail + piece):
                return True
            tail = piece[-r.overlap :]
    return False


def redacted_file(path: Path, dest_dir: Path, r: Redactor | None = None) -> Path:
    """``path`` itself when it holds no secret.

    Else a copy (same name) in ``dest_dir`` with each secret replaced.

    Only regular files are read (a link, a FIFO or a device is returned as it is: what may be
    uploaded at all is the hostile-input boundary's decision, :mod:`bench.untrusted`, made before).
    The copy is written piece by piece: a secret that a piece boundary cuts is found because each
    piece is scanned together with the last ``overlap`` bytes of the one before, and those bytes are
    written only once their redaction is settled.
    """
    path = Path(path)
    if path.is_symlink() or not path.is_file():
        return path
    r = _for_size(r or redactor(), path)
    if not contains_secret(path, r):
        return path
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / path.name
    with open(path, "rb") as fin, open(dest, "wb") as fout:
        pending = b""
        while piece := fin.read(CHUNK):
            buf = pending + piece
            cut = len(buf) - r.overlap
            if cut <= 0:
                pending = buf
                continue
            for start, end, _ in r.matches(buf):  # never cut through a secret: the piece ends where it starts
                if start < cut < end:
                    cut = start
            fout.write(r.data(buf[:cut]))
            pending = buf[cut:]
        fout.write(r.data(pending))
    return dest
