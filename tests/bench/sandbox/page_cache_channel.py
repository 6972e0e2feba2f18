"""The page-cache channel of issue 38, as a sender and two receivers that run in real sandboxes (shared by
test_page_cache.py and tests/benchmarks/page_cache_channel.py).

A file on disk that two sandboxes can both read is one inode with one set of cached pages. The sender (a scored
predictor) loads the pages of slot ``i`` (:data:`SLOT` pages) when bit ``i`` of what it wants to pass is 1 (a
mapping with ``MADV_RANDOM``, so no readahead loads neighbours); a receiver (the prober, or an agent of another
run) then asks each slot:

* ``nowait``: ``preadv2(..., RWF_NOWAIT)`` fails with ``EAGAIN`` exactly when the page is not cached (pages asked
  from the last to the first: a miss starts readahead forward, over pages already asked);
* ``timing``: the first touch of each page of a ``MADV_RANDOM`` mapping, timed: a cached page is a minor fault
  (microseconds), one on disk a read (tens to hundreds of microseconds); the threshold is the geometric mean of the
  10th and 90th percentiles. No special call: this is the form no filter can deny.

What is sent are T6-shaped rows (7 float32 a row, 224 bits): the rows a scored predictor sees in the test stream.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

PAGE = 4096
ROW_BITS = 7 * 32
SLOT = 4  # pages a bit: the 16 KiB slots (the timing receiver keeps the fastest of a slot's first touches)

SENDER = r"""
import mmap, os, sys
path, bits, slot = sys.argv[1], open(sys.argv[2], "rb").read(), int(sys.argv[3])
fd = os.open(path, os.O_RDONLY)
m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
m.madvise(mmap.MADV_RANDOM)
n = 0
for i, b in enumerate(bits):
    if b == 49:  # "1"
        for j in range(slot):
            n += m[(i * slot + j) * 4096]
print(len(bits))
"""

RECEIVER = r"""
import ctypes, errno, json, mmap, os, sys, time
path, n, how, slot = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
fd = os.open(path, os.O_RDONLY)
out = {"how": how}
if how == "nowait":
    buf = bytearray(1)
    bits = [0] * n
    try:
        for i in reversed(range(n)):
            try:
                os.preadv(fd, [buf], i * slot * 4096, os.RWF_NOWAIT)
                bits[i] = 1
            except BlockingIOError:
                bits[i] = 0
        out["bits"] = "".join(map(str, bits))
    except OSError as e:
        out["errno"] = e.errno
else:
    m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    m.madvise(mmap.MADV_RANDOM)
    ns = [0] * n
    clock = time.perf_counter_ns
    for i in range(n):
        best = None
        for j in range(slot):
            t = clock()
            m[(i * slot + j) * 4096]
            took = clock() - t
            best = took if best is None or took < best else best
        ns[i] = best
    s = sorted(ns)
    cut = (s[len(s) // 10] * s[len(s) * 9 // 10]) ** 0.5
    out["bits"] = "".join("1" if t < cut else "0" for t in ns)
    out["cut_ns"] = cut
print(json.dumps(out))
"""


def rows(n: int, seed: int = 6) -> np.ndarray:
    """``n`` T6-shaped rows (7 float32 each): what the scored predictor has seen of the test stream."""
    return np.random.default_rng(seed).standard_normal((n, 7)).astype(np.float32)


def to_bits(values: np.ndarray) -> str:
    return "".join(np.unpackbits(values.astype("<f4").view(np.uint8)).astype(str))


def from_bits(bits: str, n: int) -> np.ndarray:
    return np.packbits(np.array(list(bits[: n * ROW_BITS]), dtype=np.uint8)).view("<f4").reshape(n, 7)


def shared_file(path: Path, n_bits: int, slot: int = SLOT) -> Path:
    """A file of ``n_bits`` slots on disk, written, synced and evicted: no page cached (a cold shared file)."""
    with open(path, "wb") as f:
        f.write(os.urandom(16) * (n_bits * slot * PAGE // 16))
        f.flush()
        os.fsync(f.fileno())
    evict(path)
    return path


def evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def cached_fraction(path: Path) -> float:
    """The share of the file's pages in the page cache, from ``mincore`` in the test's own process (unfiltered: the
    ground truth; a private mapping faults nothing in)."""
    import ctypes
    import mmap

    size = path.stat().st_size
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        m = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        pages = (size + PAGE - 1) // PAGE
        vec = (ctypes.c_ubyte * pages)()
        anchor = ctypes.c_char.from_buffer(m)
        ok = libc.mincore(ctypes.c_void_p(ctypes.addressof(anchor)), ctypes.c_size_t(size), vec)
        del anchor
        m.close()
        if ok != 0:
            raise OSError(ctypes.get_errno(), "mincore")
        return sum(v & 1 for v in vec) / pages
    finally:
        os.close(fd)


def send(wrap, cwd: Path, path: Path, bits: str, slot: int = SLOT) -> None:
    bits_file = cwd / "bits.txt"
    bits_file.write_text(bits)
    done = subprocess.run(
        wrap([sys.executable, "-c", SENDER, str(path), str(bits_file), str(slot)]),
        capture_output=True,
        text=True,
        cwd=cwd,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    bits_file.unlink()


def receive(wrap, cwd: Path, path: Path, n_bits: int, how: str, slot: int = SLOT) -> dict:
    done = subprocess.run(
        wrap([sys.executable, "-c", RECEIVER, str(path), str(n_bits), how, str(slot)]),
        capture_output=True,
        text=True,
        cwd=cwd,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def rows_received(sent: np.ndarray, got: dict) -> int:
    """How many rows the receiver has bit for bit (0 when it received nothing)."""
    if "bits" not in got:
        return 0
    back = from_bits(got["bits"], len(sent))
    return int((back.view(np.uint32) == sent.view(np.uint32)).all(axis=1).sum())
