"""Pinned agent CLIs, installed on demand into the cache, never globally.

Each CLI is a moving target (flags, event shapes, tool names change between releases), and the
benchmark compares agents, not CLI versions: so every adapter runs one pinned version, installed
into its own folder ``<cache>/clis/<name>-<version>/`` (``BENCH_CLI_DIR`` moves ``<cache>/clis``).
The npm CLIs go in with ``npm install --prefix``; Aider, a Python program with many pinned
dependencies, gets its own virtual environment there, so that it never touches the harness's.

A folder counts as installed only once its marker file is written, and a file lock serialises
installs of the same CLI, so parallel runs (several repeats, several GPUs) can all call
:func:`ensure_cli` safely.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchError
from bench.paths import clis_dir

MARKER = ".bench-installed"


@dataclass(frozen=True)
class CLI:
    """A CLI the harness installs: its package, pinned version and executable."""

    name: str  # the adapter's name
    kind: str  # "npm" or "pypi"
    package: str
    version: str
    binary: str  # the executable's name

    @property
    def spec(self) -> str:
        """The package at its pinned version, as npm or pip takes it."""
        return f"{self.package}@{self.version}" if self.kind == "npm" else f"{self.package}=={self.version}"


CLIS: dict[str, CLI] = {
    c.name: c
    for c in (
        CLI("claude-code", "npm", "@anthropic-ai/claude-code", "2.1.197", "claude"),
        CLI("codex", "npm", "@openai/codex", "0.169.0", "codex"),
        CLI("opencode", "npm", "opencode-ai", "1.18.33", "opencode"),
        CLI("gemini", "npm", "@google/gemini-cli", "0.61.0", "gemini"),
        CLI("aider", "pypi", "aider-chat", "0.86.2", "aider"),
    )
}

AIDER_PYTHONS = ("python3.11", "python3.12", "python3.10")  # aider-chat 0.86 supports 3.10 to 3.12


class InstallError(BenchError, RuntimeError):
    """A CLI could not be installed; the message says what to do."""


def install_dir(name: str) -> Path:
    """The folder of the CLI's pinned install."""
    cli = _cli(name)
    return clis_dir() / f"{name}-{cli.version}"


def binary_path(name: str) -> Path:
    """The executable of the CLI's pinned install (it may not exist yet)."""
    cli, folder = _cli(name), install_dir(name)
    return folder / ("venv/bin" if cli.kind == "pypi" else "node_modules/.bin") / cli.binary


def is_installed(name: str) -> bool:
    """Whether the pinned install finished (its marker written) and has its executable."""
    return (install_dir(name) / MARKER).is_file() and binary_path(name).exists()


def ensure_cli(name: str, quiet: bool = True) -> Path:
    """The CLI's executable, installed first if needed (safe to call from parallel processes)."""
    if is_installed(name):
        return binary_path(name)
    folder = install_dir(name)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be installing it right now
        if not is_installed(name):
            print(f"[bench] installing {_cli(name).spec} into {folder} (once)", file=sys.stderr, flush=True)
            _install(_cli(name), folder, quiet)
    return binary_path(name)


def _cli(name: str) -> CLI:
    try:
        return CLIS[name]
    except KeyError:
        raise InstallError(f"no pinned CLI for {name!r}; known: {', '.join(CLIS)}") from None


def _install(cli: CLI, folder: Path, quiet: bool) -> None:
    shutil.rmtree(folder, ignore_errors=True)  # a half-finished earlier attempt
    folder.mkdir(parents=True)
    try:
        if cli.kind == "npm":
            _npm_install(cli, folder, quiet)
        else:
            _pip_install(cli, folder, quiet)
        if not binary_path(cli.name).exists():
            raise InstallError(f"{cli.spec} installed, but {binary_path(cli.name)} is missing")
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    (folder / MARKER).write_text(f"{cli.spec}\n")


def _run(argv: list[str], what: str, hint: str, quiet: bool, env: dict | None = None) -> None:
    try:
        proc = subprocess.run(argv, capture_output=quiet, text=True, env=env)
    except FileNotFoundError:
        raise InstallError(f"cannot install {what}: {argv[0]} not found. {hint}") from None
    if proc.returncode != 0:
        tail = ((proc.stderr or "") + (proc.stdout or ""))[-2000:] if quiet else "(see the output above)"
        raise InstallError(f"installing {what} failed (exit {proc.returncode}). {hint}\n{tail}")


def _npm_install(cli: CLI, folder: Path, quiet: bool) -> None:
    if not shutil.which("npm"):
        raise InstallError(f"cannot install {cli.spec}: npm is not on PATH. Install Node.js >= 20 with npm.")
    hint = (
        "Check that the npm registry is reachable (npm config get registry; a proxy needs HTTPS_PROXY), "
        f"or install it yourself: npm install --prefix {folder} {cli.spec}"
    )
    argv = ["npm", "install", "--prefix", str(folder), "--no-audit", "--no-fund", "--loglevel=error", cli.spec]
    _run(argv, cli.spec, hint, quiet)


def _pip_install(cli: CLI, folder: Path, quiet: bool) -> None:
    python = next((p for p in AIDER_PYTHONS if shutil.which(p)), None)
    if python is None:
        raise InstallError(f"{cli.spec} needs Python 3.10 to 3.12 ({' or '.join(AIDER_PYTHONS)} on PATH)")
    venv = folder / "venv"
    _run([python, "-m", "venv", str(venv)], f"a venv for {cli.spec}", "Is the venv module installed?", quiet)
    hint = (
        "Check that PyPI is reachable (pip config list; a proxy needs HTTPS_PROXY), "
        f"or install it yourself: {venv}/bin/pip install {cli.spec}"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV")}
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    _run([*pip, cli.spec], cli.spec, hint, quiet, env=env)


def du(path: Path) -> int:
    """Bytes on disk under ``path``, as ``du -s`` counts them.

    The blocks each file, folder and link takes, each inode once (npm installs a CLI's binary twice
    by hard link: Claude Code's 245 MB were reported as 491 MB), symbolic links not followed (a link
    counts its own blocks, not its target's).
    """
    seen: set[tuple[int, int]] = set()
    total = 0
    top = os.fspath(path)
    entries = (os.path.join(root, n) for root, dirs, files in os.walk(top) for n in [*dirs, *files])
    for entry in (top, *entries):
        try:
            st = os.lstat(entry)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512  # st_blocks is in 512-byte units whatever the file system's block size
    return total


def install_main(names: list[str]) -> int:
    """``bench agents install NAME|all``.

    Install the pinned CLIs, saying where, how long and how big.
    """
    wanted = list(CLIS) if not names or "all" in names else names
    unknown = [n for n in wanted if n not in CLIS]
    if unknown:
        print(f"unknown CLI: {', '.join(unknown)}; known: {', '.join(CLIS)} or all", file=sys.stderr)
        return 2
    code = 0
    for name in wanted:
        cli, t0 = CLIS[name], time.time()
        try:
            was = is_installed(name)
            path = ensure_cli(name, quiet=False)
        except InstallError as e:
            print(f"{name}: {e}", file=sys.stderr)
            code = 1
            continue
        size = du(install_dir(name)) / 1e6
        how = "already installed" if was else f"installed in {time.time() - t0:.0f} s"
        print(f"{name}: {cli.spec} {how}, {size:.0f} MB: {path}", flush=True)
    return code


def home_env(home: Path) -> dict[str, str]:
    """A private HOME and XDG folders for one run.

    CLIs keep logins, sessions, caches and settings there.

    Without it, runs would share state (a previous run's session, a user's settings or login) and
    write into the user's real home; with it, each run starts from the same blank slate.
    """
    dirs = {
        "HOME": home,
        "XDG_CONFIG_HOME": home / ".config",
        "XDG_DATA_HOME": home / ".local" / "share",
        "XDG_CACHE_HOME": home / ".cache",
        "XDG_STATE_HOME": home / ".local" / "state",
    }
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    return {k: str(v) for k, v in dirs.items()}


def cli_binary(name: str, options: dict[str, str]) -> str:
    """The CLI's executable to run: the one given, or the pinned install.

    ``--agent-option bin=PATH`` names a CLI installed elsewhere.
    """
    return options.get("bin") or str(ensure_cli(name))
