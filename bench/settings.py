"""Every environment override the toolkit honours: one typed place, read when asked.

A user moves the toolkit's folders and turns its knobs with ``BENCH_*`` environment variables (a cluster's scratch
space, an offline data mirror, a shared tracking database). Each is declared here once, with its type, default,
one-line doc and check, and read only when a caller asks (:meth:`Setting.get`), never at import, so that a test's
``monkeypatch.setenv`` and a process's own :func:`override` both take effect. A bad value is one clear error
(:class:`SettingError`) naming the variable and what it expects, never a silent default.

Precedence, highest first: an explicit in-process override (:func:`pin`: a command-line flag such as
``--api-fail-window``; :func:`override`: the self-test pointing the toolkit at its private folders) > the
environment > the default. :func:`check` validates them all at once (the preflight calls it before a run).
The overrides live in this process only: nothing here writes ``os.environ``.

The variables the harness passes to the agent's processes (the run token, the spool, the budget: the in-sandbox
protocol) are not user settings; their names are in :mod:`bench.protocol`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


class SettingError(ValueError):
    """A ``BENCH_*`` variable holds a value its setting cannot take; the message names it and what it expects."""


_OVERRIDES: dict[str, Any] = {}  # name -> value already of the setting's type (None: as if unset)
_UNSET = object()


@dataclass(frozen=True)
class Setting:
    """One environment override: ``name``, what it ``expects`` (for errors and the docs), how a raw string becomes
    its value (``parse``, raising ValueError for a bad one), its ``default`` (a value, or a callable for one that
    depends on other settings) and a one-line ``doc``."""

    name: str
    parse: Callable[[str], Any]
    default: Any
    expects: str
    doc: str
    group: str = "knob"  # "path", "knob" or "internal" (set by the toolkit for its own processes), for the table
    shown: str = ""  # the default as the table says it, where it is computed

    def raw(self) -> str | None:
        """The variable's text in this process's environment (None: unset or blank)."""
        value = os.environ.get(self.name)
        return value if value is not None and value.strip() else None

    def get(self) -> Any:
        """The value in force: an override, else the environment's (checked), else the default."""
        value = _OVERRIDES.get(self.name, _UNSET)
        if value is not _UNSET and value is not None:
            return value
        raw = None if value is None else self.raw()  # an override of None: as if unset
        if raw is None:
            return self.default() if callable(self.default) else self.default
        try:
            return self.parse(raw.strip())
        except (ValueError, TypeError) as e:
            detail = f" ({e})" if str(e) else ""
            raise SettingError(f"{self.name}={raw!r}: expected {self.expects}{detail}") from None


def _path(text: str) -> Path:
    return Path(text).expanduser()


def _file(text: str) -> Path:
    path = Path(text).expanduser()
    if not path.is_file():
        raise ValueError("no such file")
    return path


def _paths(text: str) -> tuple[Path, ...]:
    return tuple(Path(e.strip()).expanduser() for e in text.split(os.pathsep) if e.strip())


def _number(low: float, *, above: bool) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError("") from None  # float's own message adds nothing to "expected seconds > 0"
        if value != value or value in (float("inf"), float("-inf")) or (value <= low if above else value < low):
            raise ValueError("")
        return value

    return parse


def _switch(text: str) -> bool:
    value = text.lower()
    if value in ("1", "yes", "true", "on"):
        return True
    if value in ("0", "no", "false", "off"):
        return False
    raise ValueError("")


def _pairs(text: str) -> dict[str, str]:
    out = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        host, sep, address = pair.partition("=")
        if not sep or not host.strip() or not address.strip():
            raise ValueError(f"{pair!r} is not host=address")
        out[host.strip()] = address.strip()
    return out


def _cpus(text: str) -> tuple[int, ...]:
    if not all(c.strip().isdigit() for c in text.split(",") if c.strip()):
        raise ValueError("")
    cpus = tuple(int(c) for c in text.split(",") if c.strip())
    if not cpus:
        raise ValueError("")
    return cpus


def _cache_default() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "1gc-7rc"


def _machine_dir() -> Path:
    """A folder every user and process of this machine shares and no other machine sees: tmpfs (never NFS, where
    flock may not reach other hosts or not work at all; not a per-user TMPDIR), /tmp where there is none."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else Path("/tmp")


# paths
CACHE_DIR = Setting(
    "BENCH_CACHE_DIR", _path, _cache_default, "a folder", "downloaded and prepared data, workspaces, CLIs", "path",
    "$XDG_CACHE_HOME/1gc-7rc, else ~/.cache/1gc-7rc"
)  # fmt: skip
MLRUNS_DIR = Setting(
    "BENCH_MLRUNS_DIR", _path, ROOT / "mlruns", "a folder", "the embedded MLflow store: SQLite and artifacts", "path"
)
WORKSPACES_DIR = Setting(
    "BENCH_WORKSPACES_DIR", _path, lambda: CACHE_DIR.get() / "workspaces", "a folder",
    "where agent workspaces and run directories are made", "path", "<cache>/workspaces"
)  # fmt: skip
TASKS_DIR = Setting(
    "BENCH_TASKS_DIR", _path, ROOT / "tasks", "a folder", "the built-in task folders", "path",
    "the repository's tasks/"
)  # fmt: skip
TASKS_PATH = Setting(
    "BENCH_TASKS_PATH", _paths, (), f"folders separated by {os.pathsep!r}",
    "task packs: each entry a task folder or a folder of task folders", "path"
)  # fmt: skip
DATA_MIRROR = Setting(
    "BENCH_DATA_MIRROR", _path, None, "a folder", "a local copy of the tasks' raw data, used instead of downloading",
    "path"
)  # fmt: skip
CLI_DIR = Setting(
    "BENCH_CLI_DIR", _path, lambda: CACHE_DIR.get() / "clis", "a folder",
    "where the agents' CLIs are installed", "path", "<cache>/clis"
)  # fmt: skip
PRICES_FILE = Setting(
    "BENCH_PRICES", _file, None, "a TOML file of [models.\"id\"] rows",
    "your own model prices (USD per 1M tokens): they override or add to bench/agents/prices.toml", "path"
)  # fmt: skip
TRACKING_DB = Setting(
    "BENCH_TRACKING_DB", str, "", "a SQLAlchemy URL",
    "the tracking server's database, read directly by bench report for speed", "path"
)  # fmt: skip

EVAL_LOCK = Setting(
    "BENCH_EVAL_LOCK", _path, lambda: _machine_dir() / "1gc-7rc-evaluation.lock", "a file on a local file system",
    "the machine-wide lock that keeps evaluations apart from other runs' live agents", "path",
    "/dev/shm/1gc-7rc-evaluation.lock (/tmp/... without /dev/shm)"
)  # fmt: skip

# knobs
EVAL_TIMEOUT_S = Setting(
    "BENCH_EVAL_TIMEOUT", _number(0, above=True), 15 * 60.0, "seconds > 0",
    "the scorer's time for one checkpoint's evaluation"
)  # fmt: skip
EVAL_BESIDE_AGENTS = Setting(
    "BENCH_EVAL_BESIDE_AGENTS", _switch, False, "1 or 0 (yes/no, true/false, on/off)",
    "1 evaluates without waiting for other runs' live agents on this machine (each evaluation records it)"
)  # fmt: skip
PREDICTOR_MEM_GB = Setting(
    "BENCH_PREDICTOR_MEM_GB", _number(0, above=False), 0.0, "GB >= 0",
    "the CPU predictor's memory limit (0: 80 % of the machine's RAM)"
)  # fmt: skip
GATEWAY = Setting(
    "BENCH_GATEWAY", _switch, True, "1 or 0 (yes/no, true/false, on/off)",
    "0 runs LLM agents without the metering gateway (their CLI reaches its API through the proxy)"
)  # fmt: skip
GATEWAY_RESOLVE = Setting(
    "BENCH_GATEWAY_RESOLVE", _pairs, {}, "host=address[,host=address...]",
    "the gateway dials these addresses instead of asking DNS (the certificate is still checked against the host)"
)  # fmt: skip
GATEWAY_CA = Setting("BENCH_GATEWAY_CA", str, None, "a CA file", "a CA the gateway trusts beside the system's")
GATEWAY_DRAIN_S = Setting(
    "BENCH_GATEWAY_DRAIN_S", _number(0, above=False), 20.0, "seconds >= 0",
    "how long the gateway reads an answer on for its usage after the agent's CLI left"
)  # fmt: skip
LLM_BODIES_MB = Setting(
    "BENCH_LLM_BODIES_MB", _number(0, above=False), 5.0, "MB >= 0",
    "the cap of a run's evidence/llm-bodies.jsonl (0: sizes only)"
)  # fmt: skip
API_CHECK = Setting(
    "BENCH_API_CHECK", _switch, True, "1 or 0 (yes/no, true/false, on/off)",
    "0 skips the preflight's requests to each LLM agent's endpoint (credentials are still checked)"
)  # fmt: skip
API_FAIL_WINDOW_S = Setting(
    "BENCH_API_FAIL_WINDOW", _number(0, above=True), 180.0, "seconds > 0",
    "API failures spanning this long end an LLM agent's run as interrupted (bench run --api-fail-window)"
)  # fmt: skip
EXPERIMENT = Setting(
    "BENCH_EXPERIMENT", str, "", "a campaign's name", "the campaign notebooks/02 reads", "knob",
    "the latest campaign"
)  # fmt: skip
CAMPAIGN_CPUS = Setting(
    "BENCH_CAMPAIGN_CPUS", _cpus, (), "CPU numbers: 0,1,2,3",
    "set by the local campaign executor: the CPU set of one run's bench process", "internal"
)  # fmt: skip

SETTINGS: tuple[Setting, ...] = tuple(v for v in list(globals().values()) if isinstance(v, Setting))
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


@contextlib.contextmanager
def override(**values: Any) -> Iterator[None]:
    """Within the block, the settings named by their environment variable (``BENCH_CACHE_DIR=...``) take these
    values, whatever the environment says (None: as if unset, i.e. the default); restored after."""
    unknown = sorted(set(values) - set(BY_NAME))
    if unknown:
        raise KeyError(f"no such setting: {', '.join(unknown)}")
    saved = {k: _OVERRIDES.get(k, _UNSET) for k in values}
    try:
        _OVERRIDES.update(values)
        yield
    finally:
        for name, value in saved.items():
            if value is _UNSET:
                _OVERRIDES.pop(name, None)
            else:
                _OVERRIDES[name] = value


def pin(**values: Any) -> None:
    """For the rest of this process, the settings named take these values (as :func:`override`, without an end):
    for a command-line flag that overrides its environment variable, e.g. ``bench run --api-fail-window``."""
    unknown = sorted(set(values) - set(BY_NAME))
    if unknown:
        raise KeyError(f"no such setting: {', '.join(unknown)}")
    _OVERRIDES.update(values)


def check() -> list[str]:
    """Every setting the environment sets wrongly, one message each (empty: all good); for a check before a run."""
    errors = []
    for setting in SETTINGS:
        try:
            setting.get()
        except SettingError as e:
            errors.append(str(e))
    return errors


def table() -> str:
    """The settings as a Markdown table, for the docs (``python -m bench.settings``)."""
    rows = ["| variable | kind | expects | default | what it does |", "|---|---|---|---|---|"]
    for s in SETTINGS:
        rows.append(f"| `{s.name}` | {s.group} | {s.expects} | {_shown(s)} | {s.doc} |")
    return "\n".join(rows)


def _shown(s: Setting) -> str:
    if s.shown or callable(s.default):
        return s.shown or "computed"
    if isinstance(s.default, bool):
        return "1" if s.default else "0"
    if isinstance(s.default, Path):
        return str(s.default.relative_to(ROOT)) + "/" if s.default.is_relative_to(ROOT) else str(s.default)
    if isinstance(s.default, float):
        return f"{s.default:g}"
    return "unset" if s.default in (None, "", (), {}) else str(s.default)


if __name__ == "__main__":
    print(table())
