"""The MLflow tag schema: the only place where tag, param and metric names are spelled.

``analysis/`` filters runs on these tags, so they are a public contract: add names,
never rename them.

Run hierarchy in one experiment per campaign::

    agent run   (bench.kind=agent)    one agent on one task, one repeat
      script run  (bench.kind=script)   every run_<x>.py / train.py the agent launched
      eval run    (bench.kind=eval)     official evaluation of a selected checkpoint
    campaign run (bench.kind=campaign) the campaign's report (bench report's files) as artifacts
      summary run (bench.kind=summary)  one leaderboard entry: Agg, Agg-max, success, per-task stats
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
# "" or why the run is too short to compare: the budget ended the baseline's own training before it
# finished (the demo's T1 on a CPU), with the step it reached (bench.pipeline.record.too_short);
# such a cell is marked and never ranked
TOO_SHORT = "bench.too_short"
WORKSPACE = "bench.workspace"
AUDIT_DISQUALIFIED = "bench.audit.disqualified"  # rules broken, comma-joined ("1,4"; "" when none)
AUDIT_FLAGGED = "bench.audit.flagged"  # rules with a flagged finding for a person to look at ("3,6"; "" when none)
AUDIT_FINDINGS = "bench.audit.findings"  # the findings, one per line: "rule 4 disqualify: a package install ..."
AUDIT_ARTIFACT = "audit.json"  # every finding with its evidence, on the agent run
SANDBOXED = "bench.sandboxed"  # "true" when the agent ran in bench.sandbox; "false": --unsandboxed (or older runs)
LIMITS_HIT = "bench.limits_hit"  # the run's limits it passed, comma-joined: memory,processes,workspace,log,line,events,
# evaluation ("" when none; bench.sandbox.resource_limits); the details are in result.json's limits
SYNTHETIC = "bench.synthetic"  # "true" for generated runs (benchmarks), never real results
# the paper's protocol (bench.protocol): what a run had, and how it deviates (the reports mark such
# runs)
PROTOCOL = "bench.protocol"  # standard | nonstandard
DEVIATIONS = "bench.deviations"  # the deviations' kinds, comma-joined: budget,hardware,sandbox,partial-data,cut-short
DEVIATION_NOTES = "bench.deviation_notes"  # one sentence per deviation, one per line
BUDGET_MINUTES = "bench.budget_minutes"  # this run's budget (a tag, so that the UI can group and filter by it)
TASK_BUDGET_MINUTES = "bench.task_budget_minutes"  # the task's own budget (task.toml)
HARDWARE = "bench.hardware"  # the evaluation device in words: "NVIDIA A100-SXM4-80GB", "cpu (..., 2 cores)"
DEVICE = "bench.device"  # cuda | cpu
ENTRY = "bench.entry"  # leaderboard entry label: the paper's name for a published CLI + model, else "agent (model)"
# agent runs: "t6 · claude-code (claude-opus-4-7)", the task and the entry in one value: the UI's
# per-task view groups by it alone, as a group row labelled by two keys ("bench.task: t6,
# bench.entry: ...") is cut before the agent's name
GROUP = "bench.group"
PROTOCOL_STANDARD, PROTOCOL_NONSTANDARD = "standard", "nonstandard"
# where the task came from (bench.tasks.packs): what a result names as "the task that was run"
TASK_SOURCE = "bench.task.source"  # built-in | path | entry-point
TASK_PACK = "bench.task.pack"  # the pack's name ("" for a built-in task)
TASK_PACK_VERSION = "bench.task.pack_version"  # the pack's version ("" when it has none)
TASK_SHA256 = "bench.task.sha256"  # the task folder's content hash at the run's start (bench.checksums.tree_sha256)
TASK_FOLDER = "bench.task.folder"  # the task folder the run used

SCRIPT = "bench.script"  # script runs: file name, e.g. run_3.py
PID = "bench.pid"
EXIT = "bench.exit"  # FINISHED | FAILED | KILLED, as observed
# where the agent run's cost_usd came from: "gateway" (the metering gateway's tokens x the price
# table), "gateway+max_tokens" (the same, some answers left early charged their max_tokens), "cli"
# (the CLI's own figure), "cli-tokens" (the CLI's token counts x the price table) or "unknown"
# (bench.gateway.metering)
COST_SOURCE = "bench.cost_source"
# the API budget (--max-cost) of an agent run: "$X: spent at M min: later requests refused ($Y
# used)" or "$X: not reached ($Y used)"; "" without one (bench.gateway.metering.budget_tag; read by
# analysis.notes)
API_BUDGET = "bench.api_budget"
GPU_METRICS = "bench.gpu_metrics"  # agent runs: "nvml", or "no GPU metrics (...)" and why (tracking.sysmetrics)
RELAY_DROPPED = "bench.relay.dropped"  # agent runs: what the relay dropped or left, one "reason: count" per line
# the agent's conversation as an MLflow trace (bench.pipeline.traces): the agent run's tag says its
# trace id, or why it has none ("none: ...") or could not be written ("failed: ..."); the trace's
# own tags and its spans' attributes
TRACE = "bench.trace"
TRACE_KIND = "agent-conversation"  # the trace's bench.kind
SPAN_LLM_ATTRS = {  # llm.jsonl field -> LLM span attribute (tokens, cost, model go in MLflow's own keys too)
    "api": "bench.llm.api",
    "path": "bench.llm.path",
    "status": "bench.llm.status",
    "latency_s": "bench.llm.latency_s",
    "ttfb_s": "bench.llm.ttfb_s",
    "input": "bench.llm.tokens_input",
    "output": "bench.llm.tokens_output",
    "cached": "bench.llm.tokens_cached",
    "cache_write": "bench.llm.tokens_cache_write",
    "cost_usd": "bench.llm.cost_usd",
    "complete": "bench.llm.complete",
    "cut": "bench.llm.cut",
    "refused": "bench.llm.refused",
    "error": "bench.llm.error",
}
SPAN_TOOL = "bench.tool"  # TOOL spans: shell | write | edit | read | other (bench.agents.events)
SPAN_TOOL_TARGET = "bench.tool.target"  # the command, the file, or the tool's name
CANDIDATE = "bench.candidate"  # eval runs: best | best-unloadable | window-<k>, comma-joined (best,window-3)
# a run brought in by `bench import` (bench.bundle.importer): its run id in the store it was
# exported from; a second import of the same bundle finds it and adds nothing
SOURCE_RUN = "bench.import.source_run_id"

KIND_AGENT = "agent"
KIND_SCRIPT = "script"
KIND_EVAL = "eval"
KIND_SUMMARY = "summary"  # a campaign's roll-up: one run per leaderboard entry (bench report / bench run)
KIND_CAMPAIGN = "campaign"  # the campaign's own run: the report's tables and figures as artifacts

# --- experiments ----------------------------------------------------------------------------------
# MLflow 3 opens an experiment in the GenAI view (traces, judges) unless it says it is model
# training
EXPERIMENT_KIND = "mlflow.experimentKind"
EXPERIMENT_KIND_TRAINING = "custom_model_development"

STATUSES = ("success", "failed", "refused", "timeout", "disqualified", "interrupted")

# --- params on the agent run ------------------------------------------------------------------
PARAM_AGENT = "agent"
PARAM_MODEL = "model"
PARAM_TASK = "task"
PARAM_REPEAT = "repeat"
PARAM_SEED = "seed"  # the run's recorded seed (RunSpec.seed; "" for an agent without one)
PARAM_BUDGET_MINUTES = "budget_minutes"
PARAM_GRACE_S = "grace_s"
PARAM_METRIC = "metric"  # the task's metric name (mse, val_bpb, ...)
PARAM_DIRECTION = "direction"  # min | max
PARAM_EVAL_SPLIT = "eval_split"
PARAM_DEVICE = "device"  # the evaluation device
PARAM_PREPARE_SHA256 = "prepare_sha256"
PARAM_AGENT_ARGV = "agent_argv"

# the run's description (bench.runspec.RunSpec.to_dict()) on its agent run: each field named here is
# a param, each table of labels named in SPEC_TAG_TABLES one tag per key; the record step maps them
# with spec_params/spec_tags
SPEC_PARAMS = {
    "agent": PARAM_AGENT, "model": PARAM_MODEL, "task": PARAM_TASK, "repeat": PARAM_REPEAT,
    "budget_s": PARAM_BUDGET_MINUTES, "grace_s": PARAM_GRACE_S, "device": PARAM_DEVICE, "seed": PARAM_SEED,
}  # fmt: skip
TAG_PREFIX = "bench.tag."  # the researcher's own labels (bench run --tag KEY=VALUE, a campaign's tags): bench.tag.KEY
SPEC_TAG_TABLES = {"tags": TAG_PREFIX}  # field -> tag prefix


def spec_params(spec: dict) -> dict:
    """The run description's params, as logged on the agent run.

    The budget in minutes, as the paper gives it; a missing model as "".
    """
    out = {name: "" if spec.get(key) is None else spec[key] for key, name in SPEC_PARAMS.items()}
    if spec.get("budget_s") is not None:
        out[PARAM_BUDGET_MINUTES] = float(spec["budget_s"]) / 60
    return out


def spec_tags(spec: dict) -> dict[str, str]:
    """The description's tables of labels as tags: ``prefix + key`` -> value."""
    return {f"{prefix}{k}": str(v) for key, prefix in SPEC_TAG_TABLES.items() for k, v in (spec.get(key) or {}).items()}


def audit_tags(findings) -> dict[str, str]:
    """The audit's tags on an agent run, from its findings.

    The findings are objects with ``rule``, ``verdict``, ``reason``.
    """

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
# paper Eq. 1's per-task term against the task baseline, sign-corrected so that higher is better on
# every task: (s - b) / b where higher is better, (b - s) / b where lower is; comparable across
# tasks, unlike ``score``
REL_IMPROVEMENT = "rel_improvement"
TASK_BASELINE = "task_baseline"  # b: the task's baseline score (task.toml), the reference of rel_improvement
# MLRC-Bench's measure beside Eq. 1: the share of the gap from b to the task's reference r closed,
# (s - b) / (r - b), a fraction; logged only where the task has a reference that beats its baseline
# (Task.reference, analysis/gap.py)
GAP_CLOSED = "gap_closed"
TASK_REFERENCE = "task_reference"  # r: the score of the task's reference (task.toml reference_score or [[references]])
# from the agent's parsed event stream (bench.agents.events.Tally.metrics())
TOOL_CALLS = "tool_calls"
SHELL_COMMANDS = "shell_commands"
FILE_WRITES = "file_writes"
FILE_READS = "file_reads"
TOKENS_INPUT = "tokens_input"
TOKENS_OUTPUT = "tokens_output"
TOKENS_CACHED = "tokens_cached"
COST_USD = "cost_usd"
# from the metering gateway (bench.gateway.proxy), also as series over the run (cumulative, step =
# seconds)
LLM_REQUESTS = "llm_requests"  # model requests (the four APIs') the CLI sent through the gateway; not its other calls
LLM_ERRORS = "llm_errors"  # of which answered with an error status, unanswered, or refused by the API budget
# what the relay could not bring from the spool into MLflow (bench.tracking.relay_limits): counted,
# with the reasons
RELAY_VALUES = "relay_values"  # script values the store took
RELAY_VALUES_DROPPED = "relay_values_dropped"  # values dropped (refused by the store's limits, over the cap, copies)
RELAY_VALUES_UNRELAYED = "relay_values_unrelayed"  # values left in the spool (the store unreachable, unread bytes)
RELAY_CHECKPOINTS_NOT_UPLOADED = "relay_checkpoints_not_uploaded"  # checkpoint events whose file was not uploaded
RELAY_UNREAD_BYTES = "relay_unread_bytes"  # spool bytes the relay never read (past the per-script cap)
# the agent's whole process tree on the GPU, from NVML (absent, not 0, without it:
# bench.tracking.sysmetrics)
GPU_MEMORY_PEAK_MB = "gpu_memory_peak_mb"  # the largest GPU memory the tree held at one sample, MB
GPU_UTILIZATION_MEAN = "gpu_utilization_mean_percent"  # mean GPU utilisation over the run's samples (0 off the GPU)

# --- eval runs ------------------------------------------------------------------------------
EVAL_VAL_SCORE = "val_score"  # the checkpoint's self-reported validation score
EVAL_SAVED_MINUTES = "saved_minutes"  # when it was saved, minutes into the budget

# --- metrics on script runs -----------------------------------------------------------------------
# every series of a script run is on one step axis, the script's training step; wall time is its own
# series
CHECKPOINT_SCORE = "checkpoint_val_score"  # self-reported score of each saved checkpoint; step = training step
SCRIPT_SECONDS = "elapsed_s"  # seconds since the script started, one value per step it logged
# sampled by the harness on the host (bench.tracking.sysmetrics): on script runs on the
# training-step axis, on the agent run (its whole tree) on seconds since the launch
SYSTEM_CPU = "system/cpu_percent"  # 100 = one core, the process and its descendants
SYSTEM_MEMORY = "system/memory_mb"  # resident memory of the process and its descendants
SYSTEM_GPU_MEMORY = "system/gpu_memory_mb"  # NVML: GPU memory of those processes
SYSTEM_GPU_UTILIZATION = "system/gpu_utilization_percent"  # NVML: utilisation of the busiest GPU they are on

# --- summary runs (one per leaderboard entry of a campaign) ---------------------------------------
SUMMARY_AGG = "agg"  # Eq. 1: mean over tasks of the mean's rel_improvement
SUMMARY_AGG_MAX = "agg_max"  # the same with each task's best run
SUMMARY_SUCCESS_RATE = "success_rate"  # successful runs / runs, all tasks
SUMMARY_RUNS = "runs"
SUMMARY_TASKS = "tasks"  # tasks with a defined Eq. 1 term
# per task (summary_task_metric(task, what)): mean and std of the successful runs' scores, the Eq. 1
# term of the mean, successful runs / runs, and the runs
SUMMARY_MEAN, SUMMARY_STD, SUMMARY_REL_MEAN = "mean", "std", "rel_mean"
SUMMARY_TASK_SUCCESS_RATE, SUMMARY_N_RUNS = "success_rate", "n_runs"
SUMMARY_TASK_STATS = (SUMMARY_MEAN, SUMMARY_STD, SUMMARY_REL_MEAN, SUMMARY_TASK_SUCCESS_RATE, SUMMARY_N_RUNS)
# MLRC-Bench's measure beside Eq. 1 (analysis/gap.py): the share of the baseline-to-reference gap
# closed, a fraction
SUMMARY_GAP = "gap_closed"  # mean over the tasks with a reference of the mean's gap closed
SUMMARY_GAP_MAX = "gap_closed_max"  # the same with each task's best run (MLRC-Bench's own choice)
SUMMARY_GAP_TASKS = "gap_tasks"  # tasks with a gap term (a reference that beats the baseline)
SUMMARY_GAP_MEAN = "gap_closed"  # per task (summary_task_metric): the gap closed by the mean, e.g. t6_gap_closed
REPORT_ARTIFACTS = "report"  # the campaign run's folder of `bench report` outputs

# --- the MLflow UI's saved views (experiment tags; bench.tracking.views) --------------------------
SHARED_VIEW_PREFIX = "mlflow.sharedViewState."  # + view id: MLflow 3.17's saved views ("Views" menu of the runs tab)


def summary_task_metric(task: str, what: str) -> str:
    """A per-task metric of a summary run.

    ``t6_mean``, ``t6_std``, ``t6_rel_mean``, ``t6_success_rate``, ...
    """
    return f"{task}_{what}"


def official_metric(metric: str) -> str:
    """Name of the official metric on the agent run, e.g. ``official_mse``."""
    return f"official_{metric}"


def run_tags(campaign: str, agent: str, task: str, repeat: int) -> dict[str, str]:
    """The tags every run of one agent run carries (agent, script and eval runs alike).

    What analysis groups by.
    """
    return {CAMPAIGN: campaign, AGENT: agent, TASK: task, REPEAT: str(repeat)}


def agent_run_tags(campaign: str, agent: str, model: str | None, task: str, repeat: int, run_dir: str) -> dict:
    """The tags of an agent run, set when it is created (status and reason follow at the end)."""
    return {
        KIND: KIND_AGENT,
        **run_tags(campaign, agent, task, repeat),
        MODEL: model or "",
        ENTRY: entry_label(agent, model),
        WORKSPACE: run_dir,
    }


def entry_label(agent: str, model: str | None) -> str:
    """The label the UI groups by.

    ``claude-code (claude-opus-4-7)``, or the agent alone for an offline one.
    """
    return f"{agent} ({model})" if model else agent


def group_label(task: str, entry: str) -> str:
    """An agent run's :data:`GROUP`: the task first, so that the UI's groups sort task by task."""
    return f"{task} · {entry}"


def task_source_tags(source: dict) -> dict[str, str]:
    """The task's source and folder hash as tags.

    ``source``: result.json's ``task_source``; {} for older runs.
    """
    if not source:
        return {}
    return {
        TASK_SOURCE: str(source.get("kind") or "built-in"),
        TASK_PACK: str(source.get("pack") or ""),
        TASK_PACK_VERSION: str(source.get("version") or ""),
        TASK_SHA256: str(source.get("sha256") or ""),
        TASK_FOLDER: str(source.get("folder") or "")[:500],
    }


def protocol_tags(
    *, budget_s: float, task_budget_s: float, hardware: str, device: str, deviations: list
) -> dict[str, str]:
    """The protocol facts of an agent run as tags.

    ``deviations``: :class:`bench.protocol.Deviation` objects.
    """
    return {
        PROTOCOL: PROTOCOL_NONSTANDARD if deviations else PROTOCOL_STANDARD,
        DEVIATIONS: ",".join(d.kind for d in deviations),
        DEVIATION_NOTES: "\n".join(str(d) for d in deviations)[:5000],
        BUDGET_MINUTES: f"{budget_s / 60:g}",
        TASK_BUDGET_MINUTES: f"{task_budget_s / 60:g}",
        HARDWARE: hardware[:250],
        DEVICE: device,
    }
