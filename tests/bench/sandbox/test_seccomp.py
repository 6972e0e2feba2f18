"""The seccomp filters' programs, run by a small classic-BPF interpreter here (the end-to-end tests in
test_channels.py run them in the kernel on this machine's architecture; this covers the other one too)."""

from __future__ import annotations

import errno
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from bench.sandbox import seccomp

ALLOW, DENY = 0x7FFF0000, 0x00050000 | errno.EPERM
AUDIT_I386 = 0x40000003


def run(program: bytes, nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """What the kernel would return for one system call: the filter's verdict (only the ops the filters use)."""
    args = (*args, *[0] * (6 - len(args)))
    data = struct.pack("<iIQ6Q", nr, arch, 0, *args)
    ops = [struct.unpack_from("=HBBI", program, i) for i in range(0, len(program), 8)]
    pc, a = 0, 0
    while True:
        code, jt, jf, k = ops[pc]
        if code == 0x20:  # ld [k]
            a = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif code == 0x15:  # jeq #k
            pc += 1 + (jt if a == k else jf)
        elif code == 0x45:  # jset #k
            pc += 1 + (jt if a & k else jf)
        elif code == 0x06:  # ret #k
            return k
        else:
            raise AssertionError(f"unexpected op {code:#x}")


@pytest.mark.parametrize("machine", sorted(seccomp.ARCHES))
def test_each_architecture_denies_what_its_profile_lists_and_allows_the_rest(machine):
    arch, nr = seccomp.ARCHES[machine]
    predictor, agent = (seccomp.program(p, machine) for p in (seccomp.PREDICTOR, seccomp.AGENT))
    fcntl = nr["fcntl"]
    for cmd in (seccomp.F_GETLK, seccomp.F_SETLK, seccomp.F_SETLKW, seccomp.F_OFD_GETLK, seccomp.F_OFD_SETLKW):
        assert run(predictor, fcntl, arch, (3, cmd)) == DENY
        assert run(predictor, fcntl, arch, (3, cmd | 1 << 32)) == DENY  # the kernel reads the low 32 bits
        assert run(agent, fcntl, arch, (3, cmd)) == ALLOW  # SQLite, git
    for cmd in (seccomp.F_SETLEASE, seccomp.F_GETLEASE, seccomp.F_NOTIFY):
        assert run(predictor, fcntl, arch, (3, cmd)) == run(agent, fcntl, arch, (3, cmd)) == DENY
    for cmd in (1, 2, 3, 4, 1030):  # F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_DUPFD_CLOEXEC
        assert run(predictor, fcntl, arch, (3, cmd)) == run(agent, fcntl, arch, (3, cmd)) == ALLOW
    for name in ("flock", "inotify_add_watch", "fanotify_init", "perf_event_open", "fadvise64", "readahead"):
        assert run(predictor, nr[name], arch) == DENY and run(agent, nr[name], arch) == ALLOW, name
    for name in ("ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "mincore", "cachestat", "keyctl"):
        assert run(predictor, nr[name], arch) == run(agent, nr[name], arch) == DENY, name
    for other in (0, 1, 56, 63, 64, 200):  # read/write/openat... whatever they are here: not listed
        if other not in nr.values():
            assert run(predictor, other, arch) == run(agent, other, arch) == ALLOW
    assert run(predictor, 0, AUDIT_I386) == run(agent, 0, AUDIT_I386) == DENY  # another ABI: fail closed


def test_x32_calls_are_denied_whole_on_x86_64():
    arch, _ = seccomp.ARCHES["x86_64"]
    agent = seccomp.program(seccomp.AGENT, "x86_64")
    assert run(agent, 0, arch) == ALLOW and run(agent, seccomp.X32_BIT | 0, arch) == DENY


def test_an_architecture_without_a_table_starts_no_sandbox():
    with pytest.raises(RuntimeError, match="no seccomp table for 'riscv64'"):
        seccomp.program(seccomp.AGENT, "riscv64")


def test_the_filter_folder_goes_with_the_process_that_wrote_it() -> None:
    """Each harness process writes its filters into a private temp folder; before, the folder stayed in /tmp for
    good (700 of them after one day of test runs). A child process writes one, prints its path and exits."""
    code = "from bench.sandbox import seccomp; print(seccomp.filter_file('predictor'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    written = Path(out.strip())
    assert written.name == "predictor.bpf"
    assert not written.parent.exists()


@pytest.mark.parametrize("machine", sorted(seccomp.ARCHES))
def test_page_cache_residency_and_eviction_are_denied_and_async_io_is_absent(machine):
    """Issue 38: RWF_NOWAIT reads tell a cached page from one on disk, MADV_PAGEOUT/MADV_COLD evict or age a
    mapping's pages, io_uring does both outside the classic calls. Kernel values: RWF_NOWAIT 8, MADV_COLD 20,
    MADV_PAGEOUT 21, POSIX_FADV_DONTNEED 4 (checked against the headers in test_seccomp_numbers.py)."""
    arch, nr = seccomp.ARCHES[machine]
    eopnotsupp, einval, enosys = (0x00050000 | e for e in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS))
    for program in (seccomp.program(p, machine) for p in (seccomp.PREDICTOR, seccomp.AGENT)):
        for call in ("preadv2", "pwritev2"):
            assert run(program, nr[call], arch, (3, 0, 1, 0, 0, 8)) == eopnotsupp  # RWF_NOWAIT
            assert run(program, nr[call], arch, (3, 0, 1, 0, 0, 8 | 1)) == eopnotsupp  # with RWF_HIPRI
            assert run(program, nr[call], arch, (3, 0, 1, 0, 0, 0)) == ALLOW  # a plain preadv2
            assert run(program, nr[call], arch, (3, 0, 1, 0, 0, 4)) == ALLOW  # RWF_SYNC
        for advice, verdict in ((20, einval), (21, einval), (4, ALLOW), (3, ALLOW), (14, ALLOW)):
            assert run(program, nr["madvise"], arch, (0, 4096, advice)) == verdict, advice  # DONTNEED/WILLNEED kept
        for call in ("io_uring_setup", "io_uring_enter", "io_uring_register", "io_setup"):
            assert run(program, nr[call], arch) == enosys, call
        assert run(program, nr["process_madvise"], arch) == DENY
    agent, predictor = seccomp.program(seccomp.AGENT, machine), seccomp.program(seccomp.PREDICTOR, machine)
    assert run(agent, nr["fadvise64"], arch, (3, 0, 0, 4)) == DENY  # POSIX_FADV_DONTNEED: drops shared pages
    assert run(agent, nr["fadvise64"], arch, (3, 0, 0, 2)) == ALLOW  # POSIX_FADV_SEQUENTIAL (cp, sort)
    assert run(predictor, nr["fadvise64"], arch, (3, 0, 0, 2)) == DENY  # a predictor: none at all
