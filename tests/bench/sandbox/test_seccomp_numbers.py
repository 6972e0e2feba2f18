"""The seccomp filters' numbers, checked against sources this project did not write (issue 38, item 4).

The filter's system call numbers and ``fcntl``/``madvise``/``fadvise``/``RWF_`` constants are typed by hand in
:mod:`bench.sandbox.seccomp`; a test that took them from that table could not fail on a wrong one. Two sources here:

* **libseccomp's resolver** (``seccomp_syscall_resolve_name_arch``, called through ctypes on ``libseccomp.so.2``, the
  library behind Debian's ``python3-seccomp`` and PyPI's ``pyseccomp``): every architecture it knows, whichever this
  machine is.
* **the kernel's UAPI headers** (Debian's ``linux-libc-dev``), read by the C preprocessor (``cpp -dM``): the
  machine's own ``asm/unistd_64.h`` for x86_64, ``asm-generic/unistd.h`` (the table aarch64 uses) for aarch64,
  and ``linux/fcntl.h``, ``linux/fs.h``, ``asm-generic/mman-common.h``, ``linux/fadvise.h`` for the constants.

Each number of each architecture the filter supports must agree with every source that knows the name, and at least
one source must know it (a name a table leaves out must be unknown to the sources for that architecture too). Each
source is skipped with its reason where absent (``.ci/run`` installs both); with neither the test skips.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest

from bench.sandbox import seccomp

INCLUDE = Path("/usr/include")


@cache
def _libseccomp():
    name = ctypes.util.find_library("seccomp")
    if not name:
        return None
    lib = ctypes.CDLL(name)
    lib.seccomp_arch_resolve_name.restype = ctypes.c_uint32
    lib.seccomp_arch_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_syscall_resolve_name_arch.restype = ctypes.c_int
    lib.seccomp_syscall_resolve_name_arch.argtypes = [ctypes.c_uint32, ctypes.c_char_p]
    return lib


def libseccomp_numbers(machine: str, names) -> dict[str, int | None] | None:
    """``{name: number or None (unknown on that architecture)}`` from libseccomp; None without the library."""
    lib = _libseccomp()
    if lib is None:
        return None
    arch = lib.seccomp_arch_resolve_name(machine.encode())
    assert arch == seccomp.ARCHES[machine][0], f"libseccomp's AUDIT_ARCH for {machine}: {arch:#x}"
    out = {}
    for name in names:
        nr = lib.seccomp_syscall_resolve_name_arch(arch, name.encode())
        out[name] = nr if nr >= 0 else None  # negative: libseccomp's pseudo-number for a call the arch lacks
    return out


def _macros(source: str, flags: tuple[str, ...] = ()) -> dict[str, str] | None:
    """``cpp -dM``'s macro table (``#define NAME VALUE``) for C ``source``; None without cpp or a header it names."""
    cpp = shutil.which("cpp")
    if cpp is None:
        return None
    done = subprocess.run([cpp, "-dM", *flags, "-"], capture_output=True, text=True, input=source)
    if done.returncode:
        return None
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^#define (\w+) (.+)$", done.stdout, re.M)}


def _value(table: dict[str, str], name: str, depth: int = 0) -> int | None:
    """A macro's integer value: names replaced by their values, casts such as ``(__kernel_rwf_t)`` dropped."""
    if name not in table or depth > 20:
        return None
    text = re.sub(r"\(\s*__\w+\s*\)", "", table[name])
    for ident in set(re.findall(r"(?<!\w)[A-Za-z_]\w*", text)):  # not the x of 0x8
        v = _value(table, ident, depth + 1)
        if v is None:
            return None
        text = re.sub(rf"\b{ident}\b", str(v), text)
    if not re.fullmatch(r"[\s()0-9a-fA-FxX+|<-]*", text):
        return None
    return int(eval(text, {"__builtins__": {}}))  # digits, + | << and parentheses only (checked above)


@cache
def _header_table(machine: str) -> dict[str, str] | None:
    if machine == "x86_64":
        header = next(iter(INCLUDE.glob("*/asm/unistd_64.h")), None)
        return _macros(f'#include "{header}"\n') if header else None
    if machine == "aarch64":  # aarch64's asm/unistd.h is asm-generic's table with 64-bit longs
        header = INCLUDE / "asm-generic/unistd.h"
        return _macros("#include <asm-generic/unistd.h>\n", ("-D__BITS_PER_LONG=64",)) if header.is_file() else None
    return None


def header_numbers(machine: str, names) -> dict[str, int | None] | None:
    table = _header_table(machine)
    if table is None:
        return None
    return {name: _value(table, f"__NR_{name}") for name in names}


@cache
def _constant_table() -> dict[str, str] | None:
    headers = ["linux/fcntl.h", "linux/fs.h", "asm-generic/mman-common.h", "linux/fadvise.h"]
    if not all((INCLUDE / h).is_file() for h in headers):
        return None
    main = _macros("".join(f"#include <{h}>\n" for h in headers))
    # the 32-bit ABIs' F_*LK64 exist for 32-bit longs or the kernel only: asm-generic/fcntl.h read as the kernel
    wide = _macros("#include <asm-generic/fcntl.h>\n", ("-D__KERNEL__",))
    return None if main is None or wide is None else {**wide, **main}


def filter_constants() -> dict[str, int]:
    """Every constant the filter compares an argument with, by its kernel name (``F_*``, ``RWF_*``, ``MADV_*``,
    ``POSIX_FADV_*``)."""
    return {
        name: value
        for name, value in vars(seccomp).items()
        if re.fullmatch(r"(F|RWF|MADV|POSIX_FADV)_[A-Z0-9_]+", name) and isinstance(value, int)
    }


def mismatches(machine: str, numbers: dict[str, int]) -> tuple[list[str], list[str]]:
    """(disagreements, names no source could check) for one architecture's table ``numbers``."""
    every = set().union(*(set(t) for _, t in seccomp.ARCHES.values()))
    sources = {
        "libseccomp": libseccomp_numbers(machine, every),
        "kernel headers": header_numbers(machine, every),
    }
    sources = {k: v for k, v in sources.items() if v is not None}
    if not sources:
        pytest.skip(f"neither libseccomp.so.2 nor the kernel headers (linux-libc-dev, cpp) here for {machine}")
    wrong, unchecked = [], []
    for name in sorted(every):
        ours = numbers.get(name)
        known = {src: table[name] for src, table in sources.items() if table[name] is not None}
        for src, theirs in known.items():
            if ours != theirs:
                wrong.append(f"{machine} {name}: the filter says {ours}, {src} says {theirs}")
        if ours is not None and not known:
            unchecked.append(name)
    return wrong, unchecked


@pytest.mark.parametrize("machine", sorted(seccomp.ARCHES))
def test_every_system_call_number_agrees_with_libseccomp_and_the_kernel_headers(machine):
    wrong, unchecked = mismatches(machine, seccomp.ARCHES[machine][1])
    assert not wrong, "\n".join(wrong)
    assert not unchecked, f"{machine}: no source here knows {unchecked}: check them by hand or update the sources"


def test_every_fcntl_madvise_and_rwf_constant_agrees_with_the_kernel_headers():
    table = _constant_table()
    if table is None:
        pytest.skip("no kernel headers (linux-libc-dev) or no cpp here: apt-get install linux-libc-dev cpp")
    ours = filter_constants()
    assert {"F_GETLK", "F_OFD_SETLKW", "F_SETLEASE", "F_GETLK64", "RWF_NOWAIT", "MADV_PAGEOUT"} <= set(ours)
    wrong = [f"{n}: the filter says {v}, the headers say {_value(table, n)}" for n, v in ours.items()
             if _value(table, n) != v]  # fmt: skip
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("machine", sorted(seccomp.ARCHES))
def test_a_changed_number_is_caught(machine):
    """The check above can fail: one number off by one, or a call moved to another's number, is named."""
    numbers = dict(seccomp.ARCHES[machine][1])
    numbers["flock"] += 1
    numbers["mincore"] = numbers["fcntl"]
    wrong, _ = mismatches(machine, numbers)
    assert any(f"{machine} flock:" in w for w in wrong) and any(f"{machine} mincore:" in w for w in wrong), wrong
