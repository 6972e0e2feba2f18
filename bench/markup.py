r"""Text the agent chose, made safe to put into Markdown and HTML that a person reads.

The text is a checkpoint's file name, a script's name, a metric key, the agent's own messages; the
pages are the MLflow run's description and the reports under ``analysis/``.

Why: these names are the agent's to pick, and a name such as
``x](http://evil)<img src=x onerror=alert(1)>|.pt`` placed verbatim in a description becomes a link,
an image with a script, or a broken table in the page a reviewer trusts. Two ways, for two places:

- :func:`md_text` for running text: every character Markdown gives a meaning (HTML's ``& < >``,
  emphasis, code, links, tables, headings, a list marker at the start, autolinks ``http://`` and
  ``www.``, e-mail) as a numeric character reference, line breaks as spaces (so no line can start a
  heading, list or quote). It renders as the very characters given, in CommonMark and in MLflow's
  page alike (no backslash escape that a renderer shows as is).
- :func:`md_code` for a name shown as code: a code span whose backtick fence is longer than any run
  of backticks in the name (CommonMark's rule), so nothing inside is interpreted; HTML is inert
  inside a code span.

Tag values are not Markdown (MLflow shows them as text), but :func:`md_text` is what to use for a
tag that a view renders as Markdown. A third, :func:`one_line`, is for plain text kept as data (a
run's reason in ``result.json`` and the ``bench.reason`` tag): one line of printable characters,
bounded, so that an agent's multi-line error, a terminal escape sequence or a megabyte of output
cannot forge extra lines in a log, a table or a status line.

All of them start from the one console filter, :func:`shown`: every line of the agent's or its
scripts' output that a person sees (the console, ``agent.log`` as uploaded for the UI, the reports,
an MLflow run's name, tags and params) passes through it. Terminal escape sequences are removed
(colours and cursor movement, window titles and OSC 52's clipboard writes), and every other C0 or C1
control character and every bidirectional control (a right-to-left override turns ``exe.pt\u202e``
around on screen) is made visible as its Python escape (``\x1b``, ``\u202e``), so a terminal never
acts on the agent's bytes and a reviewer still sees that they were there. ``agent.log`` itself keeps
the bytes as printed (evidence); it is shown through this filter.
"""

from __future__ import annotations

import re

# escape sequences, 7-bit (ESC [ ...) and 8-bit (CSI 0x9b, OSC 0x9d, DCS 0x90, SOS 0x98, PM 0x9e,
# APC 0x9f): CSI with its parameters; OSC, DCS, SOS, PM and APC strings up to their terminator (BEL
# or ST) or the line's end; 2-byte escapes
_ANSI = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[@-Z\\-_]"
)
# what is left that a terminal acts on or that reorders text on screen: C0 (tab kept, newline kept
# in ``lines``), DEL, C1, the bidirectional marks, embeddings, overrides and isolates, line and
# paragraph separators
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_UNSAFE = re.compile(f"[\\x00-\\x08\\x0a-\\x1f\\x7f-\\x9f\\u2028\\u2029{BIDI}]")
_UNSAFE_LINES = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f\\u2028\\u2029{BIDI}]")
_BREAKS = re.compile(r"[\r\n\t\f\v\u2028\u2029]+")
REASON_CHARS = 2000  # a reason longer than this is cut (with an ellipsis): a person reads its start
# what Markdown, GFM's tables and strikethrough, and e-mail autolinks give a meaning anywhere in a
# line (parentheses only after a bracket, which is escaped)
_INLINE = re.compile(r"[\\`*_\[\]#|~<>&@]")
_LEADING = re.compile(r"^(?:[-+=]|\d+[.)])")  # at the start: a list item, a setext underline, an ordered list
_SCHEME = re.compile(r":(?=//)")  # http:// and its kin: an autolink


def _entity(match: re.Match) -> str:
    return "".join(f"&#{ord(c)};" for c in match.group(0))


def _visible(m: re.Match) -> str:
    return m.group().encode("unicode_escape").decode("ascii")


def shown(text: object, *, lines: bool = False) -> str:
    r"""The one console filter: ``text`` without terminal escape sequences, other controls visible.

    Every other control character and bidirectional control is made visible (``\x1b``, ``\u202e``, a
    newline as ``\n``). With ``lines`` a newline is kept (a multi-line text such as a log);
    everything else is the same.
    """
    out = _ANSI.sub("", str(text))
    if lines:
        out = out.replace("\r\n", "\n")  # a CRLF line end is a line end
    return (_UNSAFE_LINES if lines else _UNSAFE).sub(_visible, out)


def md_text(text: object) -> str:
    r"""``text`` as Markdown that renders as exactly these characters, on one line.

    See the module docstring.

    Every character that could be markup is a numeric character reference (``&#42;`` for ``*``),
    never a backslash escape: CommonMark and the renderer of MLflow's run pages (showdown, which
    unescapes only Markdown.pl's few characters and shows ``\:`` as it is) both show an entity as
    its character, so the page reads ``hardware: cpu``.
    """
    flat = shown(_BREAKS.sub(" ", str(text)))  # the console filter first: no escape sequence reaches a page
    escaped = _INLINE.sub(_entity, flat)
    escaped = _LEADING.sub(lambda m: m.group(0)[:-1] + f"&#{ord(m.group(0)[-1])};", escaped)
    escaped = _SCHEME.sub("&#58;", escaped)
    return escaped.replace("www.", "www&#46;")


def md_code(text: object) -> str:
    """``text`` as one inline code span (newlines as spaces), whatever backticks it holds."""
    flat = shown(_BREAKS.sub(" ", str(text)))
    longest = max((len(run) for run in re.findall(r"`+", flat)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") or not flat.strip() else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def one_line(text: object, limit: int = REASON_CHARS) -> str:
    """``text`` on one line of printable characters, at most ``limit`` of them.

    Line breaks, tabs and line or paragraph separators become a space, then :func:`shown` (escape
    sequences removed, other controls visible), runs of spaces one, at most ``limit`` characters
    (the cut marked with an ellipsis).
    """
    flat = shown(_BREAKS.sub(" ", str(text)))
    flat = re.sub(r" {2,}", " ", flat).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "\u2026"
