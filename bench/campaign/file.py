"""The campaign file's model.

Its keys, their types and rules, its ``[[agents]]`` and ``[slurm]`` tables.

Read by pydantic in the file's form (:data:`bench.validation.FORM` ``"file"``): an unknown key is
refused with the nearest known one, a wrong type or value is one line naming the key and what to
write. The keys that set a field of every run's description (``budget``, ``max_cost``, the limits,
...) are not declared here: they are the fields' own (``key`` in :class:`bench.runspec.RunSpec` and
:class:`bench.sandbox.limits.Limits`), added to this model by :func:`model_for` and judged by the
run's model (:func:`run_layer`). What needs the machine (the task registry, an
agent's options) is judged by :func:`bench.campaign.spec.load` after the file's own keys.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from bench import runspec, validation
from bench.agents import AGENTS
from bench.durations import fmt_s, parse_duration
from bench.errors import InputError, Problems
from bench.pipeline.evaluate import SCORER_GRACE_S
from bench.sandbox import limits as limits_model
from bench.sandbox.limits import MIN_EVAL_S, Limits

AFTER_EVAL_S = 10 * 60  # a Slurm job's time after the evaluation: the relay's last values, collect, audit, record
STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)


def _hint(expects: str) -> dict[str, Any]:
    return {"json_schema_extra": {"expects": expects}}


class SlurmSettings(BaseModel):
    """The ``[slurm]`` table: how each run becomes a job of a Slurm job array.

    See :mod:`bench.campaign.slurm`.

    A job's time limit is the run's budget + grace + ``eval_margin`` (the collect, evaluate, audit
    and record after the agent's time), so that a job is never ended by the scheduler while its run
    is within its budget. Left out, ``eval_margin`` follows the campaign's evaluation budget
    (:func:`eval_margin_s`); given, it must cover it.
    """

    model_config = STRICT

    cluster: Literal["slurm", "local"] = "slurm"  # submitit's AutoExecutor cluster; local: its own backend
    partition: str | None = None
    gpus_per_task: int = Field(1, ge=0)  # 0 on a CPU-only cluster
    cpus_per_task: int | None = Field(None, ge=1)
    mem_gb: float | None = Field(None, gt=0)
    array_parallelism: int = Field(64, ge=1)  # at most this many runs at once
    # None: the evaluation budget + the scorer's grace + AFTER_EVAL_S
    eval_margin_s: float | None = Field(None, alias="eval_margin", **_hint('a duration, e.g. eval_margin = "20m"'))
    signal_delay_s: int = Field(120, ge=0)  # submitit's USR2 before the time limit: time to finish or leave it
    # shell lines before each job (module load, source a venv, export ...)
    setup: tuple[str, ...] = Field(
        (), strict=False, **_hint('a list of shell lines, e.g. setup = ["module load cuda"]')
    )
    # other sbatch options (account, qos, constraint)
    additional: dict[str, Any] = Field(
        default_factory=dict, **_hint('a table of sbatch options, e.g. additional = { account = "lab" }')
    )
    poll_s: float = Field(30.0, gt=0)  # how often the campaign looks at its jobs

    @field_validator("eval_margin_s", mode="before")
    @classmethod
    def _margin(cls, value: object) -> object:
        try:
            return None if value is None else float(parse_duration(str(value)))
        except Exception as e:  # argparse's error type: its message is the one line
            raise validation.bad(str(e)) from None


class AgentTable(BaseModel):
    """One ``[[agents]]`` table: an agent of the dispatch table, its model, its adapter options."""

    model_config = STRICT

    name: str = Field(**_hint('an agent\'s name: name = "claude-code" (bench agents lists them)'))
    model: str | None = Field(None, min_length=1, **_hint("a non-empty string"))
    agent_command: str | None = None
    options: dict[str, str] = Field(default_factory=dict, **_hint('a table of strings, e.g. options = { bin = "..." }'))

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in AGENTS:
            raise validation.bad(f"unknown agent {name!r}; {validation.suggest(name, AGENTS)}")
        return name

    @model_validator(mode="after")
    def _command(self) -> AgentTable:
        if self.agent_command is not None and self.name != "command":
            why = f"is for the command agent only; {self.name} would ignore it"
            raise validation.bad(why, "agent_command")
        return self


class CampaignFile(BaseModel):
    """The file's own keys (the run's keys are added by :func:`model_for`)."""

    model_config = STRICT

    name: str | None = Field(None, validate_default=True)
    repeats: int = 1
    retries: int = 2
    executor: Literal["local", "slurm"] = "local"
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    tasks_path: str | list[str] = Field([], **_hint('a list of folders: tasks_path = ["../my-tasks"]'))
    tasks: Literal["all"] | list[str] | None = Field(
        None, validate_default=True, **_hint('a list of task ids: tasks = ["t1", "t6"] or tasks = "all"')
    )
    agents: list[dict[str, Any]] | None = Field(None, validate_default=True)  # each judged as an AgentTable
    gpus: list[int | str] | None = Field(None, **_hint("a list of GPU indices or UUIDs, e.g. gpus = [0, 1]"))

    @field_validator("name")
    @classmethod
    def _name(cls, name: str | None) -> str:
        if name is None:
            raise validation.bad('missing or not a string: name = "my-campaign" (the MLflow experiment)')
        if why := runspec.campaign_problem(name):
            raise validation.bad(why)
        return name

    @field_validator("repeats")
    @classmethod
    def _repeats(cls, repeats: int) -> int:
        if repeats < 1:
            raise validation.bad(f"must be at least 1; the paper runs 5 (got {repeats})")
        return repeats

    @field_validator("retries")
    @classmethod
    def _retries(cls, retries: int) -> int:
        if retries < 0:
            raise validation.bad(f"must be 0 or more (got {retries})")
        return retries

    @field_validator("tasks")
    @classmethod
    def _tasks(cls, tasks: str | list[str] | None) -> str | list[str]:
        if not tasks or (tasks != "all" and not all(t.strip() for t in tasks)):
            raise validation.bad('missing or not a list of task ids: tasks = ["t1", "t6"] or tasks = "all"')
        return tasks

    @field_validator("agents")
    @classmethod
    def _agents(cls, agents: list | None) -> list:
        if not agents:
            raise validation.bad('missing: add an [[agents]] table per agent, with name = "..."')
        return agents

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, gpus: list[int | str] | None) -> list[int | str] | None:
        said = [str(g).strip() for g in gpus or ()]
        if any(not g or "," in g for g in said) or len(set(said)) != len(said):
            raise validation.bad(f"each GPU once, one per entry (got {gpus!r})")
        return gpus


def run_layer(raw: Mapping[str, Any], where: str, spec: type) -> dict[str, Any]:
    """The file's layer of every run's description, read by the run's model (``spec``, a RunSpec).

    Its keys (the fields' ``key``, the limits' keys) are read in the file's text forms ("40m",
    "64G", "none"); each problem is one line naming ``where: key:``.
    """
    extras = {f: info.json_schema_extra or {} for f, info in validation.fields_of(spec).items()}
    keys = {m["key"]: f for f, m in extras.items() if m.get("key")}
    fields = {keys[k]: v for k, v in raw.items() if k in keys}
    limits = {limits_model.KEYS[k]: v for k, v in raw.items() if k in limits_model.KEYS}
    said = {**{f: k for k, f in keys.items()}, **{f: k for k, f in limits_model.KEYS.items()}}
    name = runspec.namer(lambda f: f"{where}: {said.get(f, f)}:")
    problems: list[str] = []
    try:
        described = runspec.validate({"task": "-", "agent": "-", **fields}, name, form="file", model=spec)
    except InputError as e:
        problems += getattr(e, "lines", [str(e)])
    try:
        fields["limits"] = limits_model.read(limits, "file", name)
    except InputError as e:
        problems += getattr(e, "lines", [str(e)])
    if problems:
        raise Problems(problems) if len(problems) > 1 else InputError(problems[0])
    return {f: getattr(described, f) for f in fields if f != "limits"} | {"limits": fields["limits"]}


def run_keys(spec: type, *, ordered: bool = False) -> list[str]:
    """Every key the file may give of each run's description: ``spec``'s fields' and the limits'.

    In the models' order (``ordered``), else sorted.
    """
    extras = (info.json_schema_extra or {} for info in validation.fields_of(spec).values())
    keys = [m["key"] for m in extras if m.get("key")] + list(limits_model.KEYS)
    return keys if ordered else sorted(keys)


@functools.cache
def model_for(spec: type) -> type[CampaignFile]:
    """The file's model with the keys of every run's description.

    The keys are those that ``spec`` (a RunSpec) declares.
    """
    keys = {key: (Any, None) for key in run_keys(spec)}
    return create_model("CampaignFile", __base__=CampaignFile, **keys)


def name_of(where: str) -> validation.Namer:
    """A place in the file -> ``where: key:`` (``agents[0].model``, ``slurm.eval_margin``)."""

    def name(loc: validation.Loc) -> str:
        said = ""
        for part in loc:
            part = "eval_margin" if part == "eval_margin_s" else part
            said += f"[{part}]" if isinstance(part, int) else f".{part}" if said else str(part)
        return f"{where}: {said}:"

    return name


# --- the Slurm job's evaluation margin ----------------------------------------------------------
def eval_margin_s(limits: Limits) -> float:
    """A Slurm job's time after the agent's (``slurm.eval_margin`` left out).

    The evaluation budget, the scorer's grace to report after it, and :data:`AFTER_EVAL_S` for the
    rest.
    """
    return limits.eval_s + SCORER_GRACE_S + AFTER_EVAL_S


def fit_to_margin(given_s: float, limits: Limits) -> Limits:
    """The limits with an evaluation budget that fits a ``slurm.eval_margin`` given alone.

    A file written before the ``eval_budget`` key existed keeps working: the margin less the
    scorer's grace and the time after the evaluation (:data:`AFTER_EVAL_S`, at most half the
    margin); a 20-minute margin leaves 9 minutes. A margin too short for even :data:`MIN_EVAL_S` is
    left to :func:`check_margin` to refuse.
    """
    fitted = given_s - SCORER_GRACE_S - min(AFTER_EVAL_S, given_s / 2)
    if fitted < MIN_EVAL_S:
        return limits
    return Limits(**{**limits.to_dict(), "eval_s": min(limits.eval_s, fitted)})


def check_margin(given_s: float | None, limits: Limits, where: str) -> None:
    """InputError for a ``slurm.eval_margin`` that does not cover the evaluation budget.

    The margin must cover the scorer's grace too.
    """
    least = limits.eval_s + SCORER_GRACE_S
    if given_s is not None and given_s < least:
        raise InputError(
            f"{where}: slurm.eval_margin: {fmt_s(given_s)} does not cover the evaluation budget "
            f"({fmt_s(limits.eval_s)}) and the scorer's {SCORER_GRACE_S:.0f} s to report: Slurm would end jobs in "
            f"their evaluation; give at least {fmt_s(least)} or leave it out (then {fmt_s(eval_margin_s(limits))})"
        )
