"""Rule 9 from the scorer's side.

A score that carries its labels, and a score outside what the task allows.

- **Targets found** (disqualify): the scorer found the evaluation's own targets in a candidate's
  checkpoint or in the scripts staged with it (:mod:`bench.scoring.leakage`; the scan's result is
  the official result's ``label_scan``). A model that looks the answers up is not scored on what it
  learned.
- **Test far better than validation** (flag): on a task scored on another split than validation, the
  candidate's test error (the metric for ``min``, 1 - metric for ``max``) is below
  ``test_val_error_ratio`` times its validation error as the harness measured it (the scorer's
  ``val_value``, never the self-report). The ratio is task.toml's ``[scoring]``, set well below what
  the task's honest and tuned baselines show.
- **Better than the published reference** (flag): a scored candidate better than task.toml's
  ``reference_score`` by more than ``[scoring] reference_margin`` (in the metric's units).
- **The scan could not look** (flag): the scorer's scan failed, so nothing is known either way.

A flag is evidence for a person to read, not a disqualification: a better model is possible, a
lookup is not. ``bench verify`` re-runs the scorer and this audit, so it recomputes all of them;
:func:`score_findings` picks them out of an audit (verify exits 1 when it returns any).
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

from bench.errors import InputError
from bench.result import FLAG, Audit, Violation
from bench.rules.context import Context, finding

CARRIED = "carries the evaluation's targets"
GAP = "test error is far below its validation error"
REFERENCE = "better than the task's published reference"
UNSCANNED = "the scan for the evaluation's targets failed"
MARKS = (CARRIED, GAP, REFERENCE, UNSCANNED)


def score_findings(audited: Audit | list[Violation] | tuple[Violation, ...]) -> list[Violation]:
    """The findings of this module in an audit (``bench verify`` exits 1 when there is any)."""
    found = audited.violations if isinstance(audited, Audit) else audited
    return [v for v in found if any(mark in v.reason for mark in MARKS)]


def bounds(task_dir: Path | None) -> dict:
    """task.toml's numbers these checks read.

    ``direction``, ``eval_split``, ``reference_score`` and the ``[scoring]`` margins
    (``test_val_error_ratio``, ``reference_margin``); empty without a task folder.
    """
    if task_dir is None:
        return {}
    with open(Path(task_dir) / "task.toml", "rb") as f:
        toml = tomllib.load(f)
    scoring = toml.get("scoring") if isinstance(toml.get("scoring"), dict) else {}
    out = {k: toml.get(k) for k in ("direction", "eval_split", "reference_score")}
    out.update({k: scoring.get(k) for k in ("test_val_error_ratio", "reference_margin")})
    for key in ("test_val_error_ratio", "reference_margin"):
        if out[key] is not None and not (isinstance(out[key], int | float) and 0 <= out[key]):
            raise InputError(f"task.toml's [scoring] {key} must be a number >= 0, not {out[key]!r}")
    return out


def _distinct(ctx: Context):
    seen: set[str] = set()
    for e in ctx.evaluations:
        if e.path not in seen:
            seen.add(e.path)
            yield e


def targets_carried(ctx: Context) -> list[Violation]:
    """Disqualify a candidate whose checkpoint or scripts hold the evaluation's targets.

    Flag a failed scan.
    """
    out = []
    for e in _distinct(ctx):
        scan = e.official.raw.get("label_scan")
        if not isinstance(scan, dict):
            continue
        name = Path(e.path).name
        if scan.get("error"):
            out.append(finding(9, f"{name}: {UNSCANNED}: {scan['error']}", [f"eval of {e.path}"], FLAG))
        hits = [h for h in scan.get("found") or [] if isinstance(h, dict)]
        if hits:
            lines = [_describe(h) for h in hits]
            why = f"{name} {CARRIED}: {lines[0]}" + (f" (and {len(lines) - 1} more)" if len(lines) > 1 else "")
            out.append(finding(9, why, [f"eval of {e.path}", *lines]))
    return out


def _describe(hit: dict) -> str:
    return (
        f"{hit.get('where')}: {hit.get('windows')} of {hit.get('of')} windows of the targets as "
        f"{hit.get('encoding')} ({hit.get('order')})"
    )


def _error(value: float, direction: str) -> float:
    return value if direction == "min" else 1.0 - value


def score_plausible(ctx: Context) -> list[Violation]:
    """Flag a test error far below the validation error, and a score far better than the reference.

    The validation error is the candidate's as the harness measured it; "far better" is by more
    than the task's margin. Each finding gives both numbers.
    """
    b = bounds(ctx.task_dir)
    if not b:
        return []
    direction, out = b.get("direction") or "min", []
    ratio = b.get("test_val_error_ratio")
    best = next((e for e in ctx.evaluations if e.candidate == "best" and e.official.ok), None)
    if best is not None and ratio is not None and b.get("eval_split") != "val":
        test, val = best.official.value, best.official.raw.get("val_value")
        if isinstance(val, int | float) and math.isfinite(val) and test is not None:
            err_test, err_val = _error(test, direction), _error(val, direction)
            if err_val > 0 and err_test < ratio * err_val:
                why = (
                    f"{Path(best.path).name}'s {GAP}: test {test:.4g} against the harness's validation {val:.4g} "
                    f"(error ratio {err_test / err_val:.3f} < {ratio} of task.toml's [scoring] test_val_error_ratio)"
                )
                out.append(finding(9, why, [f"eval of {best.path}", f"test {test!r}", f"harness val {val!r}"], FLAG))
    ref, margin = b.get("reference_score"), b.get("reference_margin")
    if ref is not None and margin is not None:
        better = []
        for e in _distinct(ctx):
            v = e.official.value
            if e.official.ok and v is not None and (v < ref - margin if direction == "min" else v > ref + margin):
                better.append(f"{Path(e.path).name} ({e.candidate}): {v:.4g}")
        if better:
            why = (
                f"{better[0]} is {REFERENCE} ({ref}) by more than task.toml's [scoring] reference_margin ({margin})"
                + (f"; {len(better) - 1} more candidate(s)" if len(better) > 1 else "")
            )
            out.append(finding(9, why, [*better, f"reference_score {ref}", f"reference_margin {margin}"], FLAG))
    return out


CHECKS = [targets_carried, score_plausible]
