"""The MLflow tag schema: the only place where tag, param and metric names are spelled.

``analysis/`` filters runs on these tags, so they are a public contract: add names,
never rename them.

Run hierarchy in one experiment per campaign::

    agent run   (bench.kind=agent)    one agent on one task, one repeat
      script run  (bench.kind=script)   every run_<x>.py / train.py the agent launched
      eval run    (bench.kind=eval)     official evaluation of a selected checkpoint
"""

from __future__ import annotations

# --- tags ---------------------------------------------------------------------------------
PARENT = "mlflow.parentRunId"  # MLflow's own nesting tag (the UI draws the tree from it)
RUN_NOTE = "mlflow.note.content"  # MLflow's description field, shown on the run page

KIND = "bench.kind"  # agent | script | eval
CAMPAIGN = "bench.campaign"
AGENT = "bench.agent"  # dispatch-table name: baseline, command, claude-code, ...
MODEL = "bench.model"  # LLM behind the agent ("" for offline agents)
TASK = "bench.task"  # t1 ... t7
REPEAT = "bench.repeat"  # 1-based repeat index
STATUS = "bench.status"  # success | failed | refused | timeout | disqualified | interrupted
REASON = "bench.reason"  # one line: why the status is what it is
PARTIAL_DATA = "bench.partial_data"  # "true" when the task ran on an incomplete dataset
PARTIAL_NOTES = "bench.partial_notes"  # how the data fell short (one note per line), when partial
WORKSPACE = "bench.workspace"
AUDIT_DISQUALIFIED = "bench.audit.disqualified"  # rules broken, comma-joined ("1,4"; "" when none)
AUDIT_FLAGGED = "bench.audit.flagged"  # rules with a flagged finding for a person to look at ("3,6"; "" when none)
AUDIT_FINDINGS = "bench.audit.findings"  # the findings, one per line: "rule 4 disqualify: a package install ..."
AUDIT_ARTIFACT = "audit.json"  # every finding with its evidence, on the agent run
SANDBOXED = "bench.sandboxed"  # "true" when the agent ran in bench.sandbox; "false": --unsandboxed (or older runs)
SYNTHETIC = "bench.synthetic"  # "true" for generated runs (benchmarks), never real results

SCRIPT = "bench.script"  # script runs: file name, e.g. run_3.py
PID = "bench.pid"
EXIT = "bench.exit"  # FINISHED | FAILED | KILLED, as observed
CANDIDATE = "bench.candidate"  # eval runs: best | best-unloadable | window-<k>, comma-joined (best,window-3)

KIND_AGENT = "agent"
KIND_SCRIPT = "script"
KIND_EVAL = "eval"

STATUSES = ("success", "failed", "refused", "timeout", "disqualified", "interrupted")

# --- params on the agent run ------------------------------------------------------------------
PARAM_AGENT = "agent"
PARAM_MODEL = "model"
PARAM_TASK = "task"
PARAM_REPEAT = "repeat"
PARAM_BUDGET_MINUTES = "budget_minutes"
PARAM_GRACE_S = "grace_s"
PARAM_METRIC = "metric"  # the task's metric name (mse, val_bpb, ...)
PARAM_DIRECTION = "direction"  # min | max
PARAM_EVAL_SPLIT = "eval_split"
PARAM_DEVICE = "device"  # the evaluation device
PARAM_PREPARE_SHA256 = "prepare_sha256"
PARAM_AGENT_ARGV = "agent_argv"


def audit_tags(findings) -> dict[str, str]:
    """The audit's tags on an agent run, from its findings (objects with ``rule``, ``verdict``, ``reason``)."""

    def rules(verdict: bool) -> str:
        return ",".join(str(r) for r in sorted({f.rule for f in findings if (f.verdict == "disqualify") == verdict}))

    lines = [f"rule {f.rule} {f.verdict}: {f.reason}" for f in findings]
    return {AUDIT_DISQUALIFIED: rules(True), AUDIT_FLAGGED: rules(False), AUDIT_FINDINGS: "\n".join(lines)[:5000]}


# --- metrics on the agent run ---------------------------------------------------------------
SCORE = "score"  # the official score (task metric, eval split)
SUCCESS = "success"  # 1.0 / 0.0
WALL_TIME = "wall_time_s"
BUDGET_UTILISATION = "budget_utilisation"  # agent wall time / budget
SCRIPTS_LAUNCHED = "scripts_launched"  # counted by the tracer
LAUNCHES_OBSERVED = "launches_observed"  # counted independently by process monitoring (bench.pipeline.launch_monitor)
CHECKPOINTS = "checkpoints"
ANYTIME = "anytime_score"  # official score of the best checkpoint of each 5-minute window; step = minutes
BEST_VAL = "best_val_score"  # self-reported validation score of the scored checkpoint
# from the agent's parsed event stream (bench.agents.events.Tally.metrics())
TOOL_CALLS = "tool_calls"
SHELL_COMMANDS = "shell_commands"
FILE_WRITES = "file_writes"
FILE_READS = "file_reads"
TOKENS_INPUT = "tokens_input"
TOKENS_OUTPUT = "tokens_output"
TOKENS_CACHED = "tokens_cached"
COST_USD = "cost_usd"

# --- eval runs ------------------------------------------------------------------------------
EVAL_VAL_SCORE = "val_score"  # the checkpoint's self-reported validation score
EVAL_SAVED_MINUTES = "saved_minutes"  # when it was saved, minutes into the budget

# --- metrics on script runs -------------------------------------------------------------------
CHECKPOINT_SCORE = "checkpoint_val_score"  # self-reported score of each saved checkpoint; step = save index


def official_metric(metric: str) -> str:
    """Name of the official metric on the agent run, e.g. ``official_mse``."""
    return f"official_{metric}"


def run_tags(campaign: str, agent: str, task: str, repeat: int) -> dict[str, str]:
    """The tags every run of one agent run carries (agent, script and eval runs alike): what analysis groups by."""
    return {CAMPAIGN: campaign, AGENT: agent, TASK: task, REPEAT: str(repeat)}


def agent_run_tags(campaign: str, agent: str, model: str | None, task: str, repeat: int, run_dir: str) -> dict:
    """The tags of an agent run, set when it is created (status and reason follow at the end)."""
    return {KIND: KIND_AGENT, **run_tags(campaign, agent, task, repeat), MODEL: model or "", WORKSPACE: run_dir}
