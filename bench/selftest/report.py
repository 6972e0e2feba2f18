"""The proof kit's report.

``selftest.json`` (everything measured, as measured) and ``selftest.md`` (the figures a person
reads, with the card's name and each check's verdict), written side by side into the output folder.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

JSON_NAME, MD_NAME = "selftest.json", "selftest.md"


def _num(value, digits: int = 2, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return f"{value:,.{digits}f}{unit}"


def markdown(report: dict) -> str:
    """The report as Markdown.

    The machine, the checks, then one table of figures per measurement.
    """
    env, fig = report.get("environment", {}), report.get("figures", {})
    card = env.get("card") or "no GPU"
    lines = [
        f"# GPU proof kit: {card} ({report['device']})",
        "",
        f"torch {env.get('torch')}, Python {env.get('python')}, driver {env.get('driver') or '-'}, "
        f"commit {env.get('commit') or '-'}; {_num(report.get('seconds'), 0, ' s')} in all.",
        "",
        "| check | verdict | detail |",
        "|---|---|---|",
    ]
    lines += [f"| {c['name']} | {c['verdict']} | {c['detail']} |" for c in report.get("checks", [])]
    rows = []
    if sb := fig.get("cuda_in_sandbox"):
        inside = sb.get("inside", {})
        rows.append(("CUDA inside the sandbox", f"{inside.get('available')} ({inside.get('name') or '-'})"))
        if "inside_predictor" in sb:
            rows.append(("CUDA inside a predictor's sandbox", str((sb.get("inside_predictor") or {}).get("available"))))
        rows.append(("CUDA on the host", str(sb.get("host_available"))))
    if t6 := fig.get("t6_baseline"):
        rows.append(("T6 baseline score (mse; paper 0.384)", _num(t6.get("score"), 4)))
        rows.append(("T6 run wall time", _num(t6.get("wall_time_s"), 1, " s")))
        rows.append(("T6 official evaluation in the run", _num(t6.get("evaluation_s"), 1, " s")))
    if t1 := fig.get("t1_throughput"):
        rows.append(("T1 steps/s, bare `python`", _num(t1.get("bare", {}).get("steps_per_s"))))
        rows.append(("T1 steps/s, inside `bench run`", _num(t1.get("bench_run", {}).get("steps_per_s"))))
        rows.append(("T1 ratio inside / bare", _num(t1.get("ratio"), 3)))
    if ev := fig.get("evaluation"):
        rows.append(
            (
                "T6 evaluation in-process",
                f"{_num(ev.get('in_process_s'))} s (mse {_num(ev.get('in_process_value'), 4)})",
            )
        )
        rows.append(
            (
                "T6 evaluation, scorer + sandboxed predictors",
                f"{_num(ev.get('scorer_s'))} s (mse {_num(ev.get('scorer_value'), 4)})",
            )
        )
        rows.append(("evaluation ratio scorer / in-process", _num(ev.get("ratio"), 2)))
    if rp := fig.get("replay_epsilon"):
        rows.append(
            (
                "T6 cold replay, max relative difference",
                f"{rp.get('replay_max_relative'):.3g} "
                f"(bitwise {rp.get('bitwise')}; tolerance {(rp.get('tolerance') or {}).get('replay')})",
            )
        )
        rows.append(("T6 batch probe, max relative difference", f"{rp.get('batch_probe_max_relative'):.3g}"))
        rows.append(("suggested `cuda_replay_tolerance` for T6", f"{rp.get('suggested_cuda_replay_tolerance'):.3g}"))
    if gm := fig.get("gpu_metrics"):
        rows.append(("GPU memory peak of the T1 run (NVML)", _num(gm.get("gpu_memory_peak_mb"), 0, " MB")))
        rows.append(("GPU utilisation mean of the T1 run", _num(gm.get("gpu_utilization_mean_percent"), 1, " %")))
        rows.append(("system samples of the T1 run", _num(gm.get("samples"), 0)))
    if left := fig.get("gpu_processes"):
        rows.append(
            (
                "GPU processes left at the end",
                str(len(left.get("processes", []))) if left.get("tool") else "- (no nvidia-smi)",
            )
        )
    if rows:
        lines += ["", "| figure | value |", "|---|---|", *[f"| {k} | {v} |" for k, v in rows]]
    if errors := report.get("errors"):
        lines += ["", "## Errors", ""] + [f"- {k}: `{v}`" for k, v in errors.items()]
    return "\n".join(lines) + "\n"


def write(report: dict, out: Path) -> tuple[Path, Path]:
    """Both files, the JSON first (everything), then the Markdown rendered from it."""
    out.mkdir(parents=True, exist_ok=True)
    js, md = out / JSON_NAME, out / MD_NAME
    js.write_text(json.dumps(report, indent=2, default=str) + "\n")
    md.write_text(markdown(report))
    return js, md
