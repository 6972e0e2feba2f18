"""Every environment override the toolkit honours.

One typed model (:class:`Env`), read when asked.

A user moves the toolkit's folders and turns its knobs with ``BENCH_*`` environment variables (a
cluster's scratch space, an offline data mirror, a shared tracking database). Each is a field of
:class:`Env`, a pydantic-settings model (the variable is ``BENCH_`` + the field's name), with its
type, default, one-line doc and rule, and read only when a caller asks (:meth:`Setting.get`), never
at import, so that a test's ``monkeypatch.setenv`` and a process's own :func:`override` both take
effect. A bad value is one clear error (:class:`SettingError`) naming the variable and what it
expects, never a silent default.

Precedence, highest first: an explicit in-process override (:func:`pin`: a command-line flag such as
``--api-fail-window``; :func:`override`: the self-test pointing the toolkit at its private folders)
> the environment > the default. :func:`check` reads them all at once (the preflight calls it before
a run). The overrides live in this process only: nothing here writes ``os.environ``.

The variables the harness passes to the agent's processes (the run token, the spool, the budget: the
in-sandbox protocol) are not user settings; their names are in :mod:`bench.protocol`.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, ValidationError
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from bench.errors import BenchError, InputError

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "BENCH_"


class SettingError(InputError):
    """A ``BENCH_*`` variable holds a value its setting cannot take.

    The message names it and what it expects.
    """


class _Bad(BenchError, ValueError):
    """A value its setting cannot take.

    The message (may be empty) says why, after what the setting expects.
    """


def _path(text: object) -> Path:
    return Path(str(text)).expanduser()


def _file(path: Path) -> Path:
    if not path.is_file():
        raise _Bad("no such file")
    return path


def _paths(text: object) -> tuple[Path, ...]:
    if not isinstance(text, str):
        return tuple(text)  # an override: already the folders
    return tuple(Path(e.strip()).expanduser() for e in text.split(os.pathsep) if e.strip())


def _number(low: float, *, above: bool) -> Callable[[object], float]:
    def parse(text: object) -> float:
        try:
            value = float(text)  # float's own message adds nothing to "expected seconds > 0"
        except (TypeError, ValueError):
            raise _Bad("") from None
        if not math.isfinite(value) or (value <= low if above else value < low):
            raise _Bad("")
        return value

    return parse


def _switch(text: object) -> bool:
    value = str(text).lower()
    if value in ("1", "yes", "true", "on"):
        return True
    if value in ("0", "no", "false", "off"):
        return False
    raise _Bad("")


def _pairs(text: object) -> dict[str, str]:
    if not isinstance(text, str):
        return dict(text)  # an override: already the table
    out = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        host, sep, address = pair.partition("=")
        if not sep or not host.strip() or not address.strip():
            raise _Bad(f"{pair!r} is not host=address")
        out[host.strip()] = address.strip()
    return out


def _cpus(text: object) -> tuple[int, ...]:
    if not isinstance(text, str):
        return tuple(text)  # an override: already the CPU numbers
    if not all(c.strip().isdigit() for c in text.split(",") if c.strip()):
        raise _Bad("")
    cpus = tuple(int(c) for c in text.split(",") if c.strip())
    if not cpus:
        raise _Bad("")
    return cpus


def _cache_default() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "1gc-7rc"


def _machine_dir() -> Path:
    """A folder every user and process of this machine shares and no other machine sees.

    Tmpfs (never NFS, where flock may not reach other hosts or not work at all; not a per-user
    TMPDIR), /tmp where there is none.
    """
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else Path("/tmp")


def _setting(default: Any, expects: str, doc: str, group: str = "knob", shown: str = "") -> Any:
    """A field of :class:`Env`, with what the errors and the table say of it.

    Its default, what it ``expects`` (for errors and the docs), its one-line ``doc``, its ``group``
    ("path", "knob" or "internal": set by the toolkit for its own processes) and the default as the
    table ``shown`` where it is computed (the field's default is then None: see :data:`COMPUTED`).
    """
    extra = {"expects": expects, "doc": doc, "group": group, "shown": shown}
    return Field(default, json_schema_extra=extra)


APath = Annotated[Path, BeforeValidator(_path)]
Seconds = Annotated[float, BeforeValidator(_number(0, above=True))]  # > 0
AtLeast0 = Annotated[float, BeforeValidator(_number(0, above=False))]  # >= 0
Switch = Annotated[bool, BeforeValidator(_switch)]
SWITCH = "1 or 0 (yes/no, true/false, on/off)"


class Env(BaseSettings):
    """The ``BENCH_*`` settings: each field is read from the variable ``BENCH_<FIELD>``.

    ``python -m bench.settings`` prints them as a table.
    """

    model_config = SettingsConfigDict(env_prefix=PREFIX, extra="ignore", env_ignore_empty=True)

    # paths
    cache_dir: APath | None = _setting(
        None, "a folder", "downloaded and prepared data, workspaces, CLIs", "path",
        "$XDG_CACHE_HOME/1gc-7rc, else ~/.cache/1gc-7rc",
    )  # fmt: skip
    mlruns_dir: APath = _setting(ROOT / "mlruns", "a folder", "the embedded MLflow store: SQLite and artifacts", "path")
    workspaces_dir: APath | None = _setting(
        None, "a folder", "where agent workspaces and run directories are made", "path", "<cache>/workspaces"
    )
    tasks_dir: APath = _setting(
        ROOT / "tasks", "a folder", "the built-in task folders", "path", "the repository's tasks/"
    )
    tasks_path: Annotated[tuple[Path, ...], NoDecode, BeforeValidator(_paths)] = _setting(
        (), f"folders separated by {os.pathsep!r}", "task packs: each entry a task folder or a folder of task folders",
        "path",
    )  # fmt: skip
    data_mirror: APath | None = _setting(
        None, "a folder", "a local copy of the tasks' raw data, used instead of downloading", "path"
    )
    cli_dir: APath | None = _setting(None, "a folder", "where the agents' CLIs are installed", "path", "<cache>/clis")
    prices: Annotated[Path, BeforeValidator(_path), AfterValidator(_file)] | None = _setting(
        None, 'a TOML file of [models."id"] rows',
        "your own model prices (USD per 1M tokens): they override or add to bench/agents/prices.toml", "path",
    )  # fmt: skip
    tracking_db: str = _setting(
        "", "a SQLAlchemy URL", "the tracking server's database, read directly by bench report for speed", "path"
    )
    eval_lock: APath | None = _setting(
        None, "a file on a local file system",
        "the machine-wide lock that keeps evaluations apart from other runs' live agents", "path",
        "/dev/shm/1gc-7rc-evaluation.lock (/tmp/... without /dev/shm)",
    )  # fmt: skip
    # knobs
    eval_timeout: Seconds = _setting(15 * 60.0, "seconds > 0", "the scorer's time for one checkpoint's evaluation")
    eval_beside_agents: Switch = _setting(
        False, SWITCH,
        "1 evaluates without waiting for other runs' live agents on this machine (each evaluation records it)",
    )  # fmt: skip
    predictor_mem_gb: AtLeast0 = _setting(
        0.0, "GB >= 0", "the CPU predictor's memory limit (0: 80 % of the machine's RAM)"
    )
    gateway: Switch = _setting(
        True, SWITCH, "0 runs LLM agents without the metering gateway (their CLI reaches its API through the proxy)"
    )
    gateway_resolve: Annotated[dict[str, str], NoDecode, BeforeValidator(_pairs)] = _setting(
        {}, "host=address[,host=address...]",
        "the gateway dials these addresses instead of asking DNS (the certificate is still checked against the host)",
    )  # fmt: skip
    gateway_ca: str | None = _setting(None, "a CA file", "a CA the gateway trusts beside the system's")
    gateway_drain_s: AtLeast0 = _setting(
        20.0, "seconds >= 0", "how long the gateway reads an answer on for its usage after the agent's CLI left"
    )
    llm_bodies_mb: AtLeast0 = _setting(5.0, "MB >= 0", "the cap of a run's evidence/llm-bodies.jsonl (0: sizes only)")
    api_check: Switch = _setting(
        True, SWITCH, "0 skips the preflight's requests to each LLM agent's endpoint (credentials are still checked)"
    )
    api_fail_window: Seconds = _setting(
        180.0, "seconds > 0",
        "API failures spanning this long end an LLM agent's run as interrupted (bench run --api-fail-window)",
    )  # fmt: skip
    experiment: str = _setting(
        "", "a campaign's name", "the campaign notebooks/02 reads", "knob", "the latest campaign"
    )
    campaign_cpus: Annotated[tuple[int, ...], NoDecode, BeforeValidator(_cpus)] = _setting(
        (), "CPU numbers: 0,1,2,3", "set by the local campaign executor: the CPU set of one run's bench process",
        "internal",
    )  # fmt: skip


# the defaults that depend on the machine or on other settings: field -> how it is worked out when
# asked
COMPUTED: dict[str, Callable[[], Any]] = {
    "cache_dir": _cache_default,
    "workspaces_dir": lambda: CACHE_DIR.get() / "workspaces",
    "cli_dir": lambda: CACHE_DIR.get() / "clis",
    "eval_lock": lambda: _machine_dir() / "1gc-7rc-evaluation.lock",
}
_OVERRIDES: dict[str, Any] = {}  # name -> value of the setting's type (None: as if unset)
_UNSET = object()


@dataclass(frozen=True)
class Setting:
    """One environment override: the variable ``name`` and its field of :class:`Env`.

    The field holds its type, default, rule and doc.
    """

    name: str
    field: str

    @property
    def _extra(self) -> dict[str, Any]:
        return dict(Env.model_fields[self.field].json_schema_extra or {})

    @property
    def expects(self) -> str:
        """What the variable takes, as the errors and the table say it."""
        return self._extra["expects"]

    @property
    def doc(self) -> str:
        """What the setting does, in one line."""
        return self._extra["doc"]

    @property
    def group(self) -> str:
        """The table's kind: path, knob or internal (set by the toolkit for its own processes)."""
        return self._extra["group"]

    @property
    def shown(self) -> str:
        """The default as the table says it, where it is computed."""
        return self._extra["shown"]

    @property
    def default(self) -> Any:
        """The default: the field's, or a callable working it out (:data:`COMPUTED`)."""
        return COMPUTED.get(self.field) or Env.model_fields[self.field].default

    def raw(self) -> str | None:
        """The variable's text in this process's environment (None: unset or blank)."""
        value = os.environ.get(self.name)
        return value if value is not None and value.strip() else None

    def get(self) -> Any:
        """The value in force: an override, else the environment's, else the default.

        The environment's text is judged by the model.
        """
        value = _OVERRIDES.get(self.name, _UNSET)
        if value is not _UNSET and value is not None:
            return value
        raw = None if value is None else self.raw()  # an override of None: as if unset
        if raw is None:
            default = self.default
            return default() if callable(default) else default
        return getattr(_judge({self.field: raw.strip()}), self.field)


def _judge(values: dict[str, Any]) -> Env:
    """``values`` (field -> text or value) judged by the model, without reading the environment."""
    try:
        return Env.model_validate(values)
    except ValidationError as e:
        raise SettingError(_lines(e.errors(), values)[0]) from None


def _lines(errors: list[Any], values: dict[str, Any]) -> list[str]:
    """One line per error of the model.

    The variable, its text, what it expects and why not (when said).
    """
    out = []
    for e in errors:
        setting = BY_FIELD[str(e["loc"][0])]
        why = str(e.get("ctx", {}).get("error", "")) if e["type"] == "value_error" else e["msg"]
        detail = f" ({why})" if why else ""
        out.append(f"{setting.name}={values.get(setting.field, e['input'])!r}: expected {setting.expects}{detail}")
    return out


SETTINGS: tuple[Setting, ...] = tuple(Setting(PREFIX + f.upper(), f) for f in Env.model_fields)
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
BY_FIELD: dict[str, Setting] = {s.field: s for s in SETTINGS}
(CACHE_DIR, MLRUNS_DIR, WORKSPACES_DIR, TASKS_DIR, TASKS_PATH, DATA_MIRROR, CLI_DIR, PRICES_FILE, TRACKING_DB,
 EVAL_LOCK, EVAL_TIMEOUT_S, EVAL_BESIDE_AGENTS, PREDICTOR_MEM_GB, GATEWAY, GATEWAY_RESOLVE, GATEWAY_CA,
 GATEWAY_DRAIN_S, LLM_BODIES_MB, API_CHECK, API_FAIL_WINDOW_S, EXPERIMENT, CAMPAIGN_CPUS) = SETTINGS  # fmt: skip


def _known(values: dict[str, Any]) -> None:
    unknown = sorted(set(values) - set(BY_NAME))
    if unknown:
        raise KeyError(f"no such setting: {', '.join(unknown)}")
    for name, value in values.items():  # judged by the model as the environment's text is
        if value is not None:
            _judge({BY_NAME[name].field: value})


@contextlib.contextmanager
def override(**values: Any) -> Iterator[None]:
    """Within the block, the settings named take these values, whatever the environment says.

    Settings are named by their environment variable (``BENCH_CACHE_DIR=...``); None: as if unset,
    i.e. the default. Restored after.
    """
    _known(values)
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
    """For the rest of this process, the settings named take these values.

    As :func:`override`, without an end: for a command-line flag that overrides its environment
    variable, e.g. ``bench run --api-fail-window``.
    """
    _known(values)
    _OVERRIDES.update(values)


def check() -> list[str]:
    """Every setting the environment sets wrongly, one message each (empty: all good).

    Read at once by the model (pydantic-settings); a setting overridden in this process is not the
    environment's to judge.
    """
    try:
        Env()
    except ValidationError as e:
        raw = {s.field: os.environ.get(s.name, "") for s in SETTINGS}
        kept = [err for err in e.errors() if BY_FIELD[str(err["loc"][0])].name not in _OVERRIDES]
        return _lines(kept, raw)
    return []


def table() -> str:
    """The settings as a Markdown table, for the docs (``python -m bench.settings``)."""
    rows = ["| variable | kind | expects | default | what it does |", "|---|---|---|---|---|"]
    for s in SETTINGS:
        rows.append(f"| `{s.name}` | {s.group} | {s.expects} | {_shown(s)} | {s.doc} |")
    return "\n".join(rows)


def _shown(s: Setting) -> str:
    default = s.default
    if s.shown or callable(default):
        return s.shown or "computed"
    if default is True or default is False:
        return "1" if default else "0"
    if isinstance(default, Path):
        return str(default.relative_to(ROOT)) + "/" if default.is_relative_to(ROOT) else str(default)
    if isinstance(default, float):
        return f"{default:g}"
    return "unset" if default in (None, "", (), {}) else str(default)


if __name__ == "__main__":
    print(table())
