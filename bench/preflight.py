"""What is checked before a run creates anything.

A run creates, in this order, the prepared data in the cache, the workspace, the MLflow experiment
and run, and only then starts the agent. Bad input found later leaves a half-made run behind (a
workspace, a run left RUNNING in the store) or fails after the agent has spent its budget (a zero
budget divides by zero in the record step). So everything that can be known from the arguments and
the machine is checked here first, and each problem is one sentence that says what to do. Nothing in
this module creates a file or a folder.

``bench run`` checks every task before the first run (:func:`check_run`); :func:`bench.runner.run`
checks its spec again for programmatic callers. The values of a run's description are judged by its
model (:class:`bench.runspec.RunSpec`, wherever it is built or read); this module judges the machine
and the arguments around it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from bench import paths, settings
from bench.agents import AgentError, get_agent
from bench.errors import InputError, Problems
from bench.runspec import RunSpec
from bench.tasks import Task, weights


def refusals() -> tuple[type[Exception], ...]:
    """The errors a check raises for a problem of the user's (said in one line, exit 2).

    Imported when asked: the sandbox's module is not needed by every caller of this one.
    """
    from bench.sandbox.bwrap import SandboxUnavailable
    from bench.tasks import TaskError

    return (InputError, AgentError, TaskError, SandboxUnavailable)


class Collect:
    """Runs checks one after another and keeps each one's problem instead of stopping at the first.

    ``raise_any`` raises them all as one :class:`Problems`. ``with problems.check():`` around a
    check; ``add`` for a line.
    """

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.errors: list[Exception] = []  # what the checks raised, so that a lone one keeps its type

    def add(self, line: str) -> None:
        """A problem said by hand, one line."""
        self.lines.append(line)

    @contextmanager
    def check(self, prefix: str = "") -> Iterator[None]:
        """Around a check: a problem it raises is kept (each line after ``prefix``), not raised."""
        try:
            yield
        except refusals() as e:
            self.errors.append(e)
            for line in e.lines if isinstance(e, Problems) else [str(e)]:
                self.add(prefix + line)

    def raise_any(self) -> None:
        """One problem raised by one check is raised as it was; several as one :class:`Problems`.

        A ``SandboxUnavailable`` stays one for a caller that tells them apart; lines added by hand
        are a :class:`Problems` too.
        """
        if len(self.lines) == 1 and len(self.errors) == 1 and str(self.errors[0]) == self.lines[0]:
            raise self.errors[0]
        if self.lines:
            raise Problems(self.lines)


def check_repeats(repeats: int = 1) -> None:
    """A repeat count of 0 runs nothing (``bench run --repeats``).

    A run's own repeat is its model's to judge.
    """
    if repeats < 1:
        raise InputError(f"--repeats must be at least 1 (got {repeats})")


def check_device(device: str | None) -> None:
    """A GPU asked for (``--device cuda``) must be here.

    It would only fail in the evaluation, after the agent's whole budget. Which devices the
    evaluation takes is the model's rule.
    """
    if device == "cuda":
        from bench import protocol

        if protocol.default_device() != "cuda":  # torch.cuda.is_available(), read without importing torch
            raise InputError("--device cuda: no CUDA device is available here; use --device cpu (or leave it out)")


def check_folder(path: Path, what: str, variable: str) -> None:
    """``path`` is a folder this process can create or write.

    The nearest existing ancestor is a writable folder. Only looked at, never created.
    """
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(f"the {what} {path} cannot be created ({existing} is a file): set {variable} to a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"the {what} {path} is not writable ({existing}): set {variable} to a writable folder")


def check_places() -> None:
    """The folders a run writes: the data cache, the workspaces and the embedded MLflow store.

    First, every ``BENCH_*`` setting the environment gives (bench.settings), checked once before
    anything is made.
    """
    if errors := settings.check():  # a folder's check would read a bad setting: said first, each on its line
        raise Problems(errors)
    problems = Collect()
    for folder, what, variable in (
        (paths.cache_dir, "cache folder", "BENCH_CACHE_DIR"),
        (paths.workspaces_dir, "workspaces folder", "BENCH_WORKSPACES_DIR"),
        (paths.mlruns_dir, "tracking store folder", "BENCH_MLRUNS_DIR"),
    ):
        if variable == "BENCH_MLRUNS_DIR" and os.environ.get("MLFLOW_TRACKING_URI"):
            continue  # a server or a database elsewhere is checked when first used
        with problems.check():
            check_folder(folder(), what, variable)
    problems.raise_any()


def check_agent(agent: str, options: dict[str, str], model: str | None) -> None:
    """An unknown agent, an option it does not know, or options it cannot run with.

    AgentError, exit 2.
    """
    get_agent(agent).validate(options, model)


def check_api(agents: Iterable[tuple[str, str | None]], *, endpoints: bool = True) -> None:
    """Each LLM agent's credential, then the endpoint, key and model of each agent.

    The endpoints are asked with ``endpoints``, unless ``BENCH_API_CHECK=0`` (of an agent without a
    key: whether its endpoint answers), of all agents at once in parallel
    (:mod:`bench.agents.credentials`, :mod:`bench.agents.api_probe`): :class:`Problems` naming every
    agent not ready and what to set, all at once. Offline and generic agents have nothing to check.
    """
    from bench.agents import api_probe as api
    from bench.agents import credentials

    needs = [n for agent, model in agents if (n := credentials.need_of(agent, model)) is not None]
    asked = endpoints and api.enabled()
    found = api.probe_all(needs) if asked else [None] * len(needs)  # a missing key is said without asking
    lines = [line for need, seen in zip(needs, found, strict=True) for line in api.problems(need, seen)]
    if lines:
        raise Problems(lines)


def check_unsandboxed_login(agent: str, model: str | None) -> None:
    """A login stored in a file cannot reach an unsandboxed run's CLI.

    A login file (Codex's auth.json, Gemini's oauth_creds.json) reaches a CLI only as a read-only
    bind into the sandbox's private home; an unsandboxed run has no such bind, so its CLI would
    start without it and fail at its first request. Said before anything is created, with what to
    do.
    """
    from bench.agents import credentials

    need = credentials.need_of(agent, model)
    found = need.credential if need is not None else None
    if found is not None and found.file is not None:
        raise InputError(
            f"{agent}: an unsandboxed run cannot use the login in {found.file} (a login file is given only to the "
            f"sandbox): set {need.hint.split(' (')[0]}, or run without --unsandboxed"
        )


def check_priced(agent: str, model: str | None, max_cost: float | None) -> None:
    """With an API budget, the run's model must have a price (bench/agents/pricing.py).

    The metering gateway refuses every request for a model it cannot price while a budget is set
    (its cost could not count against it), so such a run could only fail. Said before anything is
    created. An agent without an API, or a model the table cannot be asked about (a Claude alias the
    CLI resolves), is not checked. A user's price file ($BENCH_PRICES) that cannot be read is said
    here, budget or not: the gateway prices every request with it.
    """
    from bench.agents import credentials, pricing

    pricing.user_rows()  # raises PriceFileError (an AgentError) naming the file and the row
    if max_cost is None:
        return

    need = credentials.need_of(agent, model)
    name = model or (need.model if need is not None else None)
    if need is None or name is None or name.split("[", 1)[0] in credentials.CLAUDE_ALIASES:
        return
    if pricing.lookup(name) is None:
        raise InputError(
            f"{agent}: model {name!r} has no price in the price table (bench prices), and --max-cost is set: the "
            "gateway refuses unpriced models under a budget (their cost could not be counted); add its row to a file "
            "named by BENCH_PRICES, or drop --max-cost"
        )


def check_weights(tasks: Iterable[Task], no_weights: bool) -> None:
    """A task that provides pretrained weights needs them installed (or ``--no-weights``)."""
    if no_weights:
        return
    lines = []
    for task in tasks:
        try:
            weights.for_task(task)
        except weights.WeightsError as e:
            lines.append(str(e))
    if lines:
        raise Problems(lines)


def check_sandbox(sandbox: bool) -> None:
    """SandboxUnavailable (why, what to do, or --unsandboxed) before anything is created."""
    if sandbox:
        from bench.sandbox import bwrap

        bwrap.require()


def run_problems(tasks: list[Task], spec: RunSpec, *, endpoints: bool = True, sandbox: bool | None = None) -> list[str]:
    """Every problem of the machine's side of a run's description, one line each.

    Its values are judged by its model. The checks: the agent and its options, its credential, its
    model's price under an API budget, the folders, the weights, the sandbox, then its endpoint.
    Every check runs whatever the others found, so one try shows them all. Creates nothing.
    ``endpoints``: ask the agent's model endpoint too (a request with a short timeout; a campaign
    asks all its agents at once, :func:`check_api`). ``sandbox``: check for this instead of the
    spec's (a Slurm login node need not have what the compute nodes have).
    """
    return _run_checks(tasks, spec, endpoints=endpoints, sandbox=sandbox).lines


def _run_checks(tasks: list[Task], spec: RunSpec, *, endpoints: bool, sandbox: bool | None) -> Collect:
    sandboxed = spec.sandbox if sandbox is None else sandbox
    problems = Collect()
    with problems.check():
        check_agent(spec.agent, dict(spec.options or {}), spec.model)
    with problems.check():  # the credential, then (endpoints) what its endpoint answers
        check_api([(spec.agent, spec.model)], endpoints=endpoints)
    with problems.check():
        check_priced(spec.agent, spec.model, spec.max_cost)
    with problems.check():
        check_device(spec.device)
    if not sandboxed:
        with problems.check():
            check_unsandboxed_login(spec.agent, spec.model)
    for check in (check_places, lambda: check_weights(tasks, spec.no_weights), lambda: check_sandbox(sandboxed)):
        with problems.check():
            check()
    return problems


def check_run(tasks: list[Task], spec: RunSpec, *, endpoints: bool = True, sandbox: bool | None = None) -> None:
    """:func:`run_problems`, raised as one :class:`Problems` when there is any.

    An InputError: ``bench`` exits 2.
    """
    _run_checks(tasks, spec, endpoints=endpoints, sandbox=sandbox).raise_any()


__all__ = ["AgentError", "Collect", "InputError", "Problems", "check_api", "check_run", "run_problems"]
