"""What a run is: one agent on one task, one repeat, under which budget, limits and options (:class:`RunSpec`).

One value, written once: ``bench run``'s flags and a campaign file's keys both become one through
:meth:`RunSpec.build`, which checks it (:func:`check`, the one place the values are judged); ``run.json`` and
``result.json`` embed it whole (:meth:`RunSpec.to_dict`), and ``--resume``, ``bench record`` and a campaign's job
rebuild it from there (:meth:`RunSpec.from_dict`). A field added here travels to both files, the resume and the
MLflow run (``bench.tracking.schema.spec_params``/``spec_tags``) without another line elsewhere.

Precedence, lowest first: the task file (``task.toml``: the budget) < the campaign file < the command line <
documented environment overrides (:mod:`bench.settings`; none of them sets a field of a run's description today).
A field a layer leaves out (absent or None) keeps the value of the layer below it, then the default here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from bench.sandbox.resource_limits import FLAGS as LIMIT_FIELDS
from bench.sandbox.resource_limits import LimitError, Limits
from bench.tasks import Task

GRACE_S = 30.0  # the paper's grace: seconds after the budget before SIGKILL (§3.3); the one default
DEFAULT_CAMPAIGN = "1gc-7rc"
SPEC_VERSION = 1

# how a user names each settable field on the command line (errors say it the way it was given)
FLAGS = {
    "budget_s": "--budget", "grace_s": "--grace", "model": "--model", "options": "--agent-option",
    "device": "--device", "no_weights": "--no-weights", "sandbox": "--unsandboxed", "limits": "limits",
    "max_cost": "--max-cost", "campaign": "--campaign", "repeat": "--first-repeat", "tags": "--tag", "seed": "--seed",
}  # fmt: skip
# the keys of a campaign file that set a field of every run's description (bench.campaign.spec; its limit keys are
# read there, with their [slurm] margin): key -> field
FILE_KEYS = {
    "budget": "budget_s", "grace": "grace_s", "device": "device", "sandbox": "sandbox", "no_weights": "no_weights",
    "max_cost": "max_cost", "tags": "tags",
}  # fmt: skip


@dataclass
class RunSpec:
    """One agent, one task, one repeat, and everything that decides how the run goes (the run's description).

    ``task`` is the task's id; a :class:`~bench.tasks.Task` may be given instead (kept for :meth:`resolve_task`).
    At the launch the runner fills what was left to defaults (the budget, the device, the task's source), so the
    description in run.json and result.json is the run as it ran."""

    task: str
    agent: str
    campaign: str = DEFAULT_CAMPAIGN
    repeat: int = 1
    budget_s: float | None = None  # None: the task's budget
    grace_s: float = GRACE_S
    model: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    device: str | None = None  # None: cuda when available (bench.protocol)
    no_weights: bool = False  # run a task that provides pretrained weights without them (marked partial)
    sandbox: bool = True  # the agent runs in a bubblewrap sandbox (bench.sandbox); False: --unsandboxed, marked so
    run_id: str | None = None  # the run directory's name (a campaign's stable id); None: task-agent-repeat-time
    limits: Limits = field(default_factory=Limits)  # memory, processes, workspace, log, evaluation time
    # the run's API budget in USD, enforced by the metering gateway (bench.gateway.proxy): a positive amount; it
    # needs the sandbox (the gateway is the sandbox's only way out). None: no budget
    max_cost: float | None = None
    # the task's source and folder hash (bench.tasks.packs.provenance); None: taken when the run starts
    task_source: dict | None = None
    # the researcher's own labels (--tag KEY=VALUE, a campaign file's tags table): MLflow tags of the agent run and
    # its summary run (bench.tracking.schema.TAG_PREFIX), shown by bench report
    tags: dict[str, str] = field(default_factory=dict)
    # the seed the agent's training starts from (bench.protocol.SEED_VAR, read by the tasks' train.py): None for a
    # seeded agent (baseline, optuna) is drawn at the launch, one per repeat, so that repeats measure the task's
    # run-to-run noise rather than one seed five times; given (bench run --seed N) it is used as is, for any agent
    seed: int | None = None
    console: bool = field(default=True, compare=False)  # stream the agent's output: how it is shown, not what it is

    def __post_init__(self) -> None:
        self._task: Task | None = None
        if isinstance(self.task, Task):
            self._task, self.task = self.task, self.task.id
        # seconds are floats however they were given (grace_s=3 or 3.0): the description must read the same after a
        # trip through result.json, or MLflow refuses the param logged again by `bench record` ("3" vs "3.0")
        for name in ("budget_s", "grace_s"):
            value = getattr(self, name)
            if isinstance(value, int) and not isinstance(value, bool):
                setattr(self, name, float(value))

    # --- what readers ask ---------------------------------------------------------------
    @property
    def budget(self) -> float:
        """The budget in force: the run's own, else the task's."""
        return self.budget_s if self.budget_s is not None else self.resolve_task().budget_s

    @property
    def label(self) -> str:
        return f"{self.task}-{self.agent}-r{self.repeat}"

    def resolve_task(self) -> Task:
        """The task this run runs: the one given, else the folder its source names when still there, else the id's."""
        if self._task is None:
            from bench.tasks import packs

            self._task = packs.task_for_run(self.task, self.task_source)
        return self._task

    # --- JSON ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The description as run.json and result.json embed it (everything but how the console shows it)."""
        out: dict[str, Any] = {"version": SPEC_VERSION}
        for f in fields(self):
            if f.name == "console":
                continue
            value = getattr(self, f.name)
            out[f.name] = value.to_dict() if isinstance(value, Limits) else _plain(value)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, console: bool = True) -> RunSpec:
        """A description read back (run.json, result.json); TypeError or ValueError for a mistyped field, a
        :class:`~bench.sandbox.resource_limits.LimitError` for limits no run can live with. Unknown keys (a newer
        toolkit's fields) are refused by the caller's version check, not here."""
        names = {f.name for f in fields(cls)} - {"console", "limits"}
        values = {k: d[k] for k in names if k in d}
        for key in ("task", "agent"):
            if not isinstance(values.get(key), str):
                raise TypeError(f"{key} must be a string (got {values.get(key)!r})")
        limits = Limits() if d.get("limits") is None else limits_of(d["limits"])
        spec = cls(**values, limits=limits, console=console)
        spec.repeat, spec.grace_s = int(spec.repeat), float(spec.grace_s)
        spec.budget_s = None if spec.budget_s is None else float(spec.budget_s)
        spec.options, spec.tags = dict(spec.options or {}), dict(spec.tags or {})
        return spec

    # --- the one constructor ------------------------------------------------------------
    @classmethod
    def build(
        cls,
        task: Task,
        agent: str,
        *layers: Mapping[str, Any],
        names: Mapping[str, str] | Callable[[str], str] = FLAGS,
        **fixed: Any,
    ) -> RunSpec:
        """The run's description from its task and the settings' layers, lowest first (campaign file, command line,
        environment overrides), checked once (:func:`check`: InputError naming each value as ``names`` says the user
        wrote it). ``fixed``: what names the run rather than sets it (campaign, repeat, run_id, console)."""
        merged: dict[str, Any] = {}
        for layer in layers:
            merged.update({k: v for k, v in layer.items() if v is not None})
        spec = cls(task=task, agent=agent, **fixed, **merged)
        check(spec, names)
        if spec.max_cost is not None and not spec.sandbox:  # asked of what a user gives, not of a test's spec
            from bench.errors import InputError

            name = names if callable(names) else lambda f: names.get(f, f)  # type: ignore[union-attr]
            raise InputError(f"{name('max_cost')} is enforced by the sandbox's metering gateway: it needs the sandbox")
        return spec

    def launched(self, device: str, task_source: dict, *, seeded: bool = False) -> RunSpec:
        """The description as the run goes: the budget, the device and the task's source filled in, and for a
        ``seeded`` agent without a seed one drawn now (:func:`draw_seed`), so that run.json records it."""
        seed = self.seed if self.seed is not None or not seeded else draw_seed()
        return replace(
            self, budget_s=self.budget, device=device, task_source=task_source, task=self.resolve_task(), seed=seed
        )


SEED_RANGE = 2**31  # what torch.manual_seed, numpy and Optuna's samplers all take


def draw_seed() -> int:
    """A fresh seed from the operating system's randomness (not from Python's seeded generator, which a test or a
    library may have fixed): two repeats drawing the same seed would measure no noise at all."""
    import secrets

    return secrets.randbelow(SEED_RANGE)


def limits_of(raw: object) -> Limits:
    """The limits a run recorded (``Limits.to_dict()``), checked: LimitError naming the field for a missing or
    unknown key, a wrong type or a value no run can live with (a hand edit, a newer toolkit), so that a resume
    never runs under limits nobody set."""
    if not isinstance(raw, dict):
        raise LimitError(f"not a table of limits (got {raw!r})")
    if extra := sorted(set(raw) - set(LIMIT_FIELDS)):
        raise LimitError(f"unknown limit {extra[0]!r}; known: {', '.join(sorted(LIMIT_FIELDS))}")
    if missing := sorted(set(LIMIT_FIELDS) - set(raw)):
        raise LimitError(f"lacks {', '.join(missing)}")
    for key in ("memory_bytes", "processes", "workspace_bytes", "log_bytes"):
        value, may_be_off = raw[key], key != "log_bytes"  # null: switched off ("none"); agent.log always has one
        if not (value is None and may_be_off) and (isinstance(value, bool) or not isinstance(value, int)):
            raise LimitError(f"{key} must be a whole number{' or null' if may_be_off else ''} (got {value!r})")
    if isinstance(raw["eval_s"], bool) or not isinstance(raw["eval_s"], int | float):
        raise LimitError(f"eval_s must be a number of seconds (got {raw['eval_s']!r})")
    limits = Limits(**{**raw, "eval_s": float(raw["eval_s"])})
    limits.check(names={k: k for k in LIMIT_FIELDS})
    return limits


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def file_layer(raw: Mapping[str, Any], bad: Callable[[str, str], Exception]) -> dict[str, Any]:
    """A campaign file's layer of the run's description (:data:`FILE_KEYS`), its TOML types checked (``bad(key,
    why)``: the caller's error naming the key); the values themselves are judged by :func:`check` when the
    description is built."""
    from bench.durations import parse_duration

    layer: dict[str, Any] = {}
    for key, name in FILE_KEYS.items():
        if key not in raw:
            continue
        value = raw[key]
        if key == "budget":
            if not isinstance(value, str):
                raise bad(key, f'write a duration as a string, e.g. budget = "40m" (got {value!r})')
            try:
                value = float(parse_duration(value))
            except Exception as e:  # argparse's error type: the message is the one line
                raise bad(key, str(e)) from None
        elif key == "tags":
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise bad(key, f'must be a table of strings, e.g. tags = {{ team = "vision" }} (got {value!r})')
            value = dict(value)
        elif key in ("grace", "max_cost"):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise bad(key, f"must be a number (got {value!r})")
            value = float(value)
        layer[name] = value
    return layer


def check(spec: RunSpec, names: Mapping[str, str] | Callable[[str], str] = FLAGS) -> None:
    """Every value of a description a run cannot start with (InputError, one line saying what to give); the one
    place they are judged, for the command line and a campaign file alike. ``names``: how the user wrote each field
    (``--grace``; ``CAMPAIGN.toml: grace:``). The machine's side (the agent's CLI, the weights, the sandbox) is
    :mod:`bench.preflight`'s."""
    from bench import preflight
    from bench.errors import InputError

    name = names if callable(names) else lambda f: names.get(f, f)  # type: ignore[union-attr]
    budget = spec.budget_s
    if budget is not None and (isinstance(budget, bool) or not (math.isfinite(budget) and budget > 0)):
        raise InputError(f"{name('budget_s')} must be a positive duration (got {budget:g} s): e.g. 90s, 3m or 1h")
    grace = spec.grace_s
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not (math.isfinite(grace) and grace >= 0):
        raise InputError(f"{name('grace_s')} must be a number of seconds >= 0 (got {grace!r}); the paper uses 30")
    if isinstance(spec.repeat, bool) or not isinstance(spec.repeat, int) or spec.repeat < 1:
        raise InputError(f"{name('repeat')} must be at least 1 (got {spec.repeat}); repeats are numbered from 1")
    cost = spec.max_cost
    if cost is not None and (isinstance(cost, bool) or not isinstance(cost, int | float) or not 0 < cost < math.inf):
        raise InputError(f"{name('max_cost')} must be a positive amount in USD, e.g. 20 (got {cost!r})")
    seed = spec.seed
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_RANGE):
        raise InputError(f"{name('seed')} must be a whole number from 0 to {SEED_RANGE - 1} (got {seed!r})")
    for flag, value in (("no_weights", spec.no_weights), ("sandbox", spec.sandbox)):
        if not isinstance(value, bool):
            raise InputError(f"{name(flag)} must be true or false (got {value!r})")
    if spec.device is not None and not isinstance(spec.device, str):
        raise InputError(f"{name('device')} must be a string, cpu or cuda (got {spec.device!r})")
    for key, judge, value in (
        ("campaign", preflight.check_campaign, spec.campaign),
        ("device", preflight.check_device, spec.device),
    ):
        try:
            judge(value)
        except InputError as e:  # its message names the flag; a campaign file's key goes before it
            said = str(e)
            raise InputError(said if said.startswith(name(key)) else f"{name(key)} {said}") from None
    preflight.check_limits(spec.limits)
    for key, value in (spec.tags or {}).items():
        if why := _bad_tag(key, value):
            raise InputError(f"{name('tags')} {key}={value}: {why}")


_TAG_KEY = re.compile(r"[A-Za-z0-9_.\-/ ]{1,100}")


def _bad_tag(key: object, value: object) -> str:
    """Why a label cannot be an MLflow tag of the run ("" when it can)."""
    if not isinstance(key, str) or not _TAG_KEY.fullmatch(key) or key != key.strip():
        return "a key is 1-100 letters, digits, _ . - / or inner spaces"
    if not isinstance(value, str) or len(value) > 500 or any(c in value for c in "\r\n"):
        return "a value is one line of at most 500 characters"
    return ""


def tag(text: str) -> tuple[str, str]:
    """``--tag KEY=VALUE`` -> (key, value); argparse's error (``bench`` exits 2) saying what is expected."""
    import argparse

    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}: e.g. --tag team=vision")
    if why := _bad_tag(key, value):
        raise argparse.ArgumentTypeError(f"{text!r}: {why}")
    return key, value
