"""Runs outside the paper's protocol: read or derived per run, marked in every view, left out of paper comparisons.

The paper's rows are comparable because every run had one A100 80 GB, the task's own budget, the sandbox and the
full data (§3.4, Appendix B). A run made otherwise (``make demo``'s 8-minute CPU T1 run, a pilot, a partial
mirror) is useful for its own campaign but must not sit unmarked beside the published rows, and by default must
not be compared with them at all: :func:`split` takes such runs out when published rows are included
(``bench report --published``; ``--include-nonstandard`` keeps them, marked).

What counts as a deviation is decided once, by :func:`bench.protocol.deviations`. Runs recorded since the
harness tags the protocol carry the verdict (:data:`bench.tracking.schema.PROTOCOL`, ``DEVIATIONS``,
``DEVIATION_NOTES``); older runs are judged here by the same function from what they do carry: the
``budget_minutes`` param against the task's budget (the task registry over the paper's Table 2), the ``device``
param (``cpu``: a hardware deviation; ``cuda`` on an unrecorded GPU is given the benefit of the doubt, as the
run cannot say which GPU it had), ``bench.sandboxed=false`` and ``bench.partial_data=true``.
"""

from __future__ import annotations

import pandas as pd

from bench import protocol
from bench.tracking import schema

MARK = "§"  # after a cell, a row label, a legend entry: "this has runs outside the paper's protocol"
KINDS = protocol.KINDS


def join_kinds(values) -> str:
    """The deviation kinds found in comma-joined strings, once each, in :data:`bench.protocol.KINDS` order."""
    found = {k for v in values if isinstance(v, str) for k in v.split(",") if k}
    return ",".join([k for k in KINDS if k in found] + sorted(found - set(KINDS)))


def join_notes(values) -> str:
    """The distinct deviation notes of several runs, one per line, in first-seen order."""
    lines = (line for v in values if isinstance(v, str) for line in v.splitlines() if line.strip())
    return "\n".join(dict.fromkeys(lines))


def _task_budget_minutes() -> pd.Series:
    """Each task's own budget in minutes: the installed ``task.toml`` over the paper's Table 2."""
    from analysis import published as pub  # lazily: published is not needed to read runs that carry the tags

    return pub.tasks(registry=True)["budget_min"].astype(float)


def derive(
    task: pd.Series, budget_min: pd.Series, device: pd.Series, unsandboxed: pd.Series, partial: pd.Series
) -> pd.DataFrame:
    """Deviations of runs recorded before the protocol tags, from their params and tags (same index as the inputs).

    Returns ``deviations`` (kinds, comma-joined) and ``deviation_notes`` (one sentence per deviation), both through
    :func:`bench.protocol.deviations`. A missing budget or an unknown task's budget is no budget deviation, a
    missing device no hardware deviation: only what a run records can be held against it."""
    task_budget = task.map(_task_budget_minutes()).astype(float)
    own = budget_min.astype(float)
    frame = pd.DataFrame(
        {
            "budget_s": 60.0 * own.fillna(task_budget),
            "task_budget_s": 60.0 * task_budget.fillna(own),
            "hardware": device.fillna("").astype(str).str.lower().eq("cpu").map({True: "cpu", False: ""}),
            "sandboxed": ~unsandboxed.astype(bool),
            "partial_data": partial.astype(bool),
        },
        index=task.index,
    )
    frame["budget_s"] = frame["budget_s"].fillna(0.0)
    frame["task_budget_s"] = frame["task_budget_s"].fillna(frame["budget_s"])
    frame["hardware"] = frame["hardware"].replace("", protocol.PAPER_HARDWARE)  # not recorded: not held against it
    found = frame.apply(lambda r: protocol.deviations(**r.to_dict()), axis=1)  # the one rule, per run
    return pd.DataFrame(
        {
            "deviations": found.map(lambda ds: ",".join(d.kind for d in ds)),
            "deviation_notes": found.map(lambda ds: "\n".join(str(d) for d in ds)),
        },
        index=task.index,
    )


def protocol_columns(tags: dict[str, pd.Series], params: dict[str, pd.Series], agents: pd.DataFrame) -> pd.DataFrame:
    """``nonstandard``, ``deviations``, ``deviation_notes`` and ``hardware`` of agent runs (see the module doc).

    ``tags``/``params``: the raw tag and param columns by schema name ("" / NaN where a run lacks one);
    ``agents``: the runs' ``task``, ``budget_min``, ``unsandboxed`` and ``partial_data`` columns."""
    tagged = tags[schema.PROTOCOL].isin([schema.PROTOCOL_STANDARD, schema.PROTOCOL_NONSTANDARD])
    out = pd.DataFrame(
        {
            "deviations": tags[schema.DEVIATIONS].where(tagged, ""),
            "deviation_notes": tags[schema.DEVIATION_NOTES].where(tagged, ""),
            "hardware": tags[schema.HARDWARE].where(tags[schema.HARDWARE] != "", params[schema.PARAM_DEVICE]),
        },
        index=agents.index,
    )
    old = agents.loc[~tagged]
    if not old.empty:
        derived = derive(
            old["task"], old["budget_min"], params[schema.PARAM_DEVICE][~tagged], old["unsandboxed"],
            old["partial_data"],
        )  # fmt: skip
        out.loc[~tagged, ["deviations", "deviation_notes"]] = derived[["deviations", "deviation_notes"]]
    nonstandard = tags[schema.PROTOCOL].eq(schema.PROTOCOL_NONSTANDARD) | (~tagged & out["deviations"].ne(""))
    out["nonstandard"] = nonstandard.astype(bool)
    out["hardware"] = out["hardware"].fillna("").astype(str)
    return out[["nonstandard", "deviations", "deviation_notes", "hardware"]]


def flags(agents: pd.DataFrame) -> pd.Series:
    """Each run's non-standard flag (False for frames built without the column: a hand-made frame is standard)."""
    if "nonstandard" not in agents:
        return pd.Series(False, index=agents.index)
    return agents["nonstandard"].eq(True)


def excluded_note(excluded: pd.DataFrame) -> str:
    """One sentence saying how many non-standard runs a comparison with the paper left out, and why."""
    if excluded.empty:
        return ""
    kinds = join_kinds(excluded["deviations"]).replace(",", ", ") or "unknown"
    entries = ", ".join(sorted({f"{e} [{x}]" for e, x in zip(excluded["entry"], excluded["experiment"], strict=True)}))
    return (
        f"{len(excluded)} non-standard run(s) ({kinds}) left out of the comparison with the published rows: "
        f"{entries}. They ran outside the paper's protocol; --include-nonstandard (include_nonstandard=True) "
        "shows them, marked."
    )
