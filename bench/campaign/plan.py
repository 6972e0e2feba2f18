"""``bench campaign plan FILE``: what a campaign will cost before it starts.

Its runs (per agent and task), the GPU-hours, the wall-clock on one GPU and on more, and the API
cost expected from published token use.

A campaign of the paper's size holds a GPU for weeks and an API account for thousands of model
calls; the time to see that is before the first run, on any machine (a laptop, a login node): the
plan reads the file only (:func:`bench.campaign.spec.load`), creates nothing (no run directory, no
MLflow experiment) and asks no API, so it needs neither a GPU nor a key.

GPU-hour figures, since an agent may stop early and the harness holds the GPU beyond the agent's
budget:

- **budgets**: the sum of every run's budget, the paper's measure of its study (Table 2's budgets x
  repeats);
- **agent time as published**: where the paper publishes an agent's mean use of its budget (Table 8:
  Codex with gpt-5.5 ended its runs at half of it), that agent's runs at that use, the others at
  their budget;
- **expected**: each run's budget + the grace + the overhead around the agent's time (setup,
  evaluation, record) that ``bench campaign status``'s ETA assumes before it has measured one
  (:class:`bench.campaign.view.Estimate`);
- **at most**: each run's budget + the grace + the whole evaluation margin (the evaluation budget,
  the scorer's grace to report and the time to record: :attr:`Campaign.eval_margin_s`, what a Slurm
  job is given).

API cost, a range (low-high) per agent: each run's minutes of agent time (its budget, or its
published use where the paper gives one) x the agent's tokens per minute
(:mod:`bench.campaign.token_rates`: published figures, each with its source, low and high) x the
price table (:mod:`bench.agents.pricing`, generated from LiteLLM's cost map). A pilot's measured
token use (``--measured PILOT``, :func:`measured_use`) or a published one (:data:`PUBLISHED_USE`)
replaces the per-minute figures where it has one. Only a model without a price is "unknown". A
campaign's ``max_cost`` (the metering gateway's API budget per run) gives an upper bound either way.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench.agents import AGENTS, pricing
from bench.campaign import token_rates
from bench.campaign.spec import AgentEntry, Campaign

HOUR = 3600.0


@dataclass(frozen=True)
class TokenUse:
    """One run's mean token use as published.

    ``input`` counts every prompt token, ``cached`` the part of it read from the provider's cache:
    :func:`bench.agents.pricing.cost`'s semantics.
    """

    input: int
    output: int
    cached: int = 0
    source: str = ""  # where it was published


# model (as bench.agents.pricing.lookup reads it) -> published token use per run. The paper (arXiv
# 2605.17046v2) publishes none for its seven agents: neither token counts nor costs (checked: its
# text and Tables 2-8).
PUBLISHED_USE: dict[str, TokenUse] = {}

# (agent, model's price-table id) -> task -> (budget, mean minutes used) as published: the paper's
# Table 8, Codex with gpt-5.5 ending its runs early (50 % of the budget on average); the other six
# "typically exhausted their budget" (§5)
PUBLISHED_MINUTES: dict[tuple[str, str], dict[str, tuple[float, float]]] = {
    ("codex", "gpt-5.5"): {
        "t1": (40, 24.93), "t2": (120, 75.06), "t3": (80, 27.23), "t4": (60, 30.60), "t5": (40, 17.43),
        "t6": (40, 15.39), "t7": (40, 23.64),
    },
}  # fmt: skip


@dataclass(frozen=True)
class GpuHours:
    """A campaign's GPU-hours of agent time: at the whole budgets, as expected, and at most."""

    budgets: float
    expected: float
    at_most: float


def budgets(campaign: Campaign) -> dict[str, float]:
    """Each task's budget in seconds.

    Asked once per plan, since finding a task searches the task packs.
    """
    return {t: campaign.budget_of(t) for t in campaign.task_ids}


def overhead_s() -> float:
    """The overhead per run that ``bench campaign status``'s ETA assumes before measuring one."""
    from bench.campaign.view import DEFAULT_OVERHEAD_S  # the executors' module: only when a plan is made

    return DEFAULT_OVERHEAD_S


def run_seconds(campaign: Campaign, budget: dict[str, float] | None = None) -> list[tuple[float, float, float]]:
    """(budget, expected, at most) seconds of GPU time of each run, in the campaign's order."""
    of = budget or budgets(campaign)
    extra = campaign.spec.grace_s + overhead_s()
    worst = campaign.spec.grace_s + campaign.eval_margin_s
    return [(of[k.task], of[k.task] + extra, of[k.task] + worst) for k in campaign.runs()]


def gpu_hours(campaign: Campaign, budget: dict[str, float] | None = None) -> GpuHours:
    """The budgets, expected and at-most GPU-hours of the module docstring (one GPU per run)."""
    times = run_seconds(campaign, budget)
    return GpuHours(*(sum(t[i] for t in times) / HOUR for i in range(3)))


def as_published(
    campaign: Campaign, budget: dict[str, float] | None = None
) -> tuple[float, tuple[AgentEntry, ...]] | None:
    """GPU-hours of agent time with each run at its published mean use, and the agents that had one.

    A run's published mean use counts where the paper gives one at the same budget, its budget
    elsewhere. None when no agent of the campaign has one.
    """
    of, seconds, which = budget or budgets(campaign), 0.0, []
    for key in campaign.runs():
        table = PUBLISHED_MINUTES.get((key.agent.name, _canonical(model_of(key.agent))), {})
        given, used = table.get(key.task, (None, None))
        if used is not None and given * 60 == of[key.task]:
            seconds += used * 60
            which += [key.agent] if key.agent not in which else []
        else:
            seconds += of[key.task]
    return (seconds / HOUR, tuple(which)) if which else None


def agent_minutes(campaign: Campaign, budget: dict[str, float] | None = None) -> dict[AgentEntry, float]:
    """Each agent entry's minutes of agent time over its runs.

    A run's published mean use where the paper gives one at the same budget (Table 8), else its
    whole budget (the paper: the others typically exhausted it).
    """
    of, out = budget or budgets(campaign), Counter()
    for key in campaign.runs():
        table = PUBLISHED_MINUTES.get((key.agent.name, _canonical(model_of(key.agent))), {})
        given, used = table.get(key.task, (0, None))
        out[key.agent] += used if used is not None and given * 60 == of[key.task] else of[key.task] / 60
    return dict(out)


def wall_clock_s(durations: list[float], slots: int) -> float:
    """When the last run ends if the runs start in this order, each on the first slot free.

    What the local executor does: one run per GPU, the queue in the campaign's order.
    """
    free = [0.0] * max(1, min(slots, len(durations)))
    for d in durations:
        heapq.heapreplace(free, free[0] + d)
    return max(free)


def enough_slots(durations: list[float]) -> int:
    """The fewest slots that bring the wall-clock down to its floor, the longest run.

    More do not shorten it.
    """
    floor = max(durations)
    lo, hi = 1, len(durations)
    while lo < hi:  # the greedy order's wall-clock is not monotone in slots everywhere: check the answer below
        mid = (lo + hi) // 2
        if wall_clock_s(durations, mid) <= floor + 1e-6:
            hi = mid
        else:
            lo = mid + 1
    while lo > 1 and wall_clock_s(durations, lo - 1) <= floor + 1e-6:
        lo -= 1
    return lo


def model_of(agent: AgentEntry) -> str | None:
    """The model an agent entry runs.

    Its own, else its adapter's default (None for an agent without one).
    """
    if agent.model:
        return agent.model
    return AGENTS[agent.name].default_model


def offline(agent: AgentEntry) -> bool:
    """An agent that calls no model API (:attr:`bench.agents.base.Agent.offline`).

    No key, no cost.
    """
    return AGENTS[agent.name].offline


def measured_use(runs: list[dict], campaign: Campaign, experiment: str) -> dict[str, TokenUse]:
    """Token use per run of each model, from a pilot's recorded agent runs, scaled to this campaign.

    The runs are ``analysis.runs.agent_runs`` rows (model, budget_min, tokens_input/output/cached);
    the use per run is the tokens per budget-minute of the pilot's runs x the campaign's mean budget
    per run. A pilot at a short budget (``--budget 5m``) then prices the real campaign, assuming its
    agents spend at the same pace; runs without tokens (no gateway, offline) are left out.
    """
    keys = campaign.runs()
    minutes = sum(campaign.budget_of(k.task) for k in keys) / len(keys) / 60 if keys else 0.0
    sums: dict[str, list[float]] = {}
    for r in runs:
        tin, tout, budget = r.get("tokens_input"), r.get("tokens_output"), r.get("budget_min")
        if not r.get("model") or not all(isinstance(v, int | float) and math.isfinite(v) for v in (tin, tout, budget)):
            continue
        cached = r.get("tokens_cached")
        cached = cached if isinstance(cached, int | float) and math.isfinite(cached) else 0.0
        acc = sums.setdefault(_canonical(str(r["model"])), [0.0, 0.0, 0.0, 0.0, 0])
        for k, v in enumerate((tin, tout, cached, budget, 1)):
            acc[k] += v
    out = {}
    for model, (tin, tout, cached, budget, n) in sums.items():
        if budget <= 0:
            continue
        scale = minutes / budget
        source = f"measured: {n} run(s) of {experiment}, {tin / budget / 1e3:,.0f}k tokens in per budget-minute"
        out[model] = TokenUse(round(tin * scale), round(tout * scale), round(cached * scale), source)
    return out


@dataclass(frozen=True)
class Cost:
    """The expected API cost of one agent's runs: ``usd`` (low) to ``high``, None when unknown.

    ``why`` says how.
    """

    agent: AgentEntry
    runs: int
    usd: float | None
    why: str
    high: float | None = None  # None: a single figure (usd)

    @property
    def shown(self) -> str:
        """The cost in a line: "$12.00" or "$12.00-$34.00" ("unknown" without a figure)."""
        if self.usd is None:
            return "unknown"
        return f"${self.usd:,.2f}" + (f"-${self.high:,.2f}" if self.high is not None else "")


def agent_cost(
    agent: AgentEntry,
    runs: int,
    published: dict[str, TokenUse] | None = None,
    missing: str = "the paper publishes",
    minutes: float | None = None,
) -> Cost:
    """The expected cost of ``runs`` runs of ``agent``.

    From ``published`` token use per run (:data:`PUBLISHED_USE`, or a pilot's, :func:`measured_use`)
    where it has the model, else a range from ``minutes`` of agent time over those runs x the
    agent's tokens per minute (:mod:`bench.campaign.token_rates`); ``missing`` says who has no
    figure ("the paper publishes", "the pilot X has"). Unknown only for a model without a price.
    """
    published = PUBLISHED_USE if published is None else published
    if offline(agent):
        return Cost(agent, runs, 0.0, "an offline agent, no model API")
    model = model_of(agent)
    found = pricing.lookup(model)
    shown = (model or agent.name).rsplit("/", 1)[-1]  # the model as the paper names it: no provider prefix
    if found is None:
        return Cost(agent, runs, None, f"unknown: {shown} has no price (bench/agents/prices.toml, $BENCH_PRICES)")
    key, row = found
    price = f"{key}'s price" + ("" if row.origin.startswith("LiteLLM") else f" ({row.origin})")
    use = next((u for m, u in published.items() if _canonical(m) == _canonical(model)), None)
    if use is not None:
        per_run = pricing.cost(model, use.input, use.output, use.cached) or 0.0
        why = (
            f"{runs} x ${per_run:,.2f}: {use.input / 1e6:.2f}M tokens in ({use.cached / 1e6:.2f}M cached), "
            f"{use.output / 1e6:.2f}M out per run ({use.source}) at {price}"
        )
        return Cost(agent, runs, per_run * runs, why)
    rate = token_rates.rate_of(agent.name)
    low, high = token_rates.cost_range(model, rate, minutes or 0.0) or (0.0, 0.0)
    lead = f"{missing} no token use for {shown}: " if published else ""
    why = f"{lead}{minutes or 0:,.0f} min at {rate.agent}'s tokens per minute, {price}"
    return Cost(agent, runs, low, why, high)


def _published_line(campaign: Campaign, budget: dict[str, float]) -> list[str]:
    """The agent time as the paper's agents used it, where it publishes their use (Table 8)."""
    found = as_published(campaign, budget)
    if found is None:
        return []
    hours, which = found
    names = ", ".join(a.label for a in which)
    return [
        f"  {hours:8.1f}  agent time as published: {names} at its mean use per task (the paper's Table 8),",
        f"{'':12}the others at their whole budget (the paper: they typically exhausted it)",
    ]


def _sources(costs: list[Cost]) -> list[str]:
    """Where the per-minute figures and the prices came from, said once under the costs."""
    used = sorted({token_rates.rate_of(c.agent.name).agent for c in costs if c.high is not None})
    if not used:
        return []
    lines = ["  tokens per minute (bench/campaign/token_rates.toml; a pilot's use replaces them: --measured PILOT):"]
    for name in used:
        rate = token_rates.rates()[name]
        lines += [f"    {name}: {token_rates.describe(rate)}", f"      source: {rate.source}"]
    source = pricing.SOURCE
    lines.append(
        f"  prices: bench/agents/prices.toml, from LiteLLM {source['version']}'s model cost map of {source['date']}"
        " ($BENCH_PRICES overrides)"
    )
    return lines


def _shown(campaign: Campaign) -> str:
    """The file as the user named it from here (a path below the working folder), else in full."""
    try:
        return str(campaign.file.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(campaign.file)


def _canonical(model: str | None) -> str:
    """A model's price-table id (provider prefixes and spellings folded), else its name as given."""
    found = pricing.lookup(model)
    return found[0] if found else (model or "")


def _hours(seconds: float) -> str:
    hours = seconds / HOUR
    return f"{hours:.1f} h" + (f" ({hours / 24:.1f} days)" if hours >= 48 else "")


def _slots(campaign: Campaign) -> tuple[int, str] | None:
    """The slots the file names: its GPUs (local) or the array parallelism (Slurm).

    None when it names none.
    """
    if campaign.executor == "slurm":
        n = campaign.slurm.array_parallelism
        return n, f"slurm.array_parallelism = {n} (per job array; one array per budget)"
    if campaign.gpus:
        return len(campaign.gpus), f"gpus = [{', '.join(campaign.gpus)}]"
    return None


def matrix(campaign: Campaign, budget: dict[str, float] | None = None) -> str:
    """Runs per agent and task, with each task's budget and each agent's GPU-hours at them."""
    keys, of = campaign.runs(), budget or budgets(campaign)
    cells = Counter((k.agent, k.task) for k in keys)
    labels = [a.label for a in campaign.agents]
    w = max(len("budget (min)"), *(len(x) for x in labels))
    tw = max(4, *(len(t) for t in campaign.task_ids))
    head = f"{'':{w}}  " + " ".join(f"{t:>{tw}}" for t in campaign.task_ids) + f"  {'runs':>5}  {'GPU-h':>7}"
    minutes = f"{'budget (min)':{w}}  " + " ".join(f"{of[t] / 60:>{tw}g}" for t in campaign.task_ids)
    rows = [head, minutes]
    for agent, label in zip(campaign.agents, labels, strict=True):
        n = [cells[(agent, t)] for t in campaign.task_ids]
        hours = sum(c * of[t] for c, t in zip(n, campaign.task_ids, strict=True)) / HOUR
        rows.append(f"{label:{w}}  " + " ".join(f"{c:>{tw}}" for c in n) + f"  {sum(n):>5}  {hours:>7.1f}")
    per_task = [sum(cells[(a, t)] for a in campaign.agents) for t in campaign.task_ids]
    total_h = sum(of[k.task] for k in keys) / HOUR
    rows.append(f"{'total':{w}}  " + " ".join(f"{c:>{tw}}" for c in per_task) + f"  {len(keys):>5}  {total_h:>7.1f}")
    return "\n".join(rows)


def render(campaign: Campaign, published: dict[str, TokenUse] | None = None, measured: str | None = None) -> str:
    """The plan as ``bench campaign plan`` prints it.

    ``measured``: the pilot experiment ``published`` comes from.
    """
    keys, budget = campaign.runs(), budgets(campaign)
    n_agents, n_tasks = len(campaign.agents), len(campaign.task_ids)
    lines = [
        f"campaign {campaign.name} ({_shown(campaign)}): {len(keys)} runs = {n_agents} agent(s) x {n_tasks} task(s) x "
        f"{campaign.repeats} repeat(s)",
        "a plan only: nothing started, nothing created",
        "budget: " + ("each task's own (the paper's)" if campaign.spec.budget_s is None else
                      f"{campaign.spec.budget_s / 60:g} min for every task (non-standard where a task's own differs)"),
        "",
        matrix(campaign, budget),
        "",
    ]  # fmt: skip
    h = gpu_hours(campaign, budget)
    margin = campaign.eval_margin_s
    lines += [
        "GPU-hours (one GPU per run):",
        f"  {h.budgets:8.1f}  at the budgets (each run's budget x its repeats: the paper's measure)",
        *_published_line(campaign, budget),
        f"  {h.expected:8.1f}  expected: + the {campaign.spec.grace_s:g} s grace and ~{overhead_s() / 60:g} min per "
        "run around the agent",
        f"{'':12}(setup, evaluation, record: what bench campaign status's ETA assumes before it has measured a run)",
        f"  {h.at_most:8.1f}  at most: + the grace and the whole evaluation margin, {margin / 60:g} min per run",
        f"{'':12}(eval_budget {campaign.spec.limits.eval_s / 60:g} min, the scorer's grace, recording: Slurm's margin)",
        "",
    ]
    expected = [t[1] for t in run_seconds(campaign, budget)]
    named = _slots(campaign)
    counts = sorted({1, *(2**i for i in range(1, 12) if 2**i < len(keys)), *([named[0]] if named else [])})
    enough = enough_slots(expected)
    lines.append("wall-clock (expected times; runs in the campaign's order, one per GPU):")
    for n in counts:
        note = f"  <- {named[1]}" if named and n == named[0] else ""
        lines.append(f"  {n:>5} GPU(s)  {_hours(wall_clock_s(expected, n))}{note}")
    lines.append(
        f"  {enough:>5} GPU(s)  {_hours(max(expected))}: the floor, the longest run; more GPUs do not shorten it"
    )
    if named is None:
        lines.append("  the file names no gpus: the local executor uses every GPU it finds (nvidia-smi -L)")
    head = f"the token use measured in {measured} where it has the model, else " if measured else ""
    lines += [
        "",
        f"API cost (estimated, low-high: {head}each run's minutes x tokens per minute x the price table):",
    ]
    per_agent, minutes = Counter(k.agent for k in keys), agent_minutes(campaign, budget)
    missing = f"the pilot {measured} has" if measured else "the paper publishes"
    costs = [agent_cost(a, per_agent[a], published, missing, minutes.get(a)) for a in campaign.agents]
    w = max(len(c.agent.label) for c in costs)
    for c in costs:
        figure = c.why if c.usd is None else f"{c.shown}: {c.why}"
        lines.append(f"  {c.agent.label:{w}}  {c.runs:>4} runs  {figure}")
    known = [c for c in costs if c.usd is not None]
    low, high = sum(c.usd or 0.0 for c in known), sum(c.usd if c.high is None else c.high for c in known)
    total = f"${low:,.2f}" + (f"-${high:,.2f}" if high != low else "")
    if len(known) < len(costs):
        total = f"unknown ({len(costs) - len(known)} of {len(costs)} agent(s) without a price); the others {total}"
    lines.append(f"  total: {total}")
    lines += _sources(costs)
    if campaign.spec.max_cost is not None:
        llm = sum(c.runs for c in costs if not offline(c.agent))
        lines.append(
            f"  at most ${campaign.spec.max_cost * llm:,.2f}: max_cost ${campaign.spec.max_cost:,.2f} per run x {llm} "
            "LLM runs (the metering gateway's API budget)"
        )
    return "\n".join(lines)
