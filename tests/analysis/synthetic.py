"""A generated MLflow store shaped like a real campaign, written through the harness's own MlflowWriter.

Every run carries ``bench.synthetic=true``: these are fixtures and benchmark loads, never results.
Used by ``tests/benchmarks/report_speed.py`` (245 agent runs x 12 scripts, the paper's campaign size)
and by the fast unit tests (a few runs, with parallel scripts, failures and several 5-minute windows).
"""

from __future__ import annotations

import numpy as np

from bench.tracking import schema
from bench.tracking.writer import MlflowWriter

# (task, metric, direction, baseline, budget minutes): the paper's Table 2
TASKS = [
    ("t1", "val_bpb", "min", 3.438, 40),
    ("t2", "top1_acc", "max", 0.343, 120),
    ("t3", "miou", "max", 0.660, 80),
    ("t4", "auroc", "max", 0.706, 60),
    ("t5", "accuracy", "max", 0.806, 40),
    ("t6", "mse", "min", 0.384, 40),
    ("t7", "accuracy", "max", 0.793, 40),
]


def generate(
    campaign: str,
    agents: int = 7,
    tasks: int = 7,
    repeats: int = 5,
    scripts: int = 12,
    evals: int = 3,
    fail_every: int = 17,
    seed: int = 0,
    start: float = 1_780_000_000.0,
) -> dict[str, int]:
    """Write ``agents x tasks x repeats`` agent runs, each with ``scripts`` script runs and ``evals`` eval runs.

    Agent k improves on the baseline by about 5 + 4k % and launches more scripts the weaker it is (so
    Figure 3's fit has something to find); every ``fail_every``-th run fails without a score.
    """
    rng = np.random.default_rng(seed)
    rec = MlflowWriter(campaign)
    counts = {"agent": 0, "script": 0, "eval": 0}
    t0 = start
    for a in range(agents):
        agent, model = f"synthetic-{chr(ord('a') + a)}", f"synth-model-{a + 1}"
        skill = 0.05 + 0.04 * a
        for task, metric, direction, base, budget in TASKS[:tasks]:
            sign = 1.0 if direction == "max" else -1.0
            for r in range(1, repeats + 1):
                n = counts["agent"]
                failed = fail_every > 0 and n % fail_every == fail_every - 1
                gain = skill + 0.01 * rng.standard_normal()  # a fraction of the way to a perfect score
                score = base + (1 - base) * min(0.95, 2 * gain) if direction == "max" else base * (1 - gain)
                wall = budget * 60 * rng.uniform(0.4, 1.0)
                tags = {
                    schema.KIND: schema.KIND_AGENT,
                    schema.CAMPAIGN: campaign,
                    schema.AGENT: agent,
                    schema.MODEL: model,
                    schema.TASK: task,
                    schema.REPEAT: r,
                    schema.SYNTHETIC: "true",
                    # the first agent's second task ran on a mirror subset (as T2/T3 do without the full data)
                    schema.PARTIAL_DATA: str(a == 0 and task == TASKS[1][0]).lower(),
                    # the second agent's first task ran without the sandbox (bench run --unsandboxed)
                    schema.SANDBOXED: str(not (a == 1 and task == TASKS[0][0])).lower(),
                }
                run = rec.create_run(f"{task}-{agent}-r{r}", tags, start_time=t0)
                rec.log_params(
                    run,
                    {
                        schema.PARAM_AGENT: agent,
                        schema.PARAM_MODEL: model,
                        schema.PARAM_TASK: task,
                        schema.PARAM_REPEAT: r,
                        schema.PARAM_BUDGET_MINUTES: budget,
                        schema.PARAM_METRIC: metric,
                        schema.PARAM_DIRECTION: direction,
                    },
                )
                base_tags = {
                    schema.CAMPAIGN: campaign,
                    schema.AGENT: agent,
                    schema.TASK: task,
                    schema.REPEAT: r,
                    schema.SYNTHETIC: "true",
                }
                n_scripts = max(1, scripts + (agents - 1) // 2 - a)  # mean over agents: `scripts`
                _scripts(rec, run, base_tags, t0, wall, n_scripts, base, score, sign, rng, failed)
                counts["script"] += n_scripts
                windows = [] if failed else _evals(rec, run, base_tags, metric, wall, evals, base, score, sign, rng)
                counts["eval"] += len(windows)
                metrics = {
                    schema.SUCCESS: 0.0 if failed else 1.0,
                    schema.WALL_TIME: wall,
                    schema.BUDGET_UTILISATION: min(wall, budget * 60) / (budget * 60),
                    schema.SCRIPTS_LAUNCHED: n_scripts,
                    schema.LAUNCHES_OBSERVED: n_scripts,
                    schema.TOKENS_INPUT: 2e5 * (1 + a),
                    schema.TOKENS_OUTPUT: 2e4 * (1 + a),
                    schema.COST_USD: 0.5 * (1 + a),
                }
                if not failed:
                    metrics.update({schema.SCORE: score, schema.official_metric(metric): score})
                rec.log_metrics(run, [(k, v, 0, t0 + wall) for k, v in metrics.items()])
                rec.log_metrics(run, [(schema.ANYTIME, v, int(np.ceil(m)), t0 + wall) for m, v in windows])
                status = "failed" if failed else "success"
                rec.set_tags(run, {schema.STATUS: status, schema.REASON: "synthetic " + status})
                rec.end_run(run, "FAILED" if failed else "FINISHED", t0 + wall)
                counts["agent"] += 1
                t0 += wall + 60
    return counts


def _scripts(rec, parent, tags, t0, wall, n, base, score, sign, rng, failed) -> None:
    """n script runs over the agent's wall time, two at a time in the first half, with checkpoint metrics."""
    slots = np.sort(rng.uniform(0, wall * 0.9, n))
    for k, s in enumerate(slots):
        dur = rng.uniform(0.03, 0.25) * wall
        end = min(s + dur, wall)
        exit_ = "FAILED" if failed or k % 7 == 6 else ("KILLED" if end >= wall else "FINISHED")
        run = rec.create_run(
            f"run_{k + 1}.py",
            {**tags, schema.KIND: schema.KIND_SCRIPT, schema.SCRIPT: f"run_{k + 1}.py"},
            parent=parent,
            start_time=t0 + s,
        )
        rows = []
        if exit_ != "FAILED":
            frac = (k + 1) / n
            for c in range(3):
                val = base + (score - base) * frac * (0.8 + 0.1 * c) - sign * abs(0.002 * rng.standard_normal())
                at = t0 + s + dur * (c + 1) / 4
                rows += [
                    (schema.CHECKPOINT_SCORE, val, c, at),
                    ("val_metric", val, c, at),
                    ("loss", 1.0 / (c + 1), c, at),
                ]
        rec.log_metrics(run, rows)
        rec.set_tags(run, {schema.EXIT: exit_})
        rec.end_run(run, exit_, t0 + end)


def _evals(rec, parent, tags, metric, wall, n, base, score, sign, rng) -> list[tuple[float, float]]:
    """The official evaluations of n window checkpoints; the last one is the best (the submitted score)."""
    out = []
    for w in range(n):
        minute = (w + 1) / n * wall / 60
        official = score if w == n - 1 else base + (score - base) * (w + 1) / (n + 1)
        val = official - sign * 0.001
        candidate = f"best,window-{w}" if w == n - 1 else f"window-{w}"
        run = rec.create_run(
            f"eval ckpt{w}", {**tags, schema.KIND: schema.KIND_EVAL, schema.CANDIDATE: candidate}, parent=parent
        )
        rec.log_metrics(
            run,
            [
                (schema.EVAL_VAL_SCORE, val, 0, None),
                (schema.EVAL_SAVED_MINUTES, minute, 0, None),
                (schema.official_metric(metric), official, 0, None),
            ],
        )
        rec.end_run(run, "FINISHED")
        out.append((minute, official))
    return out
