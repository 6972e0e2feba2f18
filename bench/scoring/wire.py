"""The pipe between the trusted scorer and the sandboxed predictor.

Length-prefixed frames of plain data.

Why not pickle (or ``torch.save``): the scorer must never run anything the predictor sends, and the
predictor runs the agent's code. A frame is one kind byte, an 8-byte length and a payload: ``J`` a
JSON object, ``A`` named numeric arrays: a JSON header (name, dtype, shape of each) and their raw
bytes, read back with ``np.frombuffer`` for a short list of plain numeric dtypes only (no object
arrays, so no code; and ~50x cheaper than ``.npz`` for the thousands of small frames of T6's
one-window-at-a-time feed). Frames larger than the reader's limit are refused before they are read
into memory.

Standard library, numpy and :mod:`bench.errors` only: the predictor imports this module inside the
sandbox.
"""

from __future__ import annotations

import json
import struct
from typing import BinaryIO

import numpy as np

from bench.errors import BenchError

JSON, ARRAYS = b"J", b"A"
_HEADER = struct.Struct("<cQ")
MAX_FRAME = 1 << 31  # 2 GiB: far above any batch of outputs of the seven tasks
DTYPES = frozenset(
    ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64"]
)
_LEN = struct.Struct("<I")


class WireError(BenchError, RuntimeError):
    """A frame that breaks the protocol.

    The other side closed the pipe, sent garbage or too much.
    """


def _read_exact(stream: BinaryIO, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = stream.read(min(left, 1 << 24))
        if not chunk:
            raise WireError(f"the pipe closed after {n - left} of {n} bytes")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def send_json(stream: BinaryIO, obj: dict) -> None:
    """Send one JSON frame."""
    payload = json.dumps(obj).encode()
    stream.write(_HEADER.pack(JSON, len(payload)) + payload)
    stream.flush()


def send_arrays(stream: BinaryIO, arrays: dict[str, np.ndarray]) -> None:
    """Send one frame of named numeric arrays."""
    arrays = {name: np.ascontiguousarray(a) for name, a in arrays.items()}
    header = json.dumps([[name, a.dtype.name, list(a.shape)] for name, a in arrays.items()]).encode()
    n = _LEN.size + len(header) + sum(a.nbytes for a in arrays.values())
    stream.write(_HEADER.pack(ARRAYS, n) + _LEN.pack(len(header)) + header)
    for a in arrays.values():
        stream.write(memoryview(a).cast("B"))
    stream.flush()


def _arrays(payload: bytes) -> dict[str, np.ndarray]:
    try:
        (n,) = _LEN.unpack_from(payload)
        header = json.loads(payload[_LEN.size : _LEN.size + n])
        offset, out = _LEN.size + n, {}
        for name, dtype, shape in header:
            if dtype not in DTYPES or not all(isinstance(d, int) and d >= 0 for d in shape):
                raise WireError(f"array {name!r}: dtype {dtype!r} / shape {shape!r} not allowed")
            count = int(np.prod(shape, dtype=np.int64))
            size = count * np.dtype(dtype).itemsize
            if offset + size > len(payload):
                raise WireError(f"array {name!r} runs past the end of its frame")
            out[str(name)] = np.frombuffer(payload, dtype=dtype, count=count, offset=offset).reshape(shape)
            offset += size
    except (ValueError, TypeError, struct.error) as e:
        raise WireError(f"a malformed array frame: {e}") from e
    if offset != len(payload):
        raise WireError("an array frame with trailing bytes")
    return out


def receive(stream: BinaryIO, max_bytes: int = MAX_FRAME) -> dict:
    """The next frame as a dict: a JSON object, or ``{name: ndarray}``.

    Raises :class:`WireError` on bad frames.
    """
    kind, n = _HEADER.unpack(_read_exact(stream, _HEADER.size))
    if kind not in (JSON, ARRAYS):
        raise WireError(f"unknown frame kind {kind!r}")
    if n > max_bytes:
        raise WireError(f"a frame of {n:,} bytes exceeds the limit of {max_bytes:,}")
    payload = _read_exact(stream, n)
    if kind == JSON:
        try:
            obj = json.loads(payload)
        except ValueError as e:
            raise WireError(f"a JSON frame that is not JSON: {e}") from e
        if not isinstance(obj, dict):
            raise WireError("a JSON frame that is not an object")
        return obj
    return _arrays(payload)
