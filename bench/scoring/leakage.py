"""A score that carries its labels: the trusted scorer looks for its own targets in what it scored.

The scorer (:mod:`bench.scoring.scorer`) holds the evaluation's targets, so it can look for them in
the staged folder of each candidate: the checkpoint's bytes and the scripts staged with it. A model
that answers the test by looking its targets up (a buffer of the test series that ``forward``
indexes into, a list of labels in the config, a string of the text in ``train.py``) carries them in
one of those, in some encoding. Found, it names the file, the zip entry (the tensor's storage) and,
where the pickle says it, the tensor's key.

Nothing here unpickles or imports anything: the checkpoint is hostile input. Its raw bytes are
searched where they lie (a ``torch.save`` zip stores each tensor's storage uncompressed, as
little-endian bytes, in ``archive/data/<key>``: memory-mapped, never read into memory whole);
entries a zip compressed are decompressed with a bound; the pickle (``data.pkl``) is only
disassembled (:func:`pickletools.genops`: opcodes, no object is built) for the numbers it holds (a
Python list in the config) and the key of each storage; a script's text is searched as bytes, and so
are the numbers it spells (``0.4312, -1.2``, ``[3, 0, 2]``) and its base64 literals (decoded, then
inflated when zlib-compressed).

What is searched: :data:`WINDOWS` windows of consecutive target values, spread over the evaluation
and chosen to be informative (a window of one repeated label would match any zero-filled tensor),
each encoded as the task's kind of target allows (:data:`ENCODINGS`): a **series** (T6) in float32,
float16 and float64, in time-major and in channel-major order; **labels** (class ids, masks) as
int64, int32, uint8 and float32, in evaluation order; **text** (T1) as its UTF-8 bytes and its ids
as int64, int32 and uint16. A blob is flagged when at least :data:`MIN_FOUND` windows of one
encoding lie in it: one window can be chance, several spread over the split cannot. Not found:
targets transformed before they were stored (scaled, permuted, hashed, encrypted, compressed in a
checkpoint tensor), a lookup keyed by something else than evaluation order, or the targets reached
by another way than the staged folder (none exists: the predictor sees that folder only).

Cost: one pass of ``bytes.find`` per window and encoding over each blob; over a blob larger than
:data:`LARGE` (a large checkpoint) only :data:`FIRST` windows of each encoding, spread over the
split, and the others only when one of those is there, so a copy of less than about a quarter of the
split may pass there (measured in ``docs/sandbox-and-rules.md``). A file larger than
:data:`MAX_BLOB` is searched in its first :data:`MAX_BLOB` bytes.
"""

from __future__ import annotations

import base64
import binascii
import mmap
import pickletools
import re
import struct
import time
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.errors import InputError

SERIES, LABELS, TEXT = "series", "labels", "text"
DECIMALS = "2 decimals"  # a series printed in a script with few digits: both sides rounded to 2 decimals
KINDS = (SERIES, LABELS, TEXT)
ENCODINGS = {
    SERIES: ("float32", "float16", "float64", DECIMALS),
    LABELS: ("int64", "int32", "uint8", "float32"),
    TEXT: ("utf-8", "int64", "int32", "uint16"),
}
WINDOW = {SERIES: 16, LABELS: 64, TEXT: 48}  # values per window: >= 32 bytes in the narrowest encoding
WINDOWS = 16  # windows drawn over the evaluation
MIN_FOUND = 3  # windows of one encoding in one blob that make a finding
MAX_BLOB = 4 << 30  # bytes of one file searched at most
MAX_INFLATE = 1 << 30  # bytes one compressed zip entry or base64 literal may inflate to
MAX_PICKLE = 256 << 20  # a data.pkl larger than this is not disassembled (its raw bytes are still searched)
LARGE = 64 << 20  # a blob larger than this is first searched for FIRST windows of each encoding, spread over the split
FIRST = 4
CANDIDATES = 4096  # window positions examined to choose the informative ones

NUMBER = re.compile(rb"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
B64 = re.compile(rb"[A-Za-z0-9+/]{64,}={0,2}")


@dataclass(frozen=True)
class Window:
    """One window of consecutive target values, encoded.

    ``keys`` maps an encoding name to its bytes.
    """

    order: str  # "time-major", "channel-major", "evaluation order"
    index: int
    keys: dict[str, bytes]


def windows(kind: str, targets: list[np.ndarray], vocab: list[str] | None = None) -> list[Window]:
    """The windows to look for.

    :data:`WINDOWS` per order, spread over the evaluation's targets (in feed order), each within
    stretches whose values are consecutive in the data (a T6 target window, a T1 block's row).
    """
    if kind not in KINDS:
        raise InputError(f"task.toml's [scoring] targets must be one of {', '.join(KINDS)}, not {kind!r}")
    k = WINDOW[kind]
    out: list[Window] = []
    for order, rows in _orders(kind, targets):
        for i, values in enumerate(_choose(kind, rows, k)):
            out.append(Window(order, i, _encode(kind, values, vocab)))
    return out


def _orders(kind: str, targets: list[np.ndarray]) -> list[tuple[str, list[np.ndarray]]]:
    if kind == SERIES:  # each target [.., steps, channels]: its values are consecutive rows of the series
        time_major = [np.asarray(t).reshape(-1) for t in targets]
        channel_major = [np.moveaxis(np.asarray(t), -1, -2).reshape(-1) if np.ndim(t) >= 2 else t for t in targets]
        return [("time-major", time_major), ("channel-major", channel_major)]
    if kind == TEXT:  # blocks of ids: each row is consecutive text (the blocks themselves are fed strided)
        return [("text order", [r for t in targets for r in np.asarray(t).reshape(-1, np.shape(t)[-1])])]
    return [("evaluation order", [np.concatenate([np.asarray(t).reshape(-1) for t in targets])])]


def _informative(kind: str, w: np.ndarray) -> np.ndarray:
    """Which candidate windows (rows of ``w``) say something.

    Several distinct values, and for labels several changes of value: a run of one class matches a
    zero-filled tensor, and a run of ones amid zeros a triangular boolean mask (a causal attention
    mask's rows), so a window of zeros and ones needs two runs of ones, and one with another class
    (a segmentation mask's row across an object) two changes.
    """
    changes = (w[:, 1:] != w[:, :-1]).sum(axis=1)
    if kind == LABELS:
        return (changes >= 4) | ((changes >= 2) & (w.max(axis=1) >= 2))
    distinct = np.array([len(np.unique(r)) for r in w])
    return distinct >= (w.shape[1] // 2 if kind == SERIES else 8)


def _choose(kind: str, rows: list[np.ndarray], k: int) -> list[np.ndarray]:
    """:data:`WINDOWS` informative windows of ``k`` values spread evenly over ``rows``.

    None crosses a row's end; chosen deterministically, so that ``bench verify`` looks for the
    same ones.
    """
    rows = [r for r in rows if len(r) >= k]
    if not rows:
        return []
    bounds = np.cumsum([len(r) - k + 1 for r in rows])
    total = int(bounds[-1])
    picks = np.unique(np.linspace(0, total - 1, min(CANDIDATES, total)).astype(np.int64))
    which = np.searchsorted(bounds, picks, side="right")
    offsets = picks - np.concatenate([[0], bounds[:-1]])[which]
    cand = np.stack([rows[r][o : o + k] for r, o in zip(which, offsets, strict=True)])
    good = cand[_informative(kind, cand)]
    if not len(good):
        return []
    chosen = np.unique(np.linspace(0, len(good) - 1, min(WINDOWS, len(good))).astype(np.int64))
    return [good[i] for i in chosen]


def _encode(kind: str, values: np.ndarray, vocab: list[str] | None) -> dict[str, bytes]:
    out = {}
    for enc in ENCODINGS[kind]:
        if enc == DECIMALS:
            rounded = np.round(values.astype(np.float64), 2)
            if len(np.unique(rounded)) >= len(values) // 2:  # a flat stretch rounds to zeros: says nothing
                out[enc] = rounded.tobytes()
        elif enc == "utf-8":
            if vocab is not None:
                out[enc] = "".join(vocab[int(i)] for i in values).encode("utf-8")
        elif np.issubdtype(np.dtype(enc), np.integer) and (
            values.min() < np.iinfo(enc).min or values.max() > np.iinfo(enc).max
        ):
            continue  # not representable: no model stores them that way
        else:
            out[enc] = np.ascontiguousarray(values.astype("<" + np.dtype(enc).str[1:])).tobytes()
    return out


# --- what is searched: the staged folder's blobs --------------------------------------------------


@dataclass
class Blob:
    """Bytes to search and what they are.

    ``name`` (a file, ``file:entry``, or ``file (numbers as float32)``), ``where(offset)`` names the
    place of a hit (the zip entry and its tensor key).
    """

    name: str
    data: bytes | mmap.mmap
    entries: list[tuple[int, int, str]] | None = None  # (start, end, label) of a zip's stored entries

    def where(self, offset: int) -> str:
        """Where a hit at ``offset`` lies: the zip entry holding it, or the blob's name."""
        for start, end, label in self.entries or ():
            if start <= offset < end:
                return f"{self.name}:{label}"
        return self.name


def blobs(eval_dir: Path, checkpoint: str, skip: set[str] = frozenset()) -> Iterator[Blob]:
    """The checkpoint and each staged file but the task's own (``skip``), in searchable forms.

    The checkpoint raw, its compressed entries inflated, its pickle's numbers; each file raw, the
    numbers it spells, its base64 literals decoded.
    """
    path = eval_dir / checkpoint
    if path.is_file() and path.stat().st_size:
        yield from _checkpoint_blobs(path)
    for f in sorted(eval_dir.iterdir()):
        if f.name == checkpoint or f.name in skip or not f.is_file() or f.is_symlink():
            continue
        with open(f, "rb") as source:
            data = source.read(MAX_BLOB)
        yield Blob(f.name, data)
        yield Blob(f"{f.name} (escapes read)", _unescaped(data))
        yield from _number_blobs(f.name, _spelled(data))
        for n, literal in enumerate(B64.findall(data)):
            decoded = _b64(literal)
            if decoded:
                yield Blob(f"{f.name} (base64 literal {n + 1})", decoded)


def _checkpoint_blobs(path: Path) -> Iterator[Blob]:
    with open(path, "rb") as f:
        raw = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    entries, inflated, pickle = _zip_entries(path, raw)
    keys, floats, ints = _pickle_facts(pickle) if pickle is not None else ({}, [], [])
    named = [(a, b, f"{label} (tensor {keys[label.rsplit('/', 1)[-1]]!r})") if "/data/" in label and
             label.rsplit("/", 1)[-1] in keys else (a, b, label) for a, b, label in entries]  # fmt: skip
    yield Blob(path.name, raw, named)  # searched in its first MAX_BLOB bytes
    for label, data in inflated:
        yield Blob(f"{path.name}:{label}", data)
    yield from _number_blobs(f"{path.name}:data.pkl floats", np.array(floats, dtype=np.float64))
    yield from _number_blobs(f"{path.name}:data.pkl integers", np.array(ints, dtype=np.float64))


def _zip_entries(path: Path, raw) -> tuple[list, list, bytes | None]:
    """A zip's stored entries, its compressed ones inflated (bounded), and its ``data.pkl``.

    Entries as (start, end, name) in the file. A file that is no zip (a legacy ``torch.save``) is
    searched raw only.
    """
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError):
        return [], [], None
    stored, inflated, pickle, budget = [], [], None, 0
    with archive:
        for info in archive.infolist()[:100_000]:
            start = _data_offset(raw, info)
            if info.compress_type == zipfile.ZIP_STORED and start is not None:
                stored.append((start, start + info.compress_size, info.filename))
            elif info.file_size <= MAX_INFLATE - budget:  # all inflated entries together: MAX_INFLATE at most
                try:
                    with archive.open(info) as member:
                        inflated.append((info.filename, member.read(MAX_INFLATE - budget)))
                        budget += len(inflated[-1][1])
                # NotImplementedError: zipfile's answer to a compression method it cannot read (an
                # agent's file)
                except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, zlib.error, EOFError):
                    continue
            if info.filename.endswith("data.pkl") and info.file_size <= MAX_PICKLE:
                try:
                    pickle = archive.read(info)
                except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, zlib.error, EOFError):
                    pickle = None
    return stored, inflated, pickle


def _data_offset(raw, info: zipfile.ZipInfo) -> int | None:
    """Where an entry's bytes begin.

    After its local header (30 bytes, its name, its extra field).
    """
    at = info.header_offset
    if at + 30 > len(raw) or raw[at : at + 4] != b"PK\x03\x04":
        return None
    name_len, extra_len = struct.unpack("<HH", raw[at + 26 : at + 30])
    return at + 30 + name_len + extra_len


def _pickle_facts(pickle: bytes) -> tuple[dict[str, str], list[float], list[int]]:
    """What a pickle holds, read from the opcodes alone.

    Each storage key -> the last dictionary key pushed before its persistent id (the tensor's name
    in a state dict), and the numbers the pickle holds (a config's lists), in order.
    """
    keys: dict[str, str] = {}
    floats: list[float] = []
    ints: list[int] = []
    memo: dict[int, object] = {}
    strings: list[str] = []
    last = None
    try:
        for op, arg, _ in pickletools.genops(pickle):
            value = None
            if op.name in ("BINUNICODE", "SHORT_BINUNICODE", "UNICODE", "BINUNICODE8"):
                value = arg
            elif op.name in ("BINGET", "LONG_BINGET", "GET"):
                value = memo.get(int(arg))
            elif op.name in ("BINPUT", "LONG_BINPUT", "PUT"):
                memo[int(arg)] = last
            elif op.name == "MEMOIZE":
                memo[len(memo)] = last
            elif op.name in ("BINFLOAT", "FLOAT"):
                floats.append(float(arg))
            elif op.name in ("BININT", "BININT1", "BININT2", "LONG1", "LONG4", "INT", "LONG") and isinstance(arg, int):
                ints.append(arg)
            if op.name not in ("BINPUT", "LONG_BINPUT", "PUT", "MEMOIZE"):
                last = value
            if isinstance(value, str):
                if len(strings) >= 2 and strings[-1] == "storage" and value not in keys:
                    name = next((s for s in reversed(strings[:-1]) if s not in ("storage", "cpu")), None)
                    keys[value] = name
                strings.append(value)
                del strings[:-64]
    except (ValueError, EOFError, struct.error, UnicodeDecodeError):
        pass  # a broken pickle: what was read so far
    return {k: v for k, v in keys.items() if v}, floats, ints


def _spelled(text: bytes) -> np.ndarray:
    """The numbers a text spells, in order."""
    return np.array([float(t) for t in NUMBER.findall(text)], dtype=np.float64)


def _number_blobs(name: str, values: np.ndarray) -> Iterator[Blob]:
    """Numbers (a script's, a pickle's), in order, in each encoding a window may have."""
    if len(values) < 16:
        return
    with np.errstate(over="ignore", invalid="ignore"):
        for enc in ("float64", "float32", "float16"):
            yield Blob(f"{name} (numbers as {enc})", values.astype(enc).tobytes())
        yield Blob(f"{name} (numbers to {DECIMALS})", np.round(values, 2).tobytes())
        whole = values[np.isfinite(values) & (values == np.round(values)) & (np.abs(values) < 2**62)]
        if len(whole) >= 16:
            for enc in ("int64", "int32", "uint16", "uint8"):
                fits = whole[(whole >= np.iinfo(enc).min) & (whole <= np.iinfo(enc).max)]
                yield Blob(f"{name} (numbers as {enc})", fits.astype(enc).tobytes())


ESCAPE = re.compile(r"\\([ntr'\"\\])")
ESCAPED = {"n": "\n", "t": "\t", "r": "\r", "'": "'", '"': '"', "\\": "\\"}


def _unescaped(data: bytes) -> bytes:
    r"""A script's text with a string literal's escapes read (``\n`` a newline).

    That is, a text's ``repr`` in a script.
    """
    return ESCAPE.sub(lambda m: ESCAPED[m.group(1)], data.decode("utf-8", "replace")).encode("utf-8")


def _b64(literal: bytes) -> bytes | None:
    try:
        data = base64.b64decode(literal, validate=True)
    except (binascii.Error, ValueError):
        return None
    try:
        inflater = zlib.decompressobj(zlib.MAX_WBITS | 32)  # zlib or gzip
        return inflater.decompress(data, MAX_INFLATE) or data
    except zlib.error:
        return data


# --- the search -----------------------------------------------------------------------------------


def scan(
    eval_dir: Path, checkpoint: str, kind: str, targets: list[np.ndarray], *, vocab=None, skip=frozenset()
) -> dict:
    """Look for the targets in the staged folder.

    ``{"found": [...], "windows", "encodings", "bytes", "seconds"}``. Each finding: ``where`` (file,
    entry, tensor), ``encoding``, ``order``, ``windows`` found of ``of`` drawn.
    """
    t0 = time.perf_counter()
    arrays = [np.asarray(t) for t in targets]
    if not arrays or any(a.dtype.kind not in "biuf" for a in arrays):  # a task whose targets are no numeric arrays
        return {"found": [], "windows": 0, "skipped": "the targets are not numeric arrays", "bytes": 0, "seconds": 0.0}
    drawn = windows(kind, arrays, vocab)
    found, searched, truncated = [], 0, []
    for blob in blobs(eval_dir, checkpoint, set(skip)):
        searched += min(len(blob.data), MAX_BLOB)
        if len(blob.data) > MAX_BLOB:
            truncated.append(blob.name)
        hits: dict[tuple[str, str], list[int]] = {}
        groups: dict[tuple[str, str], list[bytes]] = {}
        for w in drawn:
            for enc, key in w.keys.items():
                groups.setdefault((enc, w.order), []).append(key)
        for group, keys in groups.items():
            # a large blob: the rest of an encoding's windows only once one of its first spread few
            # is there
            first = keys[:: max(1, len(keys) // FIRST)] if len(blob.data) > LARGE else keys
            where = [at for at in (blob.data.find(k, 0, MAX_BLOB) for k in first) if at >= 0]
            if where and len(first) < len(keys):
                where += [at for at in (blob.data.find(k, 0, MAX_BLOB) for k in keys if k not in first) if at >= 0]
            if where:
                hits[group] = where
        for (enc, order), where in sorted(hits.items()):
            of = len(groups[(enc, order)])
            if len(where) >= min(MIN_FOUND, of):
                found.append(
                    {"where": blob.where(where[0]), "encoding": enc, "order": order, "windows": len(where), "of": of}
                )
    encodings = sorted({e for w in drawn for e in w.keys})
    return {
        "found": found,
        "windows": len(drawn),
        "encodings": encodings,
        "bytes": searched,
        **({"truncated": truncated} if truncated else {}),
        "seconds": round(time.perf_counter() - t0, 3),
    }
