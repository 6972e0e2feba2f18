"""A fresh clone works wherever it is placed: under /tmp, under a home folder, inside a private folder (mode 0700, as
`mktemp -d` and /root are: no other user may enter it), on another file system.

Once, a clone under /tmp failed the sandbox-view test, which said the repository is not in the view: /tmp is the
sandboxes' private scratch tmpfs, and the repository (a harness place) is listed under it as an empty read-only
folder. It shows nothing of the host, and it makes a write into the repository fail loudly instead of vanishing with
the sandbox's /tmp, so it stays; the tests now say exactly that. These tests copy the
working tree (what `git clone` of it would hold) to each place, give it its own `.venv` (a bare venv that reads this
one's site-packages and names the clone in a .pth file, as `make install`'s editable install does, so that the
interpreter's prefix lies inside the clone),
and run `bench` from there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _clone(dest: Path) -> Path:
    """The working tree's tracked and unignored files at ``dest`` (what a clone of it holds) and a ``.venv`` in it."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the files a clone would hold cannot be listed")
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest / ".venv")], check=True)
    purelib = Path(sysconfig.get_paths()["purelib"])
    folders = dict.fromkeys([str(purelib)] + [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()])
    (site,) = (dest / ".venv" / "lib").glob("python3*/site-packages")
    # the clone itself as an editable install names it (pip install -e), and the packages this interpreter imports
    (site / "this-machines-packages.pth").write_text("\n".join([str(dest), *folders]) + "\n")
    return dest


def _bench(clone: Path, *args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(clone / ".venv" / "bin" / "python"), "-m", "bench.entrypoint", *args],
        cwd=clone,
        env=env or os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _private(folder: Path) -> Path:
    """``folder`` made, with mode 0700: only its owner enters it."""
    folder.mkdir(parents=True)
    folder.chmod(0o700)
    return folder


def _places(tmp_path: Path) -> dict[str, tuple[Path, dict]]:
    home = tmp_path / "home" / "someone"
    out = {"tmp": (tmp_path / "clone", {}), "home": (home / "src" / "clone", {"HOME": str(home)})}
    out["private"] = (_private(tmp_path / "private") / "clone", {})
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK) and os.stat(shm).st_dev != os.stat(tmp_path).st_dev:
        out["other-disk"] = (shm / f"bench-clone-{os.getpid()}-{tmp_path.name}", {})
    return out


@pytest.mark.parametrize("where", ["tmp", "home", "private", "other-disk"])
def test_the_sandbox_view_from_a_clone_shows_its_venv_and_never_the_clone(tmp_path, where):
    places = _places(tmp_path)
    if where not in places:
        pytest.skip("/dev/shm is missing, not writable, or on the same file system as the temporary folder")
    dest, extra = places[where]
    try:
        clone = _clone(dest)
        imported = subprocess.run(
            [str(clone / ".venv/bin/python"), "-c", "import bench; print(bench.__file__)"],
            cwd=clone,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert Path(imported) == clone / "bench" / "__init__.py"  # the clone's code runs, not this checkout's
        proc = _bench(clone, "sandbox", "view", "--no-gpu", env={**os.environ, **extra})
        assert proc.returncode == 0, proc.stderr
        agent, predictor = proc.stdout.split("the predictor's sandbox")
        for text in (agent, predictor):
            paths = [line.split()[1] for line in text.splitlines() if line.startswith("  ") and len(line.split()) > 1]
            # the clone's venv (its interpreter's prefix) and the sandbox's own files are bound, read-only ...
            assert str(clone / ".venv") in paths and str(clone / "bench" / "sandbox" / "launcher.py") in paths
            # ... the clone itself and its tasks, store and tests are not: the clone appears at most as an empty
            # read-only folder (under /tmp, as the tmp and private places are: the sandbox's private /tmp, where a
            # write fails loudly), never bound
            shown = [line.split()[0] for line in text.splitlines() if line.split()[1:2] == [str(clone)]]
            assert shown == (["empty"] if where in ("tmp", "private") else []), shown
            assert not any(p.startswith(str(clone / d)) for p in paths for d in ("tasks", "mlruns", "tests"))
            assert "  ro       " + str(clone / ".venv") in text
    finally:
        if where == "other-disk":
            shutil.rmtree(dest, ignore_errors=True)


def test_the_first_week_checks_pass_in_a_clone_inside_a_private_folder(tmp_path):
    """Once, `make test` failed in a clone inside a 0700 folder: the `make lab` check ran `make -n` in the clone as
    `nobody`, who may not enter it. The checks that act as another user now pass there (run by this user: as root,
    the `make lab` check still asks what a user who is not root gets)."""
    clone = _clone(_private(tmp_path / "private") / "clone")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "BENCH_TESTS_"))}
    proc = subprocess.run(
        [str(clone / ".venv/bin/python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "tests/test_first_week.py"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout, proc.stdout[-3000:]


@pytest.mark.slow  # a short real run (the baseline cut to one epoch) on generated T6 data: ~40 s on 2 cores
def test_a_short_run_from_a_clone_under_tmp(tmp_path, generated_t6):
    clone = _clone(tmp_path / "clone")
    command = 'sed \'s/"epochs": 5/"epochs": 1/\' train.py > run_1.py && python run_1.py > run_1.log 2>&1'
    args = ["run", "--agent", "command", "--agent-command", command, "--task", "t6", "--budget", "2m"]
    proc = _bench(clone, *args, "--grace", "3", "--campaign", "fresh-clone", "--quiet", timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    from bench.paths import workspaces_dir
    from bench.result import RunResult

    (found,) = (workspaces_dir() / "fresh-clone").glob("*/result.json")
    result = RunResult.load(found)
    assert result.status == "success" and result.sandboxed is True, result.reason
    assert result.score is not None and result.score > 0  # an official score, from the clone's own scorer
