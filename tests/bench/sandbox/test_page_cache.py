"""The page cache as a channel between sandboxes (issue 38, item 1): what the filters close, and what they cannot.

A scored predictor passes T6-shaped test rows to a receiver through the cached pages of a file on disk that both can
read (the same inode, as every file under ``/usr`` and the venv is). The receiver that asks with
``preadv2(..., RWF_NOWAIT)`` gets ``EOPNOTSUPP`` now, in the prober's sandbox and in an agent's, and receives
nothing; the same receiver without the filter (the code before issue 38, the control) receives most rows. The
predictor can no longer evict (``MADV_PAGEOUT``, ``MADV_COLD``, ``fadvise``) or use io_uring, and an agent can no
longer drop a shared file's pages with ``fadvise(DONTNEED)``.

What stays open, measured by tests/benchmarks/page_cache_channel.py and written down in docs/sandbox-and-rules.md:
a receiver that times plain first touches (no special call) received 48 of 48 rows, with and without the filter.
Timing has no place in a test here (a loaded 2-core machine): the benchmark prints it.
"""

from __future__ import annotations

import errno
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bench.sandbox import Policy, Sandbox, default_hidden, default_readable, probe
from bench.sandbox.resource_limits import Limits, RunGroup
from bench.scoring.scorer import sandbox_wrap
from tests.bench.sandbox import page_cache_channel as ch

pytestmark = pytest.mark.skipif(probe() is not None, reason=f"no usable sandbox here: {probe()}")

N_ROWS = 48  # what the prober read in a real run; 10,752 bits, one page each (42 MiB)
SLOT = 1  # a NOWAIT answer is exact: no need for the timing receiver's 16 KiB slots


def _agent_box(ws: Path, shared: Path) -> Sandbox:
    policy = Policy(cwd=ws, writable=(ws,), readable=(*default_readable(), shared), hidden=default_hidden())
    return Sandbox(policy, limits=RunGroup(Limits()))


@pytest.fixture
def boxes(tmp_path):
    eval_dir, ws = tmp_path / "eval", tmp_path / "ws"
    eval_dir.mkdir()
    ws.mkdir()
    scored, prober, agent = sandbox_wrap(eval_dir), sandbox_wrap(eval_dir), _agent_box(ws, eval_dir)
    yield eval_dir, ws, scored, prober, agent
    for box in (scored, prober, agent):
        box.close()
        box.limits.remove()


def _through(sender, receiver, cwd_s: Path, cwd_r: Path, path: Path, how: str):
    sent = ch.rows(N_ROWS)
    bits = ch.to_bits(sent)
    ch.evict(path)
    if ch.cached_fraction(path) > 0.01:
        pytest.skip("this file system keeps the file's pages cached after fadvise(DONTNEED): no cold file to test")
    ch.send(sender.wrap, cwd_s, path, bits, SLOT)
    got = ch.receive(receiver.wrap, cwd_r, path, len(bits), how, SLOT)
    return sent, got


def test_a_nowait_receiver_gets_no_row_from_a_scored_predictor_in_the_prober_or_an_agent(boxes):
    eval_dir, ws, scored, prober, agent = boxes
    path = ch.shared_file(eval_dir / "shared.bin", N_ROWS * ch.ROW_BITS, SLOT)
    for receiver, cwd in ((prober, eval_dir), (agent, ws)):
        sent, got = _through(scored, receiver, eval_dir, cwd, path, "nowait")
        assert got.get("errno") == errno.EOPNOTSUPP, got  # the filter's answer: no residency to read
        assert ch.rows_received(sent, got) == 0
    # control: the same prober and agent sandboxes without the filter (before issue 38) receive most rows
    for receiver, cwd in ((prober, eval_dir), (agent, ws)):
        unfiltered = Sandbox(replace(receiver.policy, seccomp=None))
        try:
            sent, got = _through(scored, unfiltered, eval_dir, cwd, path, "nowait")
        finally:
            unfiltered.close()
        assert ch.rows_received(sent, got) > N_ROWS // 2, got.get("bits", got)[:200]


EVICT = r"""
import ctypes, errno, json, mmap, os, sys
path = sys.argv[1]
fd = os.open(path, os.O_RDONLY)
m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
out = {}
for name, advice in (("cold", 20), ("pageout", 21)):
    try:
        m.madvise(advice)
        out[name] = 0
    except OSError as e:
        out[name] = e.errno
try:
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    out["dontneed"] = 0
except OSError as e:
    out["dontneed"] = e.errno
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
fd_ring = libc.syscall(425, 4, params)  # io_uring_setup(4, params)
out["io_uring"] = "ring" if fd_ring >= 0 else ctypes.get_errno()
print(json.dumps(out))
"""


def test_neither_sandbox_can_evict_a_shared_files_pages_or_start_io_uring(boxes):
    import json

    eval_dir, ws, scored, _, agent = boxes
    path = ch.shared_file(eval_dir / "shared.bin", 64)

    def run(box, cwd):
        done = subprocess.run(
            box.wrap([sys.executable, "-c", EVICT, str(path)]), capture_output=True, text=True, cwd=cwd
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    assert run(scored, eval_dir) == {"cold": errno.EINVAL, "pageout": errno.EINVAL, "dontneed": errno.EPERM,
                                     "io_uring": errno.ENOSYS}  # fmt: skip
    assert run(agent, ws) == {"cold": errno.EINVAL, "pageout": errno.EINVAL, "dontneed": errno.EPERM,
                              "io_uring": errno.ENOSYS}  # fmt: skip
    unfiltered = Sandbox(replace(agent.policy, seccomp=None))
    try:
        control = run(unfiltered, ws)
    finally:
        unfiltered.close()
    assert control["cold"] == control["pageout"] == control["dontneed"] == 0, control  # the calls work without it


def test_the_pages_a_scored_predictor_loaded_are_gone_before_the_prober_starts(boxes):
    """The timing-only form, closed between the scorer's two predictors and before the next evaluation: the pages a
    predictor was the first to load are charged to the predictors' cgroup and dropped
    (:meth:`RunGroup.drop_page_cache`) after it ends. Judged by the strongest receiver there is, one without any
    filter asking with RWF_NOWAIT (a timing receiver can only see less), and by mincore from this process."""
    eval_dir, _, scored, prober, _ = boxes
    if not scored.limits.active:
        pytest.skip(f"no cgroup here ({scored.limits.error or 'rlimits'}): nothing to drop the pages from")
    path = ch.shared_file(eval_dir / "shared.bin", N_ROWS * ch.ROW_BITS, SLOT)
    sent = ch.rows(N_ROWS)
    bits = ch.to_bits(sent)
    ch.send(scored.wrap, eval_dir, path, bits, SLOT)
    loaded = ch.cached_fraction(path)
    assert abs(loaded - bits.count("1") / len(bits)) < 0.01, loaded  # the sender's bits, page for page
    assert scored.limits.drop_page_cache() is None
    assert ch.cached_fraction(path) < 0.01
    oracle = Sandbox(replace(prober.policy, seccomp=None))
    try:
        got = ch.receive(oracle.wrap, eval_dir, path, len(bits), "nowait", SLOT)
    finally:
        oracle.close()
    assert ch.rows_received(sent, got) == 0  # under 1 % of rows: none
    assert got["bits"].count("1") < len(bits) // 100  # and next to no bit reads as a loaded page
