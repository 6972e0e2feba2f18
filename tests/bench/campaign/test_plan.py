"""``bench campaign plan``: the paper's study as campaigns/paper.toml, planned before anything starts: its 245 runs
and GPU-hours worked out here by hand from the paper's Table 2, a small campaign's plan, bad files refused in one
line, and nothing created (no run directory, no MLflow store), with no API key set."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.agents import pricing
from bench.campaign import plan, spec
from bench.cli import main
from tests.bench.campaign.conftest import campaign_file

ROOT = Path(__file__).resolve().parents[3]
PAPER = ROOT / "campaigns" / "paper.toml"

# The paper's Table 2 budgets in minutes (tasks.csv's budget_min), T1..T7, read off the paper, not the task folders
TABLE_2_MIN = (40, 120, 80, 60, 40, 40, 40)
# Table 3: the seven agents, each through its CLI, with the model named as the paper names it
TABLE_3 = [
    ("claude-code", "claude-sonnet-4-6"), ("claude-code", "claude-opus-4-6"), ("claude-code", "claude-opus-4-7"),
    ("codex", "gpt-5.5"), ("opencode", "kimi-k2.5"), ("opencode", "kimi-k2.6"), ("opencode", "qwen3.6-plus"),
]  # fmt: skip
KEYS = re.compile(r"_API_KEY$|_AUTH_TOKEN$|_OAUTH_TOKEN$|_BASE_URL$|^GOOGLE_|^MLFLOW_")


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No API key, no endpoint; workspaces, cache and store in folders that do not exist yet."""
    for var in [v for v in os.environ if KEYS.search(v)]:
        monkeypatch.delenv(var)
    where = {"BENCH_WORKSPACES_DIR": "ws", "BENCH_CACHE_DIR": "cache", "BENCH_MLRUNS_DIR": "mlruns"}
    for var, name in where.items():
        monkeypatch.setenv(var, str(tmp_path / name))
    return [tmp_path / name for name in where.values()]


def _plan(capsys, path: Path) -> tuple[int, str, str]:
    code = main(["campaign", "plan", str(path)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_paper_file_loads_without_any_key_and_is_table_3_x_seven_tasks_x_five(isolated):
    c = spec.load(PAPER)
    assert [(a.name, (a.model or "").rsplit("/", 1)[-1]) for a in c.agents] == TABLE_3
    assert c.task_ids == tuple(f"t{i}" for i in range(1, 8)) and c.repeats == 5 and c.spec.budget_s is None
    assert [c.budget_of(t) / 60 for t in c.task_ids] == list(TABLE_2_MIN)  # the task folders agree with the paper
    assert len(c.runs()) == 245 and len({k.run_id for k in c.runs()}) == 245
    assert not any(p.exists() for p in isolated)


def test_plan_of_the_paper_prints_245_runs_and_its_gpu_hours(isolated, capsys):
    code, out, err = _plan(capsys, PAPER)
    assert (code, err) == (0, "")
    hours = sum(TABLE_2_MIN) * 5 * 7 / 60  # 420 min per agent and repeat -> 245.0 GPU-hours
    assert hours == 245.0
    assert "245 runs = 7 agent(s) x 7 task(s) x 5 repeat(s)" in out
    total = next(line for line in out.splitlines() if line.startswith("total "))
    assert total.split() == ["total", *["35"] * 7, "245", f"{hours:.1f}"]
    budgets = next(line for line in out.splitlines() if line.startswith("budget (min)"))
    assert budgets.split()[2:] == [str(m) for m in TABLE_2_MIN]
    for agent, model in TABLE_3:  # each agent: 5 runs of each task, 35 in all, 420 min x 5 = 35 GPU-hours
        row = next(line for line in out.splitlines() if line.startswith(agent) and model in line.split(")")[0])
        assert row.split()[-9:] == [*["5"] * 7, "35", "35.0"]
        named = rf"(?:[\w.-]+/)*{re.escape(model)}"  # OpenCode's: OpenRouter's provider/model prefix
        cost = rf"^  {agent} \({named}\)\s+35 runs  \$[\d,]+\.\d\d-\$[\d,]+\.\d\d: [\d,]+ min at {agent}'s tokens"
        assert re.search(cost, out, re.M), (agent, model)  # a range for every entry, never "unknown"
    # expected: + 30 s grace + the 2 min the ETA assumes; at most: + 30 s + (60 min eval + 1 min scorer + 10 min)
    assert f"{hours + 245 * (30 + 120) / 3600:8.1f}  expected" in out  # 255.2
    assert f"{hours + 245 * (30 + 71 * 60) / 3600:8.1f}  at most" in out  # 537.0
    assert f"      1 GPU(s)  {hours + 245 * 150 / 3600:.1f} h" in out  # one GPU: the runs one after another
    # the agent time as the paper reports it: Codex's mean minutes used per task (Table 8), the others' whole budget
    codex_used = 24.93 + 75.06 + 27.23 + 30.60 + 17.43 + 15.39 + 23.64  # 214.28 of its 420 min per repeat
    assert f"{6 * 35 + codex_used * 5 / 60:8.1f}  agent time as published: codex (gpt-5.5)" in out  # 227.9
    assert re.search(r"^  total: \$[\d,]+\.\d\d-\$[\d,]+\.\d\d$", out, re.M) and "unknown" not in out
    assert not any(p.exists() for p in isolated)  # no run directory, no cache, no MLflow store


def test_the_command_as_a_user_types_it(isolated, tmp_path):
    """The installed ``bench`` in a shell with no key: exit 0, the plan, nothing created."""
    env = {k: v for k, v in os.environ.items() if not KEYS.search(k)}
    bench = Path(sys.executable).parent / "bench"
    done = subprocess.run(
        [str(bench), "campaign", "plan", "campaigns/paper.toml"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "245 runs" in done.stdout and "   245.0  at the budgets" in done.stdout
    assert not any(p.exists() for p in isolated)


SMALL = """
tasks = ["t6", "t5"]
repeats = 2
budget = "10m"
gpus = [0, 1]
max_cost = 5.0
[[agents]]
name = "baseline"
[[agents]]
name = "claude-code"
model = "claude-opus-4-7"
"""


def test_a_small_campaigns_plan(isolated, tmp_path, capsys):
    path, name = campaign_file(tmp_path, SMALL)
    code, out, err = _plan(capsys, path)
    assert (code, err) == (0, "")
    assert f"campaign {name} " in out and "8 runs = 2 agent(s) x 2 task(s) x 2 repeat(s)" in out
    assert "10 min for every task (non-standard" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("baseline", "total"))}
    assert rows["baseline"] == ["baseline", "2", "2", "4", f"{4 * 10 / 60:.1f}"]
    assert rows["total"] == ["total", "4", "4", "8", f"{8 * 10 / 60:.1f}"]
    # each run expected 600 + 30 + 120 s: 8 runs on the file's two GPUs are 4 after another
    assert f"      2 GPU(s)  {4 * 750 / 3600:.1f} h  <- gpus = [0, 1]" in out
    assert f"      1 GPU(s)  {8 * 750 / 3600:.1f} h" in out
    assert f"      8 GPU(s)  {750 / 3600:.1f} h: the floor" in out
    assert re.search(r"baseline\s+4 runs  \$0\.00: an offline agent", out)
    # claude-opus-4-7, 4 runs x 10 min = 40 min at claude-code's tokens per minute (bench/campaign/token_rates.toml:
    # 100k-300k in, 97k-270k of it cached, 1.5k-7k out a minute) and LiteLLM's 5/0.5/25 USD per 1M in/cached/out:
    # low  (4M - 3.88M) x 5 + 3.88M x 0.5 + 0.06M x 25 = 0.6 + 1.94 + 1.5 = $4.04
    # high (12M - 10.8M) x 5 + 10.8M x 0.5 + 0.28M x 25 = 6 + 5.4 + 7 = $18.40
    assert re.search(r"claude-code \(claude-opus-4-7\)\s+4 runs  \$4\.04-\$18\.40: 40 min at claude-code's", out)
    assert "total: $4.04-$18.40" in out
    assert "at most $20.00: max_cost $5.00 per run x 4 LLM runs" in out  # baseline's 4 runs cost nothing
    assert "as published" not in out  # the paper publishes the use of no agent here


def test_published_use_only_at_the_published_budget(isolated, tmp_path):
    """Codex's Table 8 minutes are its use of the paper's budgets: a campaign at another budget gets none."""
    body = 'tasks = ["t6"]\nrepeats = 2\n[[agents]]\nname = "codex"\nmodel = "gpt-5.5"\n'
    path, _ = campaign_file(tmp_path, body)
    assert plan.as_published(spec.load(path))[0] == pytest.approx(2 * 15.39 / 60)
    path, _ = campaign_file(tmp_path, 'budget = "30m"\n' + body)
    assert plan.as_published(spec.load(path)) is None
    assert not any(p.exists() for p in isolated)


def test_the_cost_from_a_published_token_use(isolated, tmp_path):
    """Where a token figure exists, the cost is figure x list price x runs (worked out here from the price row)."""
    path, _ = campaign_file(tmp_path, SMALL)
    c = spec.load(path)
    use = {"anthropic/claude-opus-4.7": plan.TokenUse(2_000_000, 100_000, 1_500_000, "a test figure")}
    p = pricing.PRICES["claude-opus-4-7"]
    per_run = (500_000 * p.input + 1_500_000 * p.cached_input + 100_000 * p.output) / 1e6
    got = plan.agent_cost(c.agents[1], 4, use)
    assert got.usd == pytest.approx(4 * per_run) and "a test figure" in got.why
    text = plan.render(c, use)
    assert f"${4 * per_run:,.2f}" in text and f"total: ${4 * per_run:,.2f}" in text


def test_wall_clock_follows_the_executors_order():
    """Runs start in order, each on the first free slot: worked out by hand."""
    assert plan.wall_clock_s([3, 1, 1, 1], 1) == 6
    assert plan.wall_clock_s([3, 1, 1, 1], 2) == 3  # A: 3; B: 1, 1, 1
    assert plan.wall_clock_s([1, 1, 1, 3], 2) == 4  # A: 1, 1; B: 1, 3
    assert plan.wall_clock_s([1, 1, 1, 3], 3) == 4  # the 3 starts when the first 1 ends
    assert (plan.enough_slots([3, 1, 1, 1]), plan.enough_slots([1, 1, 1, 3])) == (2, 4)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, "no campaign file"),
        ('name = "x"\ntasks = [t1\n', "is not valid TOML"),
        ('name = "x"\ntasks = ["t1"]\n[[agents]]\nname = "nope"\n', "agents[0].name: unknown agent 'nope'"),
    ],
)
def test_a_bad_file_is_one_line_and_exit_2(isolated, tmp_path, capsys, text, expected):
    path = tmp_path / "bad.toml"
    if text is not None:
        path.write_text(text)
    code, out, err = _plan(capsys, path)
    assert (code, out) == (2, "")
    assert err.startswith("bench: ") and expected in err and err.count("\n") == 1
    assert not any(p.exists() for p in isolated)


def test_the_docs_show_the_plan_as_it_prints(isolated, monkeypatch):
    """docs/campaigns-and-clusters.md shows the paper's plan: the output there is what the command prints today."""
    monkeypatch.chdir(ROOT)
    page = (ROOT / "docs" / "campaigns-and-clusters.md").read_text()
    shown = page.split("bench campaign plan campaigns/paper.toml\n```\n\n```text\n", 1)[1].split("\n```", 1)[0]
    assert shown == plan.render(spec.load(Path("campaigns/paper.toml")))


def test_the_cost_measured_in_a_pilot_campaign_prices_the_paper(isolated, capsys):
    """`--measured PILOT`: a pilot's recorded tokens per budget-minute, scaled to the file's budgets. Two pilot runs of
    claude-sonnet-4-6 at 5 minutes: 2.2M in and 0.12M out over 10 budget-minutes, so 0.22M in and 0.012M out a
    minute; the paper's mean budget per run is (40+120+80+60+40+40+40)/7 = 60 min: 13.2M in and 0.72M out a run,
    at $3/$15 per 1M (the price table's row): $50.40 a run, x 35 runs = $1,764.00. Agents the pilot did not run
    stay unknown; the pilot's store is only read."""
    from bench.tracking import schema
    from bench.tracking.writer import MlflowWriter

    pilot = "pilot-sonnet"
    w = MlflowWriter(pilot)
    for i, (tin, tout) in enumerate(((1_000_000, 50_000), (1_200_000, 70_000))):
        tags = schema.agent_run_tags(pilot, "claude-code", "claude-sonnet-4-6", "t6", i + 1, f"/runs/r{i}")
        run = w.create_run(f"t6-r{i}", {**tags, schema.STATUS: "success"}, start_time=1_900_000_000.0 + i)
        w.log_params(run, {schema.PARAM_BUDGET_MINUTES: 5.0, schema.PARAM_METRIC: "mse", schema.PARAM_DIRECTION: "min"})
        w.log_metrics(run, [(schema.TOKENS_INPUT, tin, 0, None), (schema.TOKENS_OUTPUT, tout, 0, None)])
        w.end_run(run)
    p = pricing.PRICES["claude-sonnet-4-6"]
    assert (p.input, p.output) == (3.0, 15.0)  # the figures the docstring's hand computation uses
    assert main(["campaign", "plan", str(PAPER), "--measured", pilot]) == 0
    out = capsys.readouterr().out
    assert "API cost (estimated, low-high: the token use measured in pilot-sonnet where it has the model, else" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("claude-code (claude-sonnet-4-6)") and "runs" in x)
    assert "$1,764.00: 35 x $50.40: 13.20M tokens in (0.00M cached), 0.72M out per run" in line
    assert "measured: 2 run(s) of pilot-sonnet, 220k tokens in per budget-minute" in line
    # the others: not unknown, their range from tokens per minute, saying the pilot had no figure for them
    assert "the pilot pilot-sonnet has no token use for gpt-5.5: 1,071 min at codex's tokens per minute" in out
    assert "unknown" not in out
    # an experiment without runs, or without tokens: one line, exit 2
    assert main(["campaign", "plan", str(PAPER), "--measured", "no-such-pilot"]) == 2
    assert "--measured no-such-pilot: no agent run in that experiment" in capsys.readouterr().err


def test_the_papers_codex_entry_costs_what_a_hand_computation_says(isolated, capsys):
    """Codex with gpt-5.5 in campaigns/paper.toml: 5 repeats of its Table 8 minutes (24.93 + 75.06 + 27.23 + 30.60 +
    17.43 + 15.39 + 23.64 = 214.28 a repeat) = 1,071.4 min, at 100k-300k tokens in (97k-270k cached) and 1.5k-7k out
    a minute (bench/campaign/token_rates.toml), priced at LiteLLM's 5 / 0.5 / 30 USD per 1M in/cached/out:
    low  107.14M in, 103.9258M cached, 1.6071M out: 3.2142 x 5 + 103.9258 x 0.5 + 1.6071 x 30 = $116.25
    high 321.42M in, 289.278M cached, 7.4998M out: 32.142 x 5 + 289.278 x 0.5 + 7.4998 x 30 = $530.34"""
    assert main(["campaign", "plan", str(PAPER)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("  codex (gpt-5.5)"))
    assert re.search(r"35 runs  \$116\.25-\$530\.34: 1,071 min at codex's tokens per minute, gpt-5\.5's price$", line)
    assert "tokens per minute (bench/campaign/token_rates.toml" in out and "code.claude.com/docs/en/costs" in out
    assert "prices: bench/agents/prices.toml, from LiteLLM 1.110.2's model cost map of 2026-11-20" in out


def test_only_an_unpriced_model_is_unknown(isolated, tmp_path):
    """A model without a price is the one "unknown"; the total says how many and sums the others."""
    body = 'tasks = ["t6"]\n[[agents]]\nname = "codex"\nmodel = "gpt-unpriced-7"\n[[agents]]\nname = "baseline"\n'
    path, _ = campaign_file(tmp_path, body)
    text = plan.render(spec.load(path))
    assert "unknown: gpt-unpriced-7 has no price (bench/agents/prices.toml, $BENCH_PRICES)" in text
    assert "total: unknown (1 of 2 agent(s) without a price); the others $0.00" in text
