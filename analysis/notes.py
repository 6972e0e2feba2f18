"""The notes under the tables (and on the report's front page): what a mark in a cell or a row means, and why.

A table is read on its own (a ``.tex`` pasted into a paper, a ``.md`` in a pull request), so every mark that
changes how a number may be read comes with a sentence: superseded cells and entries, runs outside the paper's
protocol (and those left out), the Optuna-tuned row's provenance, partial data, unsandboxed runs, audit flags,
runs whose API budget (``--max-cost``) ran out.
"""

from __future__ import annotations

import re

from analysis import published as pub
from analysis.deviations import MARK, excluded_note
from bench.protocol import PAPER_HARDWARE
from bench.tracking import schema


def table_notes(lb) -> list[str]:
    """Every note that applies to the leaderboard's cells and entries, in the order a reader needs them."""
    notes = superseded_notes(lb)
    if (lb.cells["source"] == pub.PUBLISHED).any():
        notes.append(f"Published rows: the paper's numbers ({pub.PAPER}), Agg recomputed with Eq. 1.")
    notes += calibration_notes(lb)
    if lb.cells["synthetic"].fillna(False).astype(bool).any():
        notes.append("Rows marked [synthetic] are generated runs (benchmarks), not results.")
    notes += nonstandard_notes(lb)
    if note := excluded_note(lb.excluded):
        notes.append(note)
    notes += partial_data_notes(lb)
    notes += unsandboxed_notes(lb)
    notes += audit_notes(lb)
    notes += api_budget_notes(lb.runs.agents if getattr(lb, "runs", None) is not None else None)
    return notes


def superseded_notes(lb) -> list[str]:
    """Whole entries a larger sample of the same agent supersedes (unranked), then single superseded cells."""
    s = lb.summary
    entries = s[s["superseded_by"].fillna("") != ""] if "superseded_by" in s else s.iloc[:0]
    notes = [
        f"{r.entry} [{r.source}] ({r.runs} runs) is superseded by {r.superseded_by}, which has more runs on its "
        "tasks (Section 3.1): listed, not ranked, not bold."
        for r in entries.itertuples()
    ]
    cells = lb.cells[(lb.cells["superseded_by"] != "") & (lb.cells["entry_superseded_by"] == "")]
    notes += [
        f"{r.entry} [{r.source}] on {r.task.upper()} ({r.n_runs} runs) is superseded by {r.superseded_by}."
        for r in cells.itertuples()
    ]
    return notes


def nonstandard_notes(lb) -> list[str]:
    """Cells with runs outside the paper's protocol (marked §): which deviations, in the runs' own words."""
    ns = lb.cells[lb.cells["nonstandard"].eq(True)]
    keys = ["source", "entry", "deviations", "deviation_notes"]  # one note per entry and way of deviating
    grouped = ns.groupby(keys, sort=False)["task"].agg(lambda t: ", ".join(t.str.upper())).reset_index()
    return [
        f"{MARK} {r.entry} [{r.source}] on {r.task} has runs outside the paper's protocol "
        f"({r.deviations.replace(',', ', ')}): {'; '.join(r.deviation_notes.splitlines()) or 'see the runs'}. "
        "Not comparable with the published rows."
        for r in grouped.itertuples()
    ]


def calibration_notes(lb) -> list[str]:
    """Where and how the Optuna-tuned row was tuned, task by task (it is not an agent and not the paper's setup)."""
    cal = lb.cells[lb.cells["source"] == pub.CALIBRATION]
    if cal.empty:
        return []
    return [
        f"{pub.calibration_label(cal)}: the baseline's knobs tuned by Optuna (bench baselines tune), one tuned "
        f"configuration per task, not an agent and not necessarily on the paper's hardware ({PAPER_HARDWARE}): "
        + "; ".join(cal["detail"])
        + "."
    ]


def audit_notes(lb) -> list[str]:
    """Cells with a run the audit flagged (a finding that does not disqualify: a refused request that may be the
    CLI's own, a process that ignored SIGTERM, a late checkpoint): the score stands, a person should look."""
    flagged = lb.cells[lb.cells["flagged"].eq(True)] if "flagged" in lb.cells else lb.cells.iloc[:0]
    return [
        f"{r.entry} [{r.source}] on {r.task.upper()} has runs with flagged audit findings "
        f"({schema.AUDIT_FLAGGED}): read their {schema.AUDIT_ARTIFACT} before trusting the score."
        for r in flagged.itertuples()
    ]


def unsandboxed_notes(lb) -> list[str]:
    """Cells with a run made without the sandbox (``bench run --unsandboxed``): its agent could have set its own
    score, so the cell is not a trustworthy result."""
    flagged = lb.cells[lb.cells["unsandboxed"].eq(True)] if "unsandboxed" in lb.cells else lb.cells.iloc[:0]
    return [
        f"{r.entry} [{r.source}] on {r.task.upper()} has runs made WITHOUT the sandbox ({schema.SANDBOXED}=false): "
        "the agent could reach the harness's files, so its score is not a trustworthy result."
        for r in flagged.itertuples()
    ]


def partial_data_notes(lb) -> list[str]:
    """Cells scored on incomplete data (a mirror subset, missing weights): not comparable with the paper."""
    partial = lb.cells[lb.cells["partial_data"].eq(True)]
    return [
        f"{r.entry} [{r.source}] on {r.task.upper()} ran on PARTIAL data (see the runs' {schema.PARTIAL_NOTES}): "
        "not comparable with the paper's numbers."
        for r in partial.itertuples()
    ]


def tag_notes(agents) -> list[str]:
    """One line per run that carries labels of its own (``bench run --tag``, a campaign's ``tags``), naming it."""
    if agents.empty or "tags" not in agents:
        return []
    out = []
    for r in agents[agents["tags"].map(bool)].sort_values(["experiment", "task", "agent", "repeat"]).itertuples():
        labels = ", ".join(f"{k}={v}" for k, v in sorted(r.tags.items()))
        out.append(f"Tags of {r.task.upper()} {r.agent} r{r.repeat:g} ({r.experiment}): {labels}.")
    return out


def task_pack_notes(agents) -> list[str]:
    """One line per task that came from a pack (bench.tasks.packs), naming the pack, its version and the task
    folder's sha256 with its number of runs: a result names exactly what was run, and runs of one task id on two
    different folder contents are seen as such (a hash per content)."""
    if agents.empty or "task_source" not in agents:
        return []
    packed = agents[agents["task_source"].isin(["path", "entry-point"])]
    out = []
    for (task, pack, version, sha), runs in packed.groupby(
        ["task", "task_pack", "task_pack_version", "task_sha256"], sort=True
    ):
        label = f"{pack} {version}".strip()
        out.append(f"{task.upper()} is from the task pack {label} (task folder sha256 {sha}): {len(runs)} run(s).")
    for task, versions in packed.groupby("task")["task_sha256"].nunique().items():
        if versions > 1:
            out.append(f"{task.upper()}: its runs used {versions} different task folder contents (hashes above).")
    return out


# bench.gateway.metering.budget_tag's "$CAP: spent at M min: later requests refused ($USED used)"
_SPENT = re.compile(r"^\$(?P<cap>[^:\s]+): spent(?: at (?P<min>[\d.]+) min)?:.*\((?P<used>[^()]*) used\)\s*$")


def api_budget_notes(agents) -> list[str]:
    """One line per agent run whose API budget (``--max-cost``) ran out (its ``bench.api_budget`` tag): its later
    LLM requests were refused, so its score is what that budget bought, not what the agent could do in its time."""
    if agents is None or agents.empty or "api_budget" not in agents:
        return []
    out = []
    for r in agents.sort_values(["task", "agent", "repeat"]).itertuples():
        if not (m := _SPENT.match(str(r.api_budget or ""))):
            continue
        when = f" at {float(m['min']):g} min" if m["min"] else ""
        model = getattr(r, "model", "")
        label = f"{r.agent} ({model})" if isinstance(model, str) and model else r.agent
        out.append(
            f"{label} on {r.task.upper()} r{r.repeat}: API budget of ${m['cap']} reached{when} ({m['used']} used); "
            "its later LLM requests were refused."
        )
    return out
