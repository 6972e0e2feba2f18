"""A small table model and its three renderings: Markdown, LaTeX (booktabs) and CSV.

The paper's tables have features that a DataFrame does not carry: group header rows ("Published:
Claude Code"), bold best-in-column cells, red cells where the success rate is below 100 %, and
reference rows above a rule. :class:`Table` holds exactly that, once, and each writer renders it;
the CSV is the tidy numeric frame behind the table (for spreadsheets and re-analysis), not the
formatted text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

FLAG_MD = "⚠"  # Markdown stand-in for the paper's red cell (success rate < 100 %)
FLAG_TEX = r"\cellcolor{red!15}"
TEX_PREAMBLE = "% needs \\usepackage{booktabs} and \\usepackage[table]{xcolor} (for \\cellcolor)\n"


@dataclass
class Cell:
    """One formatted cell: text plus the paper's markings."""

    text: str = ""
    bold: bool = False
    flag: bool = False  # red cell: success rate below 100 %
    note: str = ""  # small text after the value, e.g. "3/5"
    muted: bool = False  # superseded by an entry with more runs


@dataclass
class Row:
    label: str
    cells: list[Cell]
    rule_after: bool = False  # a \midrule below (after the reference rows)


@dataclass
class Table:
    """A paper-style table: header lines, rows and group headers, notes, and its tidy data."""

    name: str  # file stem: table4, table5, ...
    title: str  # "Table 4"
    caption: str
    columns: list[str]  # first line of the header, one per value column
    subcolumns: list[str] | None  # second line (e.g. "↓ bpb"), or None
    rows: list[Row | str] = field(default_factory=list)  # a str is a group header
    data: pd.DataFrame = field(default_factory=pd.DataFrame)
    notes: list[str] = field(default_factory=list)
    corner: str = ""  # header of the label column


# --- Markdown ---------------------------------------------------------------------------------
def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def _md_cell(c: Cell) -> str:
    if not c.text:
        return ""
    text = _md_escape(c.text)
    text = f"**{text}**" if c.bold else text
    text = f"_{text}_" if c.muted else text
    if c.note:
        text += f" {FLAG_MD if c.flag else ''}{c.note}"
    elif c.flag:
        text += f" {FLAG_MD}"
    return text


def to_markdown(t: Table) -> str:
    """GitHub-flavoured Markdown: one header line (the two paper header lines joined), group rows in bold."""
    heads = [f"{c} {s}".strip() for c, s in zip(t.columns, t.subcolumns or [""] * len(t.columns), strict=True)]
    lines = [f"**{t.title}.** {t.caption.replace('{flag}', FLAG_MD)}", ""]
    lines.append("| " + " | ".join([t.corner] + heads) + " |")
    lines.append("|" + "|".join([":--"] + ["--:"] * len(heads)) + "|")
    for row in t.rows:
        if not isinstance(row, Row):  # a group header (anything but a Row: a header made from missing data too)
            lines.append(f"| **{_md_escape(str(row))}** |" + " |" * len(heads))
        else:
            lines.append("| " + " | ".join([_md_escape(row.label)] + [_md_cell(c) for c in row.cells]) + " |")
    if t.notes:
        lines.append("")
        lines.extend(f"- {n}" for n in t.notes)
    return "\n".join(lines) + "\n"


# --- LaTeX ------------------------------------------------------------------------------------
_TEX_SPECIAL = {
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "\\": r"\textbackslash{}",
}
_TEX_SYMBOLS = {
    "±": r"$\pm$",
    "↓": r"$\downarrow$",
    "↑": r"$\uparrow$",
    "–": "--",
    "−": "$-$",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
    "×": r"$\times$",
    "⚠": "",
    "§": r"\S{}",
    "<": "$<$",
    ">": "$>$",
}


def tex_escape(text: str) -> str:
    """Plain text -> LaTeX: special characters escaped, the few symbols the tables use as math."""
    out = "".join(_TEX_SPECIAL.get(ch, ch) for ch in text)
    for sym, tex in _TEX_SYMBOLS.items():
        out = out.replace(sym, tex)
    return out


def _tex_cell(c: Cell) -> str:
    if not c.text:
        return ""
    text = tex_escape(c.text)
    text = rf"\textbf{{{text}}}" if c.bold else text
    text = rf"\textit{{{text}}}" if c.muted else text
    if c.note:
        text += rf"\,{{\scriptsize {tex_escape(c.note)}}}"
    return (FLAG_TEX if c.flag else "") + text


def to_latex(t: Table) -> str:
    """A booktabs ``table`` environment: top/mid/bottom rules, group headers as spanning italic rows."""
    n = len(t.columns)
    label = re.sub(r"[^a-z0-9]+", "-", t.name.lower())
    out = [
        TEX_PREAMBLE,
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        rf"\caption{{{tex_escape(t.caption.replace('{flag}', 'Red cell'))}}}",
    ]
    out += [rf"\label{{tab:{label}}}", r"\begin{tabular}{l" + "c" * n + "}", r"\toprule"]
    out.append(" & ".join([tex_escape(t.corner)] + [tex_escape(c) for c in t.columns]) + r" \\")
    if t.subcolumns:
        out.append(" & ".join([""] + [tex_escape(c) for c in t.subcolumns]) + r" \\")
    out.append(r"\midrule")
    for i, row in enumerate(t.rows):
        if not isinstance(row, Row):  # a group header
            if i and isinstance(t.rows[i - 1], Row) and not t.rows[i - 1].rule_after:
                out.append(r"\midrule")
            out.append(rf"\multicolumn{{{n + 1}}}{{l}}{{\emph{{{tex_escape(str(row))}}}}} \\")
            continue
        out.append(" & ".join([tex_escape(row.label)] + [_tex_cell(c) for c in row.cells]) + r" \\")
        if row.rule_after:
            out.append(r"\midrule")
    out += [r"\bottomrule", r"\end{tabular}"]
    if t.notes:
        out.append(r"\par\smallskip\footnotesize " + " ".join(tex_escape(x) for x in t.notes))
    out.append(r"\end{table}")
    return "\n".join(out) + "\n"


# --- files ------------------------------------------------------------------------------------
def write(t: Table, folder: Path) -> dict[str, Path]:
    """``<name>.md``, ``<name>.tex`` and ``<name>.csv`` in ``folder``; returns the paths by format."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {ext: folder / f"{t.name}.{ext}" for ext in ("md", "tex", "csv")}
    paths["md"].write_text(to_markdown(t))
    paths["tex"].write_text(to_latex(t))
    t.data.to_csv(paths["csv"], index=False, float_format="%.6g")
    return paths
