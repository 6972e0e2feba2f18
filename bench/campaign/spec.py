"""The campaign file: the matrix of agents x tasks x repeats and how it runs, read and checked whole before anything
starts (a mistake found after an hour of runs costs the hour), every problem one line naming the key.

::

    name = "pilot"            # the campaign = the MLflow experiment = the workspaces' folder
    tasks = ["t1", "t6"]      # or "all"
    repeats = 5               # paper: 5 (Appendix B)
    budget = "40m"            # optional: each task's own budget when absent (a run with another is non-standard)
    [[agents]]
    name = "claude-code"
    model = "claude-opus-4-7"
    [[agents]]
    name = "command"
    agent_command = "python train.py"

Optional keys: ``grace`` (seconds after the budget before SIGKILL, 30: :data:`bench.runspec.GRACE_S`),
``device`` (the evaluation's), ``sandbox``
(true), ``no_weights`` (false), ``retries`` (2: infrastructure failures only, :mod:`bench.campaign.job`),
``executor`` (``local`` or ``slurm``), ``tasks_path`` (folders of task packs, searched as ``BENCH_TASKS_PATH``
is: each a task folder or a folder of task folders, relative to the campaign file; :mod:`bench.tasks.packs`),
``gpus`` (the local executor's GPUs, e.g. ``[0, 1]``; found with
``nvidia-smi -L`` when absent), per agent ``options`` (a table of adapter options) and a ``[slurm]`` table
(:class:`SlurmSettings`).

Each run's limits (:mod:`bench.sandbox.resource_limits`), the ``bench run`` flags of the same name with underscores
and the same defaults, for every run of the campaign::

    memory = "64G"            # --memory: the agent's processes together, and the predictor's (default 64G, at most
                              #   80 % of the node's RAM; "none": no limit)
    max_processes = 4096      # --max-processes: processes and threads ("none": no limit)
    workspace_limit = "200G"  # --workspace-limit: 10 % more ends the run ("none": no limit)
    log_limit = "128M"        # --log-limit: agent.log keeps its first and last half
    eval_budget = "1h"        # --eval-budget: the evaluation of all of a run's candidates together
    max_cost = 20.0           # --max-cost: each run's API budget in USD (the metering gateway; default: none)

A size is a string with a unit (``"512M"``, ``"1.5G"``, powers of 1024) or a whole number of bytes; the evaluation
budget is a duration like ``budget``. The Slurm executor's job time limit follows ``eval_budget`` (``slurm.
eval_margin``, :class:`SlurmSettings`): a job whose time limit ends inside its run's evaluation is killed there,
requeued and evaluates again from the start.

Stable run ids: each run of the matrix has a deterministic id, :func:`run_id`, which names its run directory
under the workspaces folder. A re-run of the campaign finds the directory of every run it started: a finished
run (result.json) is never redone, a run whose harness died is finished (:mod:`bench.resume`).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench import preflight, runspec
from bench.agents import AGENTS, AgentError
from bench.durations import fmt_s, parse_duration
from bench.errors import InputError, Problems
from bench.pipeline.evaluate import SCORER_GRACE_S
from bench.pipeline.workspace import campaign_dir
from bench.sandbox.resource_limits import LEAST, MIN_EVAL_S, LimitError, Limits, parse_size
from bench.tasks import Task, TaskError, all_tasks, get_task, packs

LIMIT_KEYS = {  # the key of each limit (Limits' field), named after its bench run flag
    "memory": "memory_bytes", "max_processes": "processes", "workspace_limit": "workspace_bytes",
    "log_limit": "log_bytes", "eval_budget": "eval_s",
}  # fmt: skip
AFTER_EVAL_S = 10 * 60  # a Slurm job's time after the evaluation: the relay's last values, collect, audit, record

TOP_KEYS = {
    "name", "tasks", "repeats", "retries", "executor", "gpus", "agents", "slurm", "tasks_path", *LIMIT_KEYS,
    *runspec.FILE_KEYS,
}  # fmt: skip
AGENT_KEYS = {"name", "model", "agent_command", "options"}
EXECUTORS = ("local", "slurm")


@dataclass(frozen=True)
class SlurmSettings:
    """The ``[slurm]`` table: how each run becomes a job of a Slurm job array (:mod:`bench.campaign.slurm`).

    A job's time limit is the run's budget + grace + ``eval_margin`` (the collect, evaluate, audit and record after
    the agent's time), so that a job is never ended by the scheduler while its run is within its budget. Left out,
    ``eval_margin`` follows the campaign's evaluation budget (:func:`eval_margin_s`); given, it must cover it."""

    cluster: str = "slurm"  # submitit's AutoExecutor cluster: slurm, or local (submitit's own backend, no Slurm)
    partition: str | None = None
    gpus_per_task: int = 1  # 0 on a CPU-only cluster
    cpus_per_task: int | None = None
    mem_gb: float | None = None
    array_parallelism: int = 64  # at most this many runs at once
    eval_margin_s: float | None = None  # None: the evaluation budget + the scorer's grace + AFTER_EVAL_S
    signal_delay_s: int = 120  # submitit's USR2 before the time limit: time to finish or leave the run resumable
    setup: tuple[str, ...] = ()  # shell lines before each job (module load, source a venv, export ...)
    additional: dict[str, object] = field(default_factory=dict)  # other sbatch options (account, qos, constraint)
    poll_s: float = 30.0  # how often the campaign looks at its jobs


SLURM_KEYS = {
    "cluster", "partition", "gpus_per_task", "cpus_per_task", "mem_gb", "array_parallelism", "eval_margin",
    "signal_delay_s", "setup", "additional", "poll_s",
}  # fmt: skip


@dataclass(frozen=True)
class AgentEntry:
    """One ``[[agents]]`` entry: an agent of the dispatch table, its model and its adapter options."""

    name: str
    model: str | None = None
    options: dict[str, str] = field(default_factory=dict, hash=False)  # (name, model) is unique in a campaign

    @property
    def label(self) -> str:
        return f"{self.name} ({self.model})" if self.model else self.name


@dataclass(frozen=True)
class RunKey:
    """One run of the matrix, with its stable id."""

    agent: AgentEntry
    task: str
    repeat: int
    run_id: str

    @property
    def label(self) -> str:
        return f"{self.task}-{self.agent.label}-r{self.repeat}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "x"


def run_id(campaign: str, agent: str, model: str | None, task: str, repeat: int) -> str:
    """The run's directory name: readable (task, agent, model, repeat) and, since two models can read the same once
    made file-name safe (``a/b`` and ``a-b``), ended by 8 hex digits of sha256 over the exact values."""
    key = json.dumps([campaign, agent, model or "", task, repeat])
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    model_part = f"-{_slug(model)}" if model else ""
    return f"{task}-{_slug(agent)}{model_part}-r{repeat}-{digest}"


@dataclass(frozen=True)
class Campaign:
    """A validated campaign file."""

    name: str
    file: Path
    task_ids: tuple[str, ...]
    repeats: int
    agents: tuple[AgentEntry, ...]
    # the file's layer of every run's description (bench.runspec.FILE_KEYS and the limits):
    # field -> value
    run: dict = field(default_factory=dict, hash=False)
    # what every run's description holds as the file sets it (task and agent aside: "-"), built
    # and checked once; what the executors, the plan and the status line read
    # (``campaign.spec.grace_s``, ``.limits``, ...)
    spec: runspec.RunSpec = field(default_factory=lambda: runspec.RunSpec("-", "-"), hash=False)
    retries: int = 2
    executor: str = "local"
    gpus: tuple[str, ...] | None = None
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    # task pack folders (bench.tasks.packs), searched in this process once loaded
    tasks_path: tuple[Path, ...] = ()
    # each task's budget once looked up: a lookup searches every pack (~10 ms), and the status line
    # and the Slurm grouping ask once per run (245 runs: seconds)
    _budgets: dict[str, float] = field(default_factory=dict, compare=False, repr=False)

    @property
    def folder(self) -> Path:
        """Where its run directories live (the same folder ``bench run --campaign NAME`` uses)."""
        return campaign_dir(self.name)

    def tasks(self) -> list[Task]:
        """The campaign's tasks, in the file's order."""
        return [get_task(t) for t in self.task_ids]

    def runs(self) -> list[RunKey]:
        """Every run of the matrix, repeat by repeat.

        Each agent and task gets its first repeat before any second: a campaign stopped early still
        covers the matrix.
        """
        return [
            RunKey(agent, task, repeat, run_id(self.name, agent.name, agent.model, task, repeat))
            for repeat in range(1, self.repeats + 1)
            for task in self.task_ids
            for agent in self.agents
        ]

    def run_dir(self, key: RunKey) -> Path:
        """The run directory of one run of the matrix (named by its stable id)."""
        return self.folder / key.run_id

    @property
    def eval_margin_s(self) -> float:
        """What a Slurm job gets after the agent's time (:class:`SlurmSettings`).

        ``slurm.eval_margin`` when given, else the evaluation budget, the scorer's grace to report
        and the rest (:func:`eval_margin_s`).
        """
        if self.slurm.eval_margin_s is not None:
            return self.slurm.eval_margin_s
        return eval_margin_s(self.spec.limits)

    def budget_of(self, task: str) -> float:
        """The budget of ``task``'s runs: the file's, else the task's own."""
        if self.spec.budget_s is not None:
            return self.spec.budget_s
        if task not in self._budgets:
            self._budgets[task] = get_task(task).budget_s
        return self._budgets[task]

    def key(self, run_id: str) -> RunKey:
        """The run of the matrix with this id.

        InputError if none: the file changed since the id was made.
        """
        for key in self.runs():
            if key.run_id == run_id:
                return key
        raise InputError(f"{self.file}: no run {run_id!r} in campaign {self.name!r} (was the file changed?)")


def load(path: Path) -> Campaign:
    """Read and check a campaign file: every problem of the file at once, one line each naming its key
    (:class:`bench.errors.Problems`, an InputError); a file that cannot be read or parsed is one line. Each part
    of the file is judged whatever the others held (a part that depends on one found wrong is judged with its
    default): a file fixed key by key would cost a try per key."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"no campaign file {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path} cannot be read: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{path} is not valid TOML: {e}") from None
    where = str(path)
    problems = preflight.Collect()

    def bad(key: str, why: str) -> InputError:
        return InputError(f"{where}: {key}: {why}")

    def part(judge: Callable[[], object], default: object = None) -> object:
        """``judge()``, or ``default`` with its problem kept."""
        with problems.check():
            return judge()
        return default

    def named() -> str:
        name = raw.get("name")
        if not isinstance(name, str):
            raise bad("name", 'missing or not a string: name = "my-campaign" (the MLflow experiment)')
        try:
            preflight.check_campaign(name)
        except InputError as e:
            raise bad("name", str(e)) from None
        return name

    def at_least(key: str, default: int, least: int, why: str) -> int:
        value = integer(raw.get(key, default), key, bad)
        if value < least:
            raise bad(key, f"must be {why} (got {value})")
        return value

    def executor_of() -> str:
        if (executor := raw.get("executor", "local")) not in EXECUTORS:
            raise bad("executor", f"must be one of {', '.join(EXECUTORS)} (got {executor!r})")
        return executor

    part(lambda: unknown_keys(raw, TOP_KEYS, where, ""))
    name = part(named, runspec.DEFAULT_CAMPAIGN)
    repeats = part(lambda: at_least("repeats", 1, 1, "at least 1; the paper runs 5"), 1)
    retries = part(lambda: at_least("retries", 2, 0, "0 or more"), 2)
    executor = part(executor_of, "local")
    run = part(lambda: runspec.file_layer(raw, bad), {})  # every run's description, as the file sets it
    run["limits"] = part(lambda: parse_limits(raw, bad), Limits())
    slurm = part(lambda: slurm_settings(raw.get("slurm", {}), where), SlurmSettings())
    if slurm.eval_margin_s is not None and "eval_budget" not in raw:  # a file written before eval_budget existed
        run["limits"] = fit_to_margin(slurm.eval_margin_s, run["limits"])
    part(lambda: check_margin(slurm.eval_margin_s, run["limits"], where))
    keys = {field: key for key, field in runspec.FILE_KEYS.items()}
    # the same checks as bench run's flags (bench.runspec.check), each naming the file's key
    named_as = lambda f: f"{where}: {keys.get(f, f)}:"  # noqa: E731
    shared = part(lambda: runspec.RunSpec.build("-", "-", run, names=named_as, campaign=name))
    tasks_path = part(lambda: _tasks_path(raw.get("tasks_path", []), path, bad), ())  # first: tasks may be its own
    task_ids = part(lambda: _tasks(raw.get("tasks"), bad), ())
    agents = _agents(raw.get("agents"), where, problems)
    gpus = part(lambda: _gpus(raw["gpus"], bad)) if "gpus" in raw else None
    try:
        problems.raise_any()
    except InputError as e:
        e.agents = agents  # the entries read well: `bench campaign run` still asks their keys and endpoints
        raise
    return Campaign(
        name=name,
        file=path.resolve(),
        task_ids=task_ids,
        repeats=repeats,
        agents=agents,
        run=run,
        spec=shared,
        retries=retries,
        executor=executor,
        gpus=gpus,
        slurm=slurm,
        tasks_path=tasks_path,
    )


def _tasks_path(value: object, path: Path, bad) -> tuple[Path, ...]:
    """The ``tasks_path`` folders, relative to the campaign file, added to this process's task search; a job
    process reads the file again, so its runs find the same tasks."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(p, str) and p.strip() for p in value):
        raise bad("tasks_path", f'a list of folders: tasks_path = ["../my-tasks"] (got {value!r})')
    folders = tuple((path.parent / Path(p).expanduser()).resolve() for p in value)
    try:  # a missing folder or an id taken twice: said here, naming the key
        packs.add_search_path(folders, f"{path}: tasks_path")
    except TaskError as e:
        raise bad("tasks_path", str(e)) from None
    return folders


def _tasks(value: object, bad) -> tuple[str, ...]:
    if value == "all":
        return tuple(t.id for t in all_tasks())
    if not isinstance(value, list) or not value or not all(isinstance(t, str) and t.strip() for t in value):
        raise bad("tasks", 'missing or not a list of task ids: tasks = ["t1", "t6"] or tasks = "all"')
    ids = []
    for t in value:
        try:
            ids.append(get_task(t.strip()).id)
        except TaskError as e:
            raise bad("tasks", str(e)) from None
    if len(set(ids)) != len(ids):
        raise bad("tasks", f"a task is listed twice: {', '.join(ids)}")
    return tuple(ids)


def _agents(value: object, where: str, problems: preflight.Collect) -> tuple[AgentEntry, ...]:
    """The ``[[agents]]`` tables, each judged whatever the others held (its problems added to ``problems``)."""
    if not isinstance(value, list) or not value or not all(isinstance(a, dict) for a in value):
        problems.add(f'{where}: agents: missing: add an [[agents]] table per agent, with name = "..."')
        return ()
    out: list[AgentEntry] = []
    for i, raw in enumerate(value):
        with problems.check():
            entry, at = _agent(raw, f"agents[{i}]", where), f"{where}: agents[{i}]"
            if any((a.name, a.model) == (entry.name, entry.model) for a in out):
                raise InputError(f"{at}: {entry.label} is listed twice; each (agent, model) once per campaign")
            out.append(entry)
    return tuple(out)


def _agent(raw: dict, at: str, where: str) -> AgentEntry:
    unknown_keys(raw, AGENT_KEYS, where, f"{at}.")
    name, model = raw.get("name"), raw.get("model")
    if name not in AGENTS:
        raise InputError(f"{where}: {at}.name: unknown agent {name!r}; known: {', '.join(sorted(AGENTS))}")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise InputError(f"{where}: {at}.model: must be a non-empty string (got {model!r})")
    options = raw.get("options", {})
    if not isinstance(options, dict) or not all(isinstance(v, str) for v in options.values()):
        raise InputError(f'{where}: {at}.options: must be a table of strings, e.g. options = {{ bin = "..." }}')
    options = dict(options)
    if "agent_command" in raw:
        if name != "command":
            raise InputError(f"{where}: {at}.agent_command: is for the command agent only; {name} would ignore it")
        if not isinstance(raw["agent_command"], str):
            raise InputError(f"{where}: {at}.agent_command: must be a string")
        options["command"] = raw["agent_command"]
    try:
        preflight.check_agent(name, options, model)
    except AgentError as e:
        raise InputError(f"{where}: {at}: {e}") from None
    return AgentEntry(name, model, options)


def _gpus(value: object, bad) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(g, int | str) and not isinstance(g, bool) for g in value):
        raise bad("gpus", f"must be a list of GPU indices or UUIDs, e.g. gpus = [0, 1] (got {value!r})")
    gpus = tuple(str(g).strip() for g in value)
    if any(not g or "," in g for g in gpus) or len(set(gpus)) != len(gpus):
        raise bad("gpus", f"each GPU once, one per entry (got {value!r})")
    return gpus


# --- the limit keys (the bench run limit flags) and the Slurm job's evaluation margin -----------------------


def parse_limits(raw: dict, bad: Callable[[str, str], Exception]) -> Limits:
    """The ``memory``, ``max_processes``, ``workspace_limit``, ``log_limit`` and ``eval_budget`` keys, each
    checked as its ``bench run`` flag is (:func:`bench.preflight.parse_limits`); the defaults for those absent."""
    values = Limits().to_dict()
    for key, name in LIMIT_KEYS.items():
        if key not in raw:
            continue
        value = raw[key]
        off = isinstance(value, str) and value.strip().lower() == "none"
        if off and key in ("log_limit", "eval_budget"):
            what = 'agent.log always has a limit; give a size, e.g. log_limit = "1G"'
            if key == "eval_budget":
                what = 'the evaluation always has a budget; give a duration, e.g. eval_budget = "1h"'
            raise bad(key, f"cannot be none: {what}")
        if off:
            values[name] = None
        elif key == "eval_budget":
            if not isinstance(value, str):
                raise bad(key, f'write a duration as a string, e.g. eval_budget = "1h" (got {value!r})')
            try:
                values[name] = float(parse_duration(value))
            except Exception as e:  # argparse's error type: the message is the one line
                raise bad(key, str(e)) from None
            if not (math.isfinite(values[name]) and values[name] >= MIN_EVAL_S):
                raise bad(key, f'{value!r} cannot score a checkpoint: give at least {MIN_EVAL_S:g}s, e.g. "1h"')
        elif key == "max_processes":
            if isinstance(value, bool) or not isinstance(value, int):
                raise bad(key, f"must be a whole number (got {value!r})")
            values[name] = value
        elif isinstance(value, str):
            try:
                values[name] = parse_size(value)
            except LimitError as e:
                raise bad(key, str(e)) from None
        elif isinstance(value, int) and not isinstance(value, bool):
            values[name] = value  # bytes
        else:
            raise bad(key, f'write a size as a string, e.g. {key} = "64G", or "none" (got {value!r})')
        least = LEAST.get(name)
        if least is not None and values[name] is not None and values[name] < least:
            raise bad(key, f'{value!r} is too small to run anything: give at least {_size(least, key)} (or "none")')
    return Limits(**values)


def _size(n: int, key: str) -> str:
    """A limit's least value as the file would write it: 16 processes, "64M" bytes."""
    if key == "max_processes":
        return str(n)
    unit, size = next((u, b) for u, b in (("G", 2**30), ("M", 2**20), ("K", 2**10), ("", 1)) if n % b == 0)
    return f'"{n // size}{unit}"'


def eval_margin_s(limits: Limits) -> float:
    """A Slurm job's time after the agent's (``slurm.eval_margin`` left out): the evaluation budget, the scorer's
    grace to report after it, and :data:`AFTER_EVAL_S` for the rest."""
    return limits.eval_s + SCORER_GRACE_S + AFTER_EVAL_S


def fit_to_margin(given_s: float, limits: Limits) -> Limits:
    """The limits with an evaluation budget that fits a ``slurm.eval_margin`` given without ``eval_budget`` (a file
    written before the key existed keeps working): the margin less the scorer's grace and the time after the
    evaluation (:data:`AFTER_EVAL_S`, at most half the margin); a 20-minute margin leaves 9 minutes. A margin too
    short for even :data:`MIN_EVAL_S` is left to :func:`check_margin` to refuse."""
    fitted = given_s - SCORER_GRACE_S - min(AFTER_EVAL_S, given_s / 2)
    if fitted < MIN_EVAL_S:
        return limits
    return Limits(**{**limits.to_dict(), "eval_s": min(limits.eval_s, fitted)})


def check_margin(given_s: float | None, limits: Limits, where: str) -> None:
    """InputError for a ``slurm.eval_margin`` that does not cover the evaluation budget and the scorer's grace."""
    least = limits.eval_s + SCORER_GRACE_S
    if given_s is not None and given_s < least:
        raise InputError(
            f"{where}: slurm.eval_margin: {fmt_s(given_s)} does not cover the evaluation budget "
            f"({fmt_s(limits.eval_s)}) and the scorer's {SCORER_GRACE_S:.0f} s to report: Slurm would end jobs in "
            f"their evaluation; give at least {fmt_s(least)} or leave it out (then {fmt_s(eval_margin_s(limits))})"
        )


# --- the [slurm] table, and the key checks the whole file uses --------------------------------------------------


def unknown_keys(table: dict, known: set[str], where: str, prefix: str) -> None:
    """One clear line for each key of ``table`` that is not in ``known`` (two typos: both named in one try)."""
    extra = sorted(set(table) - known)
    if extra:
        lines = [f"{where}: {prefix}{key}: unknown key; known: {', '.join(sorted(known))}" for key in extra]
        raise Problems(lines) if len(lines) > 1 else InputError(lines[0])


def integer(value: object, key: str, bad) -> int:
    """``value`` as a whole number (a TOML bool is not one), else ``bad(key, why)``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(key, f"must be a whole number (got {value!r})")
    return value


def slurm_settings(value: object, where: str) -> SlurmSettings:
    """The campaign file's ``[slurm]`` table, each key checked (one line naming the key and what to write)."""
    if not isinstance(value, dict):
        raise InputError(f"{where}: slurm: must be a table: [slurm]")
    unknown_keys(value, SLURM_KEYS, where, "slurm.")

    def bad(key: str, why: str) -> InputError:
        return InputError(f"{where}: slurm.{key}: {why}")

    kw: dict[str, object] = {}
    if "cluster" in value:
        if value["cluster"] not in ("slurm", "local"):
            raise bad("cluster", f"must be slurm or local (submitit's local backend) (got {value['cluster']!r})")
        kw["cluster"] = value["cluster"]
    if "partition" in value:
        if not isinstance(value["partition"], str):
            raise bad("partition", "must be a string")
        kw["partition"] = value["partition"]
    for key, least in (("gpus_per_task", 0), ("cpus_per_task", 1), ("array_parallelism", 1), ("signal_delay_s", 0)):
        if key in value:
            n = integer(value[key], key, bad)
            if n < least:
                raise bad(key, f"must be at least {least} (got {n})")
            kw[key] = n
    for key in ("mem_gb", "poll_s"):
        if key in value:
            v = value[key]
            if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
                raise bad(key, f"must be a positive number (got {v!r})")
            kw[key] = float(v)
    if "eval_margin" in value:
        try:
            kw["eval_margin_s"] = parse_duration(str(value["eval_margin"]))
        except Exception as e:
            raise bad("eval_margin", str(e)) from None
    if "setup" in value:
        if not isinstance(value["setup"], list) or not all(isinstance(s, str) for s in value["setup"]):
            raise bad("setup", 'must be a list of shell lines, e.g. setup = ["module load cuda"]')
        kw["setup"] = tuple(value["setup"])
    if "additional" in value:
        if not isinstance(value["additional"], dict):
            raise bad("additional", 'must be a table of sbatch options, e.g. additional = { account = "lab" }')
        kw["additional"] = dict(value["additional"])
    return SlurmSettings(**kw)
