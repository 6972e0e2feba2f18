"""What a run is: one agent on one task, one repeat, under which budget, limits and options.

The model is :class:`RunSpec`.

One model, declared once: each field says how a user gives it (``flag``: its ``bench run`` flag,
generated from here by :func:`add_flags`; ``key``: a campaign file's key, read by
:func:`bench.campaign.file.run_layer`) and its validators judge every value, whichever way it came:
the command line, a campaign file, ``run.json``/``result.json`` (which embed it whole:
:meth:`RunSpec.to_dict`, :meth:`RunSpec.from_dict`, so ``--resume``, ``bench record`` and a
campaign's job meet the same rules). A field added here travels to the flag, the file, both JSON
files, the resume and the MLflow run (``bench.tracking.schema.spec_params``/``spec_tags``) without
another line elsewhere. A validation error is said in one line naming the value as the user wrote it
(:mod:`bench.validation`).

Precedence, lowest first: the task file (``task.toml``: the budget) < the campaign file < the
command line < documented environment overrides (:mod:`bench.settings`; none of them sets a field of
a run's description today). A field a layer leaves out (absent or None) keeps the value of the layer
below it, then the default here.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import re
import secrets
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import (
    ConfigDict,
    Field,
    InstanceOf,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.dataclasses import dataclass

from bench import validation
from bench.durations import parse_duration
from bench.sandbox import limits as limits_model
from bench.sandbox.limits import LimitError, Limits
from bench.tasks import Task

GRACE_S = 30.0  # the paper's grace: seconds after the budget before SIGKILL (§3.3); the one default
DEFAULT_CAMPAIGN = "1gc-7rc"
SPEC_VERSION = 1
SEED_RANGE = 2**31  # what torch.manual_seed, numpy and Optuna's samplers all take


def given(default: Any = None, *, flag: str = "", key: str = "", arg: str = "", help: str = "", **kw: Any) -> Any:
    """A field of the description and how a user gives it.

    ``flag`` (named in errors; generated as a ``bench run`` flag when ``arg`` says its kind:
    duration, float, int, str, switch, unswitch, pairs, tags), ``key`` (a campaign file's key) and
    what its value ``expects`` (said for a wrong type).
    """
    extra = {"flag": flag, "key": key, "arg": arg, "help": help, **kw.pop("meta", {})}
    if "default_factory" in kw:
        return Field(json_schema_extra=extra, **kw)
    return Field(default, json_schema_extra=extra, **kw)


def _device(device: str | None) -> str:
    """Why the evaluation cannot use ``device``.

    "" when it can: cpu, cuda, or None for the default.
    """
    if device in (None, "cpu", "cuda"):
        return ""
    if re.fullmatch(r"cuda:\d+", device):
        n = device.split(":")[1]
        pick = f"pick the GPU with CUDA_VISIBLE_DEVICES={n} and --device cuda"
        return f"{device}: the evaluation takes cpu or cuda; {pick}"
    return f"{device!r} is not a device the evaluation can use: use cpu or cuda"


def campaign_problem(campaign: str) -> str:
    """Why ``campaign`` cannot name a campaign ("" when it can).

    It names the MLflow experiment and the workspaces' folder, so a name with no letter or digit
    would put every such campaign in the same folder.
    """
    if not re.search(r"[A-Za-z0-9]", campaign):
        return f"{campaign!r} names nothing: give a name with letters or digits, e.g. my-runs"
    return ""


_TAG_KEY = re.compile(r"[A-Za-z0-9_.\-/ ]{1,100}")


def _bad_tag(key: str, value: str) -> str:
    """Why a label cannot be an MLflow tag of the run ("" when it can)."""
    if not _TAG_KEY.fullmatch(key) or key != key.strip():
        return "a key is 1-100 letters, digits, _ . - / or inner spaces"
    if len(value) > 500 or any(c in value for c in "\r\n"):
        return "a value is one line of at most 500 characters"
    return ""


@dataclass(config=ConfigDict(extra="forbid", revalidate_instances="always"))
class RunSpec:
    """One agent, one task, one repeat, and everything that decides how the run goes.

    The run's description.

    ``task`` is the task's id; a :class:`~bench.tasks.Task` may be given instead (kept for
    :meth:`resolve_task`). At the launch the runner fills what was left to defaults (the budget, the
    device, the task's source), so the description in run.json and result.json is the run as it ran.
    """

    task: str | InstanceOf[Task]
    agent: str = Field(strict=True)
    campaign: str = given(DEFAULT_CAMPAIGN, flag="--campaign", strict=True)
    repeat: int = given(1, flag="--first-repeat", strict=True)
    budget_s: float | None = given(  # None: the task's budget
        flag="--budget", key="budget", arg="duration", strict=True,
        help="override the task budget: 90s, 3m, 1h (default: task's)",
    )  # fmt: skip
    grace_s: float = given(
        GRACE_S, flag="--grace", key="grace", arg="float", strict=True, meta={"expects": "a number of seconds"},
        help=f"seconds after the budget before SIGKILL (default {GRACE_S:g}, the paper's)",
    )  # fmt: skip
    model: str | None = given(flag="--model", arg="str", strict=True, help="model for LLM agents")
    options: dict[str, str] = given(
        flag="--agent-option", arg="pairs", default_factory=dict, strict=True,
        help="adapter option, repeatable: config=agent.toml (generic), bin=/path/to/cli, trials=20 (optuna)",
    )  # fmt: skip
    device: str | None = given(  # None: cuda when available (bench.protocol)
        flag="--device", key="device", arg="str", strict=True, help="evaluation device (default: cuda if available)"
    )
    no_weights: bool = given(  # run a task that provides pretrained weights without them (marked partial)
        False, flag="--no-weights", key="no_weights", arg="switch", strict=True,
        help="run T3 without its pretrained weights (marked partial)",
    )  # fmt: skip
    sandbox: bool = given(  # the agent runs in a bubblewrap sandbox (bench.sandbox); False: --unsandboxed, marked so
        True, flag="--unsandboxed", key="sandbox", arg="unswitch", strict=True,
        help="run the agent without the bubblewrap sandbox (where bwrap cannot run; the run is marked unsandboxed)",
    )  # fmt: skip
    run_id: str | None = Field(None, strict=True)  # the run directory's name (a campaign's stable id)
    limits: Limits = Field(default_factory=Limits)  # memory, processes, workspace, log, evaluation time
    # the run's API budget in USD, enforced by the metering gateway (bench.gateway.proxy): a
    # positive amount; it needs the sandbox (the gateway is the sandbox's only way out). None: no
    # budget
    max_cost: float | None = given(
        flag="--max-cost", key="max_cost", arg="float", strict=True, meta={"metavar": "USD"},
        help="the run's API budget: once its LLM requests cost this much (the metering gateway's tokens x the price "
        "table), further ones are refused (default: none)",
    )  # fmt: skip
    # the task's source and folder hash (bench.tasks.packs.provenance); None: taken when the run
    # starts
    task_source: dict | None = Field(None, strict=True)
    # the researcher's own labels: MLflow tags of the agent run and its summary run
    # (bench.tracking.schema.TAG_PREFIX)
    tags: dict[str, str] = given(
        flag="--tag", key="tags", arg="tags", default_factory=dict, strict=True,
        meta={"expects": 'a table of strings, e.g. tags = { team = "vision" }'},
        help="a label of your own for the run, repeatable: an MLflow tag of the run and its summary, in run.json "
        "and result.json, shown by bench report (e.g. --tag team=vision --tag sweep=lr-3)",
    )  # fmt: skip
    # the seed the agent's training starts from (bench.protocol.SEED_VAR): None for a seeded agent
    # (baseline, optuna) is drawn at the launch, one per repeat, so that repeats measure the task's
    # run-to-run noise
    seed: int | None = given(
        flag="--seed", arg="int", strict=True,
        help="the training seed (the tasks' train.py read it): reproduces a run's recorded seed; by default the "
        "baseline and optuna agents draw one per repeat (run.json, MLflow param seed), other agents get none",
    )  # fmt: skip
    console: bool = dataclasses.field(default=True, compare=False)  # stream the agent's output: not what it is

    def __post_init__(self) -> None:
        self._task: Task | None = None
        if not isinstance(self.task, str):
            self._task, self.task = self.task, self.task.id

    # --- every value's rule (the types are the fields'; the campaign file's text forms: form "file"
    @field_validator("budget_s", mode="before")
    @classmethod
    def _duration_text(cls, value: object, info: ValidationInfo) -> object:
        if validation.form(info) != "file":
            return value
        if not isinstance(value, str):
            raise validation.bad(f'write a duration as a string, e.g. budget = "40m" (got {value!r})')
        try:
            return float(parse_duration(value))
        except argparse.ArgumentTypeError as e:
            raise validation.bad(str(e)) from None

    @field_validator("budget_s")
    @classmethod
    def _budget(cls, budget: float | None) -> float | None:
        if budget is not None and not (math.isfinite(budget) and budget > 0):
            raise validation.bad(f"must be a positive duration (got {budget:g} s): e.g. 90s, 3m or 1h")
        return budget

    @field_validator("grace_s")
    @classmethod
    def _grace(cls, grace: float) -> float:
        if not (math.isfinite(grace) and grace >= 0):
            raise validation.bad(f"must be a number of seconds >= 0 (got {grace!r}); the paper uses 30")
        return grace

    @field_validator("repeat")
    @classmethod
    def _repeat(cls, repeat: int) -> int:
        if repeat < 1:
            raise validation.bad(f"must be at least 1 (got {repeat}); repeats are numbered from 1")
        return repeat

    @field_validator("max_cost")
    @classmethod
    def _cost(cls, cost: float | None) -> float | None:
        if cost is not None and not 0 < cost < math.inf:
            raise validation.bad(f"must be a positive amount in USD, e.g. 20 (got {cost!r})")
        return cost

    @field_validator("seed")
    @classmethod
    def _seed(cls, seed: int | None) -> int | None:
        if seed is not None and not 0 <= seed < SEED_RANGE:
            raise validation.bad(f"must be a whole number from 0 to {SEED_RANGE - 1} (got {seed!r})")
        return seed

    @field_validator("device")
    @classmethod
    def _device(cls, device: str | None) -> str | None:
        if why := _device(device):
            raise validation.bad(why)
        return device

    @field_validator("campaign")
    @classmethod
    def _campaign(cls, campaign: str) -> str:
        if why := campaign_problem(campaign):
            raise validation.bad(why)
        return campaign

    @field_validator("tags")
    @classmethod
    def _tags(cls, tags: dict[str, str]) -> dict[str, str]:
        for key, value in tags.items():
            if why := _bad_tag(key, value):
                raise validation.bad(f"{key}={value}: {why}")
        return tags

    @model_validator(mode="after")
    def _gateway(self) -> RunSpec:
        if self.max_cost is not None and not self.sandbox:
            raise validation.bad("is enforced by the sandbox's metering gateway: it needs the sandbox", "max_cost")
        return self

    # --- what readers ask ------------------------------------------------------------------------
    @property
    def budget(self) -> float:
        """The budget in force: the run's own, else the task's."""
        return self.budget_s if self.budget_s is not None else self.resolve_task().budget_s

    @property
    def label(self) -> str:
        """``t6-command-r1``: the run as a status line names it."""
        return f"{self.task}-{self.agent}-r{self.repeat}"

    def resolve_task(self) -> Task:
        """The task this run runs.

        The one given, else the folder its source names when still there, else the id's.
        """
        if self._task is None:
            from bench.tasks import packs

            self._task = packs.task_for_run(self.task, self.task_source)
        return self._task

    # --- JSON ------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The description as run.json and result.json embed it.

        Everything but how the console shows it.
        """
        return {"version": SPEC_VERSION, **adapter(type(self)).dump_python(self, mode="json", exclude={"console"})}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, console: bool = True) -> RunSpec:
        """A description read back (run.json, result.json), judged by the same rules as the flags.

        InputError naming the field (an unknown key with the nearest known one), a LimitError for
        its limits.
        """
        values = {k: v for k, v in d.items() if k != "version"}
        if values.get("limits") is None:
            values.pop("limits", None)
        else:
            values["limits"] = limits_of(values["limits"])
        return validate({**values, "console": console}, lambda loc: str(loc[0]) if loc else "", form="json", model=cls)

    # --- the one constructor ---------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        task: Task | str,
        agent: str,
        *layers: Mapping[str, Any],
        names: Mapping[str, str] | Callable[[str], str] | None = None,
        **fixed: Any,
    ) -> RunSpec:
        """The run's description from its task and the settings' layers, lowest first.

        The layers: campaign file, command line, environment overrides. Judged once by the model
        (InputError naming each value as ``names`` says the user wrote it: the flags by default).
        ``fixed``: what names the run rather than sets it (campaign, repeat, run_id, console). A
        layer's ``limits`` may be some of them (a dict) or all (a Limits).
        """
        merged: dict[str, Any] = {}
        for layer in layers:
            for name, value in layer.items():
                if value is None:
                    continue
                if name == "limits":
                    value = {**merged.get("limits", {}), **_limit_values(value)}
                merged[name] = value
        if "limits" in merged:
            merged["limits"] = limits_model.read(merged["limits"], "python", namer(names))
        return validate({"task": task, "agent": agent, **fixed, **merged}, namer(names), model=cls)

    def launched(self, device: str, task_source: dict, *, seeded: bool = False) -> RunSpec:
        """The description as the run goes.

        The budget, the device and the task's source filled in, and for a ``seeded`` agent without a
        seed one drawn now (:func:`draw_seed`), so that run.json records it.
        """
        seed = self.seed if self.seed is not None or not seeded else draw_seed()
        return dataclasses.replace(
            self, budget_s=self.budget, device=device, task_source=task_source, task=self.resolve_task(), seed=seed
        )


@functools.cache
def adapter(model: type) -> TypeAdapter:
    """The model's validator and serialiser, made once.

    For :class:`RunSpec`, or a subclass adding fields.
    """
    return TypeAdapter(model)


FIELDS = validation.fields_of(RunSpec)


def _meta(name: str) -> dict[str, Any]:
    info = FIELDS.get(name) or limits_model.FIELDS.get(name)
    return dict(info.json_schema_extra or {}) if info is not None else {}


# how a user names each settable field on the command line, and a campaign file's keys (key ->
# field); the limits' own flags and keys are bench.sandbox.limits's
FLAGS = {name: m["flag"] for name in FIELDS if (m := _meta(name)).get("flag")} | limits_model.FLAGS
FILE_KEYS = {m["key"]: name for name in FIELDS if (m := _meta(name)).get("key")}


def _limit_values(value: Limits | Mapping[str, Any]) -> dict[str, Any]:
    return value.to_dict() if isinstance(value, Limits) else dict(value)


def namer(names: Mapping[str, str] | Callable[[str], str] | None) -> validation.Namer:
    """A place in the model -> the value's name as the user wrote it.

    ``names``: by field; the flags by default.
    """
    by_field = names if callable(names) else (lambda f: {**FLAGS, **(names or {})}.get(f, f))

    def name(loc: validation.Loc) -> str:
        field = loc[1] if len(loc) > 1 and loc[0] == "limits" else loc[0] if loc else ""
        return by_field(str(field)) if field != "" else ""

    return name


def validate(values: Mapping[str, Any], name: validation.Namer, *, form: str = "python", model: type = RunSpec):
    """``values`` judged by the model (:class:`RunSpec` or a subclass).

    The description, or InputError/Problems.
    """
    try:
        return adapter(model).validate_python(dict(values), context={validation.FORM: form})
    except ValidationError as e:
        raise validation.refuse(e, name, model) from None


def check(spec: RunSpec, names: Mapping[str, str] | Callable[[str], str] | None = None) -> None:
    """The model's rules asked again of a description whose fields were set after it was built.

    A program's, not a user's: bench run and a campaign build theirs through :meth:`RunSpec.build`.
    """
    validate(dataclasses.asdict(spec) | {"task": spec.task, "limits": spec.limits}, namer(names), model=type(spec))


def limits_of(raw: object) -> Limits:
    """The limits a run recorded (``Limits.to_dict()``), judged by their model.

    LimitError naming the field for a missing or unknown key, a wrong type or a value no run can
    live with (a hand edit, a newer toolkit), so that a resume never runs under limits nobody set.
    """
    return limits_model.read(raw, "json", lambda loc: ".".join(map(str, loc)))


def draw_seed() -> int:
    """A fresh seed from the operating system's randomness.

    Not from Python's seeded generator, which a test or a library may have fixed: two repeats
    drawing the same seed would measure no noise at all.
    """
    return secrets.randbelow(SEED_RANGE)


__all__ = ["GRACE_S", "LimitError", "Limits", "RunSpec", "check", "limits_of"]
