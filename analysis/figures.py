"""The paper's Figure 3, a budget-utilisation figure, and the views beyond the paper, as matplotlib Figures.

Figures are built with :class:`matplotlib.figure.Figure` directly (no pyplot state), so the report
renders headless with any backend and a notebook can display them inline. Each ``*_data`` function
returns the numbers a figure draws, which the report also writes as CSV.
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pandas as pd
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from analysis import published as pub
from analysis.deviations import MARK
from analysis.leaderboard import AGENT, Leaderboard
from analysis.stats import pearson
from bench.tasks.direction import Direction

EXIT_COLORS = {"FINISHED": "#4c9a2a", "FAILED": "#d62728", "KILLED": "#ff7f0e"}
# Figure 3's groups are harnesses, labelled as in the paper: the vendors' CLIs vs the OpenCode cluster
HARNESS_STYLE = {
    pub.PROPRIETARY_HARNESS: ("#1f77b4", "o"),
    pub.OPENCODE_HARNESS: ("#ff7f0e", "s"),
    pub.OTHER_HARNESS: ("#7f7f7f", "D"),
}


def entry_colors(names) -> dict[str, tuple]:
    """A stable colour per entry name (tab10, then tab20)."""
    from matplotlib import colormaps

    names = sorted(set(names), key=str)
    cmap = colormaps["tab10" if len(names) <= 10 else "tab20"]
    return {n: cmap(i % cmap.N) for i, n in enumerate(names)}


def _style(row) -> tuple[str, str, str]:
    """(legend group, colour, marker) of a leaderboard entry in scatter plots: published rows by harness, with
    the paper's legend ("proprietary", "OpenCode"); new rows by where they come from (their MLflow experiment)."""
    if row.source == pub.PUBLISHED:
        harness = row.harness if row.harness in HARNESS_STYLE else pub.OTHER_HARNESS
        color, marker = HARNESS_STYLE[harness]
        return harness, color, marker
    return f"{row.group}", "#2ca02c", "^"


def _label(entry: str, nonstandard: bool, superseded: str = "") -> str:
    """An entry's name in a figure, with the tables' marks (§: runs outside the protocol; superseded)."""
    return entry + (f" {MARK}" if nonstandard else "") + (" (superseded)" if superseded else "")


def deviation_note(rows: pd.DataFrame) -> str:
    """The figure's note on the entries it marks with §: which deviations each has ("" when none)."""
    if rows.empty or "nonstandard" not in rows:
        return ""
    ns = rows[rows["nonstandard"].eq(True)].drop_duplicates(["source", "entry"])
    items = [f"{r.entry} [{r.source}]: {r.deviations.replace(',', ', ')}" for r in ns.itertuples()]
    return f"{MARK} outside the paper's protocol: " + "; ".join(items) if items else ""


def note_title(fig: Figure, note: str, fontsize: float = 8) -> None:
    """``note`` as the figure's title, wrapped to the figure's width: a long note (many marked entries) on one line
    runs past both edges of a narrow figure, and the constrained layout does not wrap a title."""
    chars = max(int(fig.get_figwidth() * 72 / (fontsize * 0.62)), 20)  # DejaVu Sans averages ~0.55 em a character
    fig.suptitle(textwrap.fill(note, chars, break_on_hyphens=False), fontsize=fontsize)


# --- Figure 3 ---------------------------------------------------------------------------------
def figure3_data(lb: Leaderboard) -> tuple[pd.DataFrame, dict]:
    """Points (mean scripts per task, Agg) of every agent entry, and the least-squares fit with Pearson r."""
    s = lb.summary[(lb.summary["kind"] == AGENT) & lb.summary["agg"].notna() & lb.summary["mean_scripts"].notna()]
    cols = ["source", "entry", "group", "family", "harness", "mean_scripts", "agg", "agg_tasks", "of_tasks", "complete"]
    points = s[cols + ["superseded_by", "nonstandard", "deviations"]].reset_index(drop=True)
    points["fitted"] = points["complete"] & points["superseded_by"].eq("")  # one point per agent in the fit
    full = points[points["fitted"]]  # an Agg over fewer tasks is not comparable, a superseded one is replaced
    fit = {"n": len(full), "slope": np.nan, "intercept": np.nan, "r": np.nan, "p": np.nan}
    if len(full) >= 3 and full["mean_scripts"].nunique() > 1:
        slope, intercept = np.polyfit(full["mean_scripts"], full["agg"], 1)
        r, p = pearson(full["mean_scripts"], full["agg"])
        fit.update(slope=float(slope), intercept=float(intercept), r=float(r), p=float(p))
    return points, fit


def _coinciding_labels(points: pd.DataFrame) -> dict[tuple[float, float], list[str]]:
    """Figure 3's labels by spot: entries whose points fall within 2 % of the x range and 4 % of the y range of
    each other (the same Agg and scripts, e.g. one agent in two campaigns) share one spot and are listed there one
    under the other, instead of printing over each other."""
    spans = [max(float(np.ptp(points[c])) if len(points) else 0.0, 1e-9) for c in ("mean_scripts", "agg")]
    spots: dict[tuple[float, float], list[str]] = {}
    for row in points.sort_values(["agg", "mean_scripts"], ascending=False).itertuples():
        label = _label(row.entry, row.nonstandard, row.superseded_by)
        label += "" if row.complete else f" ({row.agg_tasks}/{row.of_tasks})"
        near = next(
            (
                spot
                for spot in spots
                if abs(spot[0] - row.mean_scripts) <= 0.02 * spans[0] and abs(spot[1] - row.agg) <= 0.04 * spans[1]
            ),
            None,
        )
        spots.setdefault(near or (row.mean_scripts, row.agg), []).append(label)
    return spots


def figure3(lb: Leaderboard) -> Figure:
    """Mean training scripts per task vs. Agg, labelled points, dashed fitted line, Pearson r (paper Fig. 3)."""
    points, fit = figure3_data(lb)
    fig = Figure(figsize=(6.4, 4.4), layout="constrained")
    ax = fig.add_subplot()
    seen = set()
    for row in points.itertuples():
        group, color, marker = _style(row)
        if not row.complete:
            group += " (not all tasks: not fitted)"
        elif not row.fitted:
            group += " (superseded: not fitted)"
        ax.scatter(
            row.mean_scripts,
            row.agg,
            s=60,
            color=color if row.fitted else "white",
            marker=marker,
            edgecolor=color if not row.fitted else "black",
            linewidth=0.5 if row.fitted else 1.5,
            zorder=3,
            label=None if group in seen else group,
        )
        seen.add(group)
    for (x, y), labels in _coinciding_labels(points).items():  # one block of lines per spot: no overprinting
        ax.annotate("\n".join(labels), (x, y), xytext=(5, 4), textcoords="offset points", fontsize=8, va="bottom")
    titles = [] if np.isfinite(fit["slope"]) else [f"no fit: {fit['n']} entries with all tasks (a line needs 3)"]
    if np.isfinite(fit["slope"]):
        xs = np.linspace(points["mean_scripts"].min() - 0.5, points["mean_scripts"].max() + 0.5, 50)
        ax.plot(
            xs,
            fit["slope"] * xs + fit["intercept"],
            "k--",
            lw=1,
            zorder=2,
            label=f"fit: {fit['slope']:+.4f} Agg/script, Pearson r = {fit['r']:+.2f} (p = {fit['p']:.2f}, "
            f"n = {fit['n']})",
        )
    if note := deviation_note(points):
        titles.append(note)
    if titles:
        ax.set_title("\n".join(titles), fontsize=8, wrap=True)
    ax.margins(x=0.12, y=0.1)  # room for the labels of the outermost points
    ax.set_xlabel("Mean training scripts per task")
    ax.set_ylabel("1GC-7RC Agg score")
    ax.grid(alpha=0.3)
    if points.size:
        ax.legend(fontsize=8, loc="best")
    return fig


# --- budget utilisation -----------------------------------------------------------------------
def utilisation_figure(lb: Leaderboard) -> Figure:
    """Per task, the share of the budget each entry used (bars: mean; dots: single runs when known)."""
    c = lb.cells[(lb.cells["kind"] == AGENT) & lb.cells["utilisation"].notna()]
    entries = list(dict.fromkeys(zip(c["source"], c["entry"], strict=True)))
    tasks = [t for t in lb.tasks.index if t in set(c["task"])]
    fig = Figure(figsize=(max(6.0, 1.1 * len(tasks) + 3), 4.0), layout="constrained")
    ax = fig.add_subplot()
    colors = entry_colors(f"{e} [{s}]" for s, e in entries)
    width = 0.8 / max(1, len(entries))
    runs = lb.runs.agents if lb.runs is not None else pd.DataFrame(columns=["experiment", "entry", "task"])
    for i, (source, entry) in enumerate(entries):
        mine = c[(c["source"] == source) & (c["entry"] == entry)].set_index("task")
        xs = np.arange(len(tasks)) + (i - (len(entries) - 1) / 2) * width
        ys = [100 * mine.loc[t, "utilisation"] if t in mine.index else np.nan for t in tasks]
        name = f"{entry} [{source}]"
        label = _label(name, mine["nonstandard"].any())
        ax.bar(xs, ys, width, color=colors[name], label=label, alpha=0.85)
        for x, t in zip(xs, tasks, strict=True):
            pts = runs[(runs["experiment"] == source) & (runs["entry"] == entry) & (runs["task"] == t)]
            if len(pts) > 1:
                jitter = np.linspace(-width / 4, width / 4, len(pts))
                ax.scatter(x + jitter, 100 * pts["budget_utilisation"], s=8, color="black", zorder=3)
    ax.axhline(100, color="grey", lw=0.8, ls=":")
    ax.set_xticks(
        range(len(tasks)), [f"{lb.tasks.loc[t, 'label']}\n{lb.tasks.loc[t, 'title']}" for t in tasks], fontsize=7
    )
    ax.set_ylabel("budget used (%)")
    ax.set_ylim(0, 110)
    title = "Wall-clock budget utilisation per task (bars: mean over runs; dots: single runs)"
    ax.set_title("\n".join(filter(None, [title, deviation_note(c)])), fontsize=9, wrap=True)
    if entries:
        ax.legend(fontsize=7, ncol=min(4, len(entries)), loc="upper left", bbox_to_anchor=(0, -0.18))
    return fig


# --- anytime curves ---------------------------------------------------------------------------
def _grid(n: int, ncols: int = 4) -> tuple[int, int]:
    cols = min(max(n, 1), ncols)
    return math.ceil(max(n, 1) / cols), cols


def _steps(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The vertices of a steps-post line through (x, y): hold each value until the next x."""
    xs = np.repeat(x, 2)[1:]
    ys = np.repeat(y, 2)[:-1]
    return np.column_stack([xs, ys])


def anytime_figure(lb: Leaderboard, curves: pd.DataFrame) -> Figure:
    """Score vs minutes into the budget, one panel per task: official (solid steps) and self-reported (dotted).

    The two are different measurements (the official score on the task's eval split, the scripts' own validation
    score), so each has its axis: official on the left, self-reported on the right, each labelled. One
    LineCollection per panel and curve kind (not one artist per run), so 245 runs draw in well under a second.
    """
    tasks = [t for t in lb.tasks.index if t in set(curves["task"])]
    nrows, ncols = _grid(len(tasks))
    fig = Figure(figsize=(max(4.0 * ncols, 8.0), 3.2 * nrows + 0.9), layout="constrained")
    colors = entry_colors(curves["entry"])
    budgets = lb.runs.agents.groupby("task")["budget_min"].max() if lb.runs is not None else pd.Series(dtype=float)
    for k, task in enumerate(tasks):
        ax = fig.add_subplot(nrows, ncols, k + 1)
        t = lb.tasks.loc[task]
        mine = curves[curves["task"] == task]
        arrow = Direction.of(bool(t["higher_is_better"])).arrow
        for kind, width, style, alpha in (("official", 1.4, "solid", 0.8), ("self-reported", 0.9, "dotted", 0.6)):
            part = mine[mine["curve"] == kind]
            segments, seg_colors = [], []
            for _, g in part.groupby("run_id", sort=False):
                segments.append(_steps(g["minute"].to_numpy(float), g["score"].to_numpy(float)))
                seg_colors.append(colors[g["entry"].iloc[0]])
            if segments and kind == "self-reported":  # the scripts' validation score: an axis of its own
                vax = ax.twinx()
                vax.add_collection(
                    LineCollection(segments, colors=seg_colors, linewidths=width, linestyles=style, alpha=alpha)
                )
                vlo, vhi = part["score"].min(), part["score"].max()
                vspan = max(vhi - vlo, 1e-9)
                vax.set_ylim(vlo - 0.08 * vspan, vhi + 0.08 * vspan)
                vax.set_ylabel(f"{arrow} self-reported validation (dotted)", fontsize=7)
                vax.tick_params(labelsize=7)
            elif segments:
                ax.add_collection(
                    LineCollection(segments, colors=seg_colors, linewidths=width, linestyles=style, alpha=alpha)
                )
            if kind == "official" and not part.empty:  # the evaluated window checkpoints (not the held end point)
                pts = part[part.duplicated("run_id", keep="last")]
                ax.scatter(pts["minute"], pts["score"], s=8, c=[colors[e] for e in pts["entry"]], zorder=3)
        official = mine.loc[mine["curve"] == "official", "score"]
        lo, hi = (official.min(), official.max()) if not official.empty else (mine["score"].min(), mine["score"].max())
        span = max(hi - lo, 1e-9)
        if lo - 0.5 * span <= t["baseline"] <= hi + 0.5 * span:
            ax.axhline(t["baseline"], color="grey", ls="--", lw=0.8)
            note = ""
        else:
            note = f" (baseline {t['baseline']:g} off scale)"
        budget = budgets.get(task, np.nan)
        right = budget if np.isfinite(budget) else mine["minute"].max()
        if np.isfinite(budget):
            ax.axvline(budget, color="black", lw=0.6, ls="-.")
        ax.set_xlim(0, right * 1.02 if np.isfinite(right) and right > 0 else 1)
        ax.set_ylim(lo - 0.08 * span, hi + 0.08 * span)
        ax.set_title(f"{t['label']} {t['title']}{note}", fontsize=9)
        ax.set_xlabel("minutes into the budget", fontsize=8)
        ax.set_ylabel(f"{arrow} official {pub.metric_label(t['metric'])} (solid)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    marked = _marked_runs(lb)
    ns_entries = set(lb.runs.agents.loc[lb.runs.agents["run_id"].isin(marked), "entry"]) if marked else set()
    handles = [Line2D([], [], color=c, lw=2, label=_label(e, e in ns_entries)) for e, c in colors.items()]
    handles += [
        Line2D([], [], color="black", lw=1.4, marker="o", ms=3, label="official (best-by-val window checkpoint)"),
        Line2D([], [], color="black", lw=0.9, ls=":", label="self-reported validation (best so far; right axis)"),
        Line2D([], [], color="grey", lw=0.8, ls="--", label="task baseline"),
        Line2D([], [], color="black", lw=0.6, ls="-.", label="budget"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=min(3, len(handles)), fontsize=7)
    if note := deviation_note(lb.cells[lb.cells["task"].isin(tasks)]):
        note_title(fig, note)
    return fig


def _marked_runs(lb: Leaderboard) -> set[str]:
    """The agent runs outside the paper's protocol (their curves, bars and rows carry §)."""
    if lb.runs is None or lb.runs.agents.empty or "nonstandard" not in lb.runs.agents:
        return set()
    a = lb.runs.agents
    return set(a.loc[a["nonstandard"].eq(True), "run_id"])


# --- timelines --------------------------------------------------------------------------------
def timeline_figure(lb: Leaderboard, tl: pd.DataFrame, max_runs_per_task: int = 40) -> Figure:
    """Each run a row, each script a bar from launch to end (lanes when parallel), by exit status.

    All bars of a panel are one PolyCollection and all end ticks one LineCollection: thousands of scripts
    render in a fraction of a second.
    """
    tasks = [t for t in lb.tasks.index if t in set(tl["task"])]
    nrows, ncols = _grid(len(tasks), 4 if len(tasks) > 4 else 2)
    rows_max = int(tl.groupby("task")["parent_run_id"].nunique().clip(upper=max_runs_per_task).max()) if len(tl) else 1
    fig = Figure(figsize=(5.0 * ncols, (0.16 * max(rows_max, 3) + 1.2) * nrows + 0.5), layout="constrained")
    marked = _marked_runs(lb)
    for k, task in enumerate(tasks):
        ax = fig.add_subplot(nrows, ncols, k + 1)
        mine = tl[tl["task"] == task]
        order = mine.drop_duplicates("parent_run_id").sort_values(["entry", "experiment", "repeat"])
        order = order.head(max_runs_per_task).reset_index(drop=True)
        row_of = pd.Series(order.index, index=order["parent_run_id"])
        bars = mine[mine["parent_run_id"].isin(row_of.index)]
        y = bars["parent_run_id"].map(row_of).to_numpy(float)
        h = 0.8 / bars["lanes"].to_numpy(float)
        y0 = y - 0.4 + bars["lane"].to_numpy(float) * h
        x0 = bars["start_min"].to_numpy(float)
        x1 = np.maximum(bars["end_min"].to_numpy(float), x0 + 0.05)
        verts = np.stack(
            [
                np.column_stack([x0, y0]),
                np.column_stack([x0, y0 + 0.92 * h]),
                np.column_stack([x1, y0 + 0.92 * h]),
                np.column_stack([x1, y0]),
            ],
            axis=1,
        )
        ax.add_collection(
            PolyCollection(
                verts, facecolors=[EXIT_COLORS.get(e, "#7f7f7f") for e in bars["exit"]], edgecolors="none", alpha=0.85
            )
        )
        ends = order["agent_end_min"].to_numpy(float)
        ax.add_collection(
            LineCollection([[(e, i - 0.45), (e, i + 0.45)] for i, e in enumerate(ends)], colors="black", linewidths=1)
        )
        budget = mine["budget_min"].max()
        right = np.nanmax([budget, np.nanmax(x1) if len(x1) else 0, np.nanmax(ends) if len(ends) else 0])
        if np.isfinite(budget):
            ax.axvline(budget, color="black", ls="-.", lw=0.7)
        ax.set_xlim(-0.01 * right, right * 1.02 if right > 0 else 1)
        ax.set_ylim(len(order) - 0.5, -0.5)
        ns = order["parent_run_id"].isin(marked)
        if len(order) <= 15:
            labels = [_label(f"{r.entry} r{r.repeat}", n) for r, n in zip(order.itertuples(), ns, strict=True)]
            ax.set_yticks(range(len(order)), labels, fontsize=6)
        else:  # one label per entry (text is what costs: hundreds of tick labels take seconds to lay out)
            first = order.groupby("entry", sort=False).apply(
                lambda g: (g.index.min(), g.index.max()), include_groups=False
            )
            marked_entries = set(order.loc[ns, "entry"])
            names = [_label(e, e in marked_entries) for e in first.index]
            ax.set_yticks([(a + b) / 2 for a, b in first], names, fontsize=6)
            for a, _ in list(first)[1:]:
                ax.axhline(a - 0.5, color="grey", lw=0.5)
        t = lb.tasks.loc[task]
        more = mine["parent_run_id"].nunique() - len(order)
        ax.set_title(
            f"{t['label']} {t['title']}" + (f" (first {len(order)} runs, {more} more)" if more > 0 else ""), fontsize=9
        )
        ax.set_xlabel("minutes into the budget", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(axis="x", alpha=0.3)
    handles = [Patch(color=c, label=f"script {k.lower()}") for k, c in EXIT_COLORS.items()]
    handles += [
        Line2D([], [], color="black", lw=1, label="agent ended"),
        Line2D([], [], color="black", lw=0.7, ls="-.", label="budget"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=7)
    if note := deviation_note(lb.cells[lb.cells["task"].isin(tasks)]):
        note_title(fig, note)
    return fig


# --- uncertainty ------------------------------------------------------------------------------
def intervals_figure(intervals: pd.DataFrame) -> Figure:
    """Agg per entry with its bootstrap 95 % interval (filled: resampled runs; open: parametric)."""
    d = intervals.sort_values("agg").reset_index(drop=True)
    fig = Figure(figsize=(6.4, 0.35 * len(d) + 1.4), layout="constrained")
    ax = fig.add_subplot()
    for y, r in enumerate(d.itertuples()):
        filled = r.method == "runs"
        bounded = pd.notna(r.lo) and pd.notna(r.hi)  # no interval for an entry with a single run on some task
        ax.errorbar(
            r.agg,
            y,
            xerr=[[max(0.0, r.agg - r.lo)], [max(0.0, r.hi - r.agg)]] if bounded else None,  # float noise: >= 0
            fmt="o",
            color="#1f77b4",
            capsize=3,
            mfc="#1f77b4" if filled else "white",
        )
    for col, default in (("nonstandard", False), ("superseded_by", ""), ("deviations", "")):
        d[col] = d[col].fillna(default) if col in d else default  # frames from older callers lack the marks
    labels = [_label(f"{r.entry} [{r.source}]", r.nonstandard, r.superseded_by)
              + (f" ({r.tasks}/{r.of_tasks} tasks)" if r.tasks < r.of_tasks else "")
              + ("" if pd.notna(r.lo) else " (n = 1: no interval)") for r in d.itertuples()]  # fmt: skip
    ax.set_yticks(range(len(d)), labels, fontsize=7)
    ax.axvline(0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("Agg (Eq. 1) with bootstrap 95 % interval")
    ax.grid(axis="x", alpha=0.3)
    title = "filled: runs resampled; open: parametric from published mean, std, n"
    ax.set_title("\n".join(filter(None, [title, deviation_note(d)])), fontsize=8, wrap=True)
    return fig


def paired_figure(comparison: dict) -> Figure:
    """Per task Eq. 1 difference of two entries (positive: the first is better), and the Agg difference with CI."""
    d, o = comparison["tasks"], comparison["overall"]
    fig = Figure(figsize=(max(5.0, 0.8 * len(d) + 2.5), 3.6), layout="constrained")
    ax = fig.add_subplot()
    colors = ["#2ca02c" if v > 0 else "#d62728" for v in d["diff"]]
    ax.bar(range(len(d)), d["diff"], color=colors)
    if np.isfinite(o["diff"]):
        ax.errorbar(
            len(d) + 0.5,
            o["diff"],
            yerr=[[max(0.0, o["diff"] - o["diff_lo"])], [max(0.0, o["diff_hi"] - o["diff"])]],  # float noise: >= 0
            fmt="D",
            color="black",
            capsize=4,
        )
    ax.set_xticks(list(range(len(d))) + [len(d) + 0.5], list(d["label"]) + ["Agg"], fontsize=8)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_ylabel("Δ baseline-relative improvement")
    ax.set_title(f"{comparison['a']} minus {comparison['b']} (Agg: bootstrap 95 % CI)", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    return fig
