"""Launch (pipeline step 2; paper §3.3 step 2).

Start the agent in its workspace with the standard prompt.

The agent gets its own session (so its whole tree can be ended), a run token in its environment (so
processes that leave the session are still found, :mod:`bench.processes`), the script tracer on its
``PYTHONPATH`` and, of the harness's environment, only an allow-list and the variables its adapter
declares (:mod:`bench.sandbox.environment`). Where its LLM requests go through the metering gateway,
every credential value among those is replaced by a per-run token that only the gateway can turn
back into the key (:mod:`bench.gateway.key_swap`): the real key never enters the sandbox. By default
it runs in a sandbox (:mod:`bench.sandbox`): the workspace and its private home are the only places
it can write, the harness's places are hidden, the network reaches only the adapter's endpoints, and
nothing it starts outlives the sandbox. From the first byte its output goes to ``agent.log`` and,
through the adapter's stream parser, to ``events.jsonl`` and the status line; an independent monitor
counts the scripts its process tree runs, and another notes when each checkpoint appears.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from bench import protocol
from bench.agents import Agent, AgentError, LaunchContext
from bench.agents.prompt import standard_prompt
from bench.agents.stream import AgentStream
from bench.evidence import Evidence
from bench.gateway import key_swap
from bench.gateway.metering import plan as metering_plan
from bench.gateway.proxy import Gateway
from bench.gateway.request_log import LOG_NAME
from bench.pipeline.arrivals import Arrivals
from bench.pipeline.codetime import Snapshots
from bench.pipeline.launch_monitor import LaunchMonitor
from bench.pipeline.workspace import Workspace
from bench.processes import become_subreaper
from bench.progress import StatusLine
from bench.runspec import RunSpec
from bench.sandbox import Policy, Sandbox, agent_environment, default_hidden, default_readable
from bench.sandbox.resource_limits import Limits, RunGroup
from bench.tracking import HOOK_DIR

# never inherited by an agent: a run id would make MLflow resume the parent; the tracer's own
# variables
HARNESS_ONLY = ("MLFLOW_RUN_ID", *protocol.TRACER_ONLY)


@dataclass
class LaunchedAgent:
    """The running agent and the threads that watch its output and its process tree."""

    proc: subprocess.Popen
    argv: list[str]
    token: str  # BENCH_RUN_TOKEN: marks every process of this run
    started_at: float  # time.time() at the launch; checkpoint times and the budget count from here
    stream: AgentStream
    monitor: LaunchMonitor
    arrivals: Arrivals  # each file of checkpoints/: when it was first seen, when its current content was
    status: StatusLine
    sandbox: Sandbox | None = None  # None: run unsandboxed; closed by watch.watch once the run's processes ended
    evidence: Evidence | None = None  # what the harness observes for the audit (run_dir/evidence)
    endpoints: tuple[str, ...] = ()  # the URLs its sandbox may reach (none: an offline agent)
    limits: RunGroup | None = None  # its memory and process limits (a cgroup or rlimits); removed by watch.watch
    gateway: Gateway | None = None  # the metering gateway its LLM requests go through (bench.gateway.proxy)

    @property
    def sandboxed(self) -> bool:
        """Whether the agent runs in the sandbox."""
        return self.sandbox is not None


def agent_env(
    ws: Workspace,
    token: str,
    extra: dict[str, str],
    budget_s: float,
    started_at: float,
    passthrough: Iterable[str] = (),
    seed: int | None = None,
) -> dict[str, str]:
    """The agent's environment.

    The allow-list of the harness's variables plus the adapter's ``passthrough`` names, the
    adapter's ``extra``, the tracer on PYTHONPATH, this Python first on PATH; no MLflow variable.
    ``seed``: the run's recorded seed, which the tasks' train.py train with
    (``task_helpers.run_seed``).
    """
    env = agent_environment(os.environ, passthrough, {k: v for k, v in extra.items() if k not in HARNESS_ONLY})
    env.update(
        {
            protocol.WORKSPACE_VAR: str(ws.path),
            protocol.SPOOL_DIR_VAR: str(ws.spool_dir),
            protocol.RUN_TOKEN_VAR: token,
            protocol.BUDGET_VAR: str(budget_s),
            protocol.STARTED_AT_VAR: str(started_at),
            "PYTHONPATH": os.pathsep.join(p for p in (str(HOOK_DIR), env.get("PYTHONPATH", "")) if p),
            "PATH": os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", ""))),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.pop(protocol.SEED_VAR, None)  # never the harness's own environment's: only the run's recorded one
    if seed is not None:
        env[protocol.SEED_VAR] = str(seed)
    return env


def launch(agent: Agent, ws: Workspace, spec: RunSpec, evidence: Evidence | None = None) -> LaunchedAgent:
    """Start ``agent`` in ``ws`` as the run's description says; returns at once, the agent runs on.

    Budget, device, model, options, sandbox, limits, API budget: :class:`bench.runspec.RunSpec`, as
    launched.

    ``spec.sandbox``: run it in a bubblewrap sandbox (raises
    :class:`~bench.sandbox.SandboxUnavailable` when none can be built here); paths are the same
    inside and out, so nothing downstream changes. ``evidence``: where the harness keeps what it
    observes for the audit (requests through the sandbox's proxy, command lines, checkpoint arrivals
    with the locked files' state); the run directory's ``evidence/`` by default. ``spec.max_cost``:
    the run's API budget in USD, enforced by the metering gateway (:mod:`bench.gateway.metering`),
    which a sandboxed CLI agent's LLM requests go through; its log is ``evidence/llm.jsonl``.
    """
    budget_s, device, label, model, options = spec.budget, spec.device or "cpu", spec.label, spec.model, spec.options
    console, sandbox, limits, max_cost = spec.console, spec.sandbox, spec.limits, spec.max_cost
    evidence = evidence or Evidence(ws.run_dir)
    ctx = LaunchContext(
        task=ws.task,
        workspace=ws.path,
        prompt=standard_prompt(budget_s, device),
        budget_s=budget_s,
        home=ws.run_dir / "home",
        model=model,
        options=dict(options or {}),
        seed=spec.seed,
    )
    endpoints = agent.endpoints(ctx)
    evidence.dir.mkdir(parents=True, exist_ok=True)
    # the CLI's LLM requests through the metering gateway (its base URL pointed there; no direct
    # route to the API)
    meter = metering_plan(agent, ctx, endpoints, evidence.path(LOG_NAME), max_cost) if sandbox else None
    ctx = meter.ctx if meter else ctx
    argv = agent.command(ctx)
    ctx.home.mkdir(parents=True, exist_ok=True)
    extra = {"HOME": str(ctx.home), **agent.env(ctx)}  # a private HOME for every agent, not only the CLIs
    writable = (ctx.home, *_declared(agent.writable(ctx)))
    limits = limits or Limits()
    group = RunGroup(limits)  # a cgroup when this machine lets the harness make one, else rlimits (limits.py)
    pythonpath = extra.get("PYTHONPATH", "")  # the toolkit's own agent names the repository: its packages are bound
    reach, services = ((), meter.services) if meter else (endpoints, None)
    logins = agent.login_files(ctx)  # read-only, this run only
    key_swap.register_logins([source for source, _ in logins])  # the record is kept free of them (bench.redact)
    box = _sandbox(ws, writable, reach, evidence, group, pythonpath, services, logins) if sandbox else None
    token = uuid.uuid4().hex
    become_subreaper()
    status = StatusLine(label, enabled=console)
    locked = ws.task.locked_files if ws.task is not None else ()  # (a bare workspace, as tests build, has none)
    code = Snapshots(ws.path, evidence.dir, locked)  # the scripts as they are at each new checkpoint content
    arrivals = Arrivals(ws.checkpoints, on_new=lambda p, a: evidence.note_arrival(ws.path, p, a, locked), code=code)
    arrivals.start()
    started = time.time()
    env = agent_env(ws, token, extra, budget_s, started, agent.passthrough(ctx), seed=spec.seed)
    if meter:  # the gateway holds the key: the agent gets a per-run token in its place (bench.gateway.key_swap)
        env, meter.gateway.keys = key_swap.run_tokens(env)
        argv = key_swap.tokenized(argv, meter.gateway.keys)  # a generic agent's {env:KEY} in its command line
    try:
        proc = subprocess.Popen(
            box.wrap(argv) if box else argv,
            cwd=ws.path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the watchdog signals the group; inside, --unshare-pid ends the rest
            preexec_fn=None if box else group.preexec,  # sandboxed: the sandbox's first shell and launcher
        )
    except BaseException:
        group.remove()
        arrivals.stop()
        if box:
            box.close()
        raise
    gw = meter.gateway if meter else None
    stream = AgentStream(proc, ws.log, ws.events, status, console, agent.parser_name(ctx), model, limits, gw).start()
    monitor = LaunchMonitor(proc.pid, token, ws.path, evidence=evidence).start()
    return LaunchedAgent(
        proc, argv, token, started, stream, monitor, arrivals, status, box, evidence, endpoints, group, gw
    )


def _declared(writable: tuple[Path, ...]) -> tuple[Path, ...]:
    """The folders an adapter asks to write, refused when one is or holds a harness place.

    A harness place: the repository, the tracking store, the cache, another workspace, /tmp; binding
    it read-write would undo the sandbox there.
    """
    hidden = default_hidden()
    for folder in writable:
        folder = Path(os.path.realpath(folder))
        opened = [h for h in hidden if h == folder or folder in h.parents]
        if opened:
            raise AgentError(
                f"the agent would write {folder}, which is or holds the harness's {opened[0]}: "
                "give it a folder of its own (for the optuna agent, a storage file in a dedicated folder)"
            )
    return writable


def _sandbox(
    ws: Workspace,
    writable: tuple[Path, ...],
    endpoints: tuple[str, ...],
    evidence: Evidence,
    limits: RunGroup,
    pythonpath: str = "",
    services: dict | None = None,
    logins: tuple[tuple[Path, Path], ...] = (),
) -> Sandbox:
    """The agent's sandbox.

    It writes its workspace, its private home and what its adapter declares (``writable``), reads
    only the allow-list (the system, Python, the tracer, its CLI: bench.sandbox.view; of the
    repository only the toolkit's packages, and those only when its ``pythonpath`` names the
    repository), sees none of the harness's places, and reaches only its ``endpoints``; every
    request through its proxy is noted in the evidence. ``logins``: the CLI's login files (source,
    place in the private home), bound read-only.
    """
    evidence.dir.mkdir(parents=True, exist_ok=True)
    policy = Policy(
        cwd=ws.path,
        writable=(ws.path, *writable),
        readable=default_readable("agent", pythonpath),
        hidden=default_hidden(),
        endpoints=endpoints,
        network_log=evidence.path("network.jsonl"),
        files=logins,
    )
    return Sandbox(policy, limits=limits, services=services)
