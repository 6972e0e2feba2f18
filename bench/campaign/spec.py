"""The campaign file: the matrix of agents x tasks x repeats and how it runs.

Read and checked whole before anything starts (a mistake found after an hour of runs costs the
hour), every problem one line naming the key.

::

    name = "pilot"            # the campaign = the MLflow experiment = the workspaces' folder
    tasks = ["t1", "t6"]      # or "all"
    repeats = 5               # paper: 5 (Appendix B)
    budget = "40m"            # optional: each task's own when absent (another is non-standard)
    [[agents]]
    name = "claude-code"
    model = "claude-opus-4-7"
    [[agents]]
    name = "command"
    agent_command = "python train.py"

Optional keys: ``grace`` (seconds after the budget before SIGKILL, 30:
:data:`bench.runspec.GRACE_S`), ``device`` (the evaluation's), ``sandbox`` (true), ``no_weights``
(false), ``retries`` (2: infrastructure failures only, :mod:`bench.campaign.job`), ``executor``
(``local`` or ``slurm``), ``tasks_path`` (folders of task packs, searched as ``BENCH_TASKS_PATH``
is: each a task folder or a folder of task folders, relative to the campaign file;
:mod:`bench.tasks.packs`), ``gpus`` (the local executor's GPUs, e.g. ``[0, 1]``; found with
``nvidia-smi -L`` when absent), per agent ``options`` (a table of adapter options) and a ``[slurm]``
table (:class:`SlurmSettings`).

Each run's limits (:mod:`bench.sandbox.limits`), the ``bench run`` flags of the same name with
underscores and the same defaults, for every run of the campaign::

    memory = "64G"            # --memory: the agent's processes together, and the predictor's
                              #   (default 64G, at most 80 % of the node's RAM; "none": no limit)
    max_processes = 4096      # --max-processes: processes and threads ("none": no limit)
    workspace_limit = "200G"  # --workspace-limit: 10 % more ends the run ("none": no limit)
    log_limit = "128M"        # --log-limit: agent.log keeps its first and last half
    eval_budget = "1h"        # --eval-budget: the evaluation of all of a run's candidates together
    max_cost = 20.0           # --max-cost: each run's API budget in USD (the metering gateway;
                              #   default: none; it needs the sandbox)

A size is a string with a unit (``"512M"``, ``"1.5G"``, powers of 1024) or a whole number of bytes;
the evaluation budget is a duration like ``budget``. The Slurm executor's job time limit follows
``eval_budget`` (``slurm. eval_margin``, :class:`SlurmSettings`): a job whose time limit ends inside
its run's evaluation is killed there, requeued and evaluates again from the start.

Stable run ids: each run of the matrix has a deterministic id, :func:`run_id`, which names its run
directory under the workspaces folder. A re-run of the campaign finds the directory of every run it
started: a finished run (result.json) is never redone, a run whose harness died is finished
(:mod:`bench.resume`).
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bench import preflight, runspec, validation
from bench.agents import AgentError
from bench.campaign.file import (
    AFTER_EVAL_S,
    AgentTable,
    SlurmSettings,
    check_margin,
    eval_margin_s,
    fit_to_margin,
    model_for,
    name_of,
    run_keys,
    run_layer,
)
from bench.errors import InputError, Problems
from bench.pipeline.workspace import campaign_dir
from bench.sandbox.limits import Limits
from bench.tasks import Task, TaskError, all_tasks, get_task, packs

__all__ = ["AFTER_EVAL_S", "AgentEntry", "Campaign", "RunKey", "SlurmSettings", "eval_margin_s", "load", "run_id"]


@dataclass(frozen=True)
class AgentEntry:
    """One ``[[agents]]`` entry: an agent of the dispatch table, its model and its options.

    The options are the adapter's.
    """

    name: str
    model: str | None = None
    options: dict[str, str] = field(default_factory=dict, hash=False)  # (name, model) is unique in a campaign

    @property
    def label(self) -> str:
        """The entry as the status line shows it: ``name (model)``."""
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
        """The run as the status line shows it: ``t6-name (model)-r1``."""
        return f"{self.task}-{self.agent.label}-r{self.repeat}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "x"


def run_id(campaign: str, agent: str, model: str | None, task: str, repeat: int) -> str:
    """The run's directory name: readable, and unique by a hash of the exact values.

    Readable: task, agent, model, repeat; since two models can read the same once made file-name
    safe (``a/b`` and ``a-b``), it ends with 8 hex digits of sha256 over the exact values.
    """
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
    # the file's layer of every run's description (bench.runspec.FILE_KEYS and the limits): field ->
    # value
    run: dict = field(default_factory=dict, hash=False)
    # what every run's description holds as the file sets it (task and agent aside: "-"), built
    # and checked once; what the executors, the plan and the status line read
    # (``campaign.spec.grace_s``, ``.limits``, ...)
    spec: runspec.RunSpec = field(default_factory=lambda: runspec.RunSpec("-", "-"), hash=False)
    retries: int = 2
    executor: str = "local"
    gpus: tuple[str, ...] | None = None
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    tasks_path: tuple[Path, ...] = ()  # task pack folders (bench.tasks.packs), searched in this process once loaded
    # each task's budget once looked up: a lookup searches every pack (~10 ms), and the status line
    # and the Slurm grouping ask once per run (245 runs: seconds)
    _budgets: dict[str, float] = field(default_factory=dict, compare=False, repr=False)

    @property
    def folder(self) -> Path:
        """Where its run directories live (the same folder ``bench run --campaign NAME`` uses)."""
        return campaign_dir(self.name)

    def tasks(self) -> list[Task]:
        """The matrix's tasks, looked up."""
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
        """The run's directory: the campaign's folder and the run's stable id."""
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
        """The budget of a task's runs: the file's, else the task's own (looked up once)."""
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
    """Read and check a campaign file.

    Every problem of the file at once, one line each naming its key (:class:`bench.errors.Problems`,
    an InputError); a file that cannot be read or parsed is one line. The file's keys are judged by
    its model (:mod:`bench.campaign.file`), each run's keys by the run's
    (:func:`bench.campaign.file.run_layer`), then what needs the machine (the task registry, each
    agent's options), each part whatever the others held (a part found wrong is judged with its
    default): a file fixed key by key would cost a try per key.
    """
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"no campaign file {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path} cannot be read: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{path} is not valid TOML: {e}") from None
    where, spec = str(path), runspec.RunSpec
    model, name = model_for(spec), name_of(where)
    found: list[tuple[validation.Loc, str]] = []  # (the key's place, the line)
    failed: set = set()
    try:
        top = model.model_validate(raw, context={validation.FORM: "file"})
    except ValidationError as e:
        found += validation.located(e, name, model)
        failed = {loc[0] for loc, _ in found}
        kept = {k: v for k, v in raw.items() if k not in failed}
        top = model.model_validate({**_FALLBACK, **kept}, context={validation.FORM: "file"})
    given = {k: raw[k] for k in run_keys(spec) if k in raw}
    run: dict[str, Any] = {"limits": Limits()}
    try:  # every run's description, as the file sets it
        run = run_layer(given, where, spec)
    except InputError as e:
        found += [((_key_of(line, where),), line) for line in getattr(e, "lines", [str(e)])]
    if top.slurm.eval_margin_s is not None and "eval_budget" not in raw:  # a file written before eval_budget
        run["limits"] = fit_to_margin(top.slurm.eval_margin_s, run["limits"])
    found += _checked(("slurm",), lambda: check_margin(top.slurm.eval_margin_s, run["limits"], where))
    tasks_path: tuple[Path, ...] = ()
    task_ids: tuple[str, ...] = ()
    if "tasks_path" not in failed:  # first: the tasks may be its own
        try:
            tasks_path = _tasks_path(top.tasks_path, path)
        except TaskError as e:
            found.append((("tasks_path",), f"{where}: tasks_path: {e}"))
    if "tasks" not in failed:
        try:
            task_ids = _tasks(top.tasks)
        except (TaskError, InputError) as e:
            found.append((("tasks",), f"{where}: tasks: {e}"))
    agents, lines = _agents(top.agents if "agents" not in failed else [], where)
    found += lines
    if found:
        ranked = sorted(found, key=lambda f: -1 if len(f[0]) == 1 and "unknown key" in f[1] else _rank(f[0], spec))
        said = list(dict.fromkeys(line for _, line in ranked))
        error = Problems(said) if len(said) > 1 else InputError(said[0])
        error.agents = agents  # the entries read well: `bench campaign run` still asks their keys and endpoints
        raise error
    gpus = tuple(str(g).strip() for g in top.gpus) if top.gpus is not None else None
    return Campaign(
        name=top.name,
        file=path.resolve(),
        task_ids=task_ids,
        repeats=top.repeats,
        agents=agents,
        run=run,
        spec=spec.build("-", "-", run, campaign=top.name),
        retries=top.retries,
        executor=top.executor,
        gpus=gpus,
        slurm=top.slurm,
        tasks_path=tasks_path,
    )


# a part found wrong is judged with these (then left out: no task, no agent of the file is asked
# about)
_FALLBACK = {"name": runspec.DEFAULT_CAMPAIGN, "tasks": "all", "agents": [{}]}


def _rank(loc: validation.Loc, spec: type) -> int:
    """Where a problem's key comes in the report.

    The file's unknown keys, then its keys in the order of its model, the run's keys (in their
    model's order) after ``executor``.
    """
    order = ["name", "repeats", "retries", "executor", *run_keys(spec, ordered=True), "slurm"]
    order += ["tasks_path", "tasks", "agents", "gpus"]
    key = str(loc[0]) if loc else ""
    return order.index(key) if key in order else len(order)


def _key_of(line: str, where: str) -> str:
    return line.removeprefix(f"{where}: ").split(":")[0]


def _checked(loc: validation.Loc, judge) -> list[tuple[validation.Loc, str]]:
    try:
        judge()
    except InputError as e:
        return [(loc, line) for line in getattr(e, "lines", [str(e)])]
    return []


def _tasks_path(value: str | list[str], path: Path) -> tuple[Path, ...]:
    """The ``tasks_path`` folders, relative to the campaign file, added to the task search.

    A job process reads the file again, so its runs find the same tasks (a missing folder or an id
    taken twice: TaskError).
    """
    given = [value] if isinstance(value, str) else value
    folders = tuple((path.parent / Path(p).expanduser()).resolve() for p in given)
    packs.add_search_path(folders, f"{path}: tasks_path")
    return folders


def _tasks(value: str | list[str]) -> tuple[str, ...]:
    if value == "all":
        return tuple(t.id for t in all_tasks())
    ids = [get_task(t.strip()).id for t in value]
    if len(set(ids)) != len(ids):
        raise InputError(f"a task is listed twice: {', '.join(ids)}")
    return tuple(ids)


def _agents(tables: list[dict], where: str) -> tuple[tuple[AgentEntry, ...], list[tuple[validation.Loc, str]]]:
    """The ``[[agents]]`` tables, each judged whatever the others held.

    Each by its model and by its adapter.
    """
    out: list[AgentEntry] = []
    found: list[tuple[validation.Loc, str]] = []
    for i, raw in enumerate(tables):
        at = f"{where}: agents[{i}]"
        try:
            table = AgentTable.model_validate(raw, context={validation.FORM: "file"})
        except ValidationError as e:
            said = validation.located(e, lambda loc, i=i: name_of(where)(("agents", i, *loc)), AgentTable)
            found += [(("agents", i, *loc), line) for loc, line in said]
            continue
        options = dict(table.options) | ({"command": table.agent_command} if table.agent_command is not None else {})
        entry = AgentEntry(table.name, table.model, options)
        try:
            if any((a.name, a.model) == (entry.name, entry.model) for a in out):
                raise InputError(f"{entry.label} is listed twice; each (agent, model) once per campaign")
            preflight.check_agent(entry.name, options, entry.model)
        except (InputError, AgentError) as e:
            found.append((("agents",), f"{at}: {e}"))
            continue
        out.append(entry)
    return tuple(out), found
