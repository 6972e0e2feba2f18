"""Small GENERATED data for this task, for `bench tasks check` and the test suite (docs/extending.md).

AG News-like train.csv and test.csv (NOT the real data: no score on them means anything). This file is never copied
into an agent's workspace (bench/pipeline/workspace.py copies program.md, train.py and the locked files only).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

WORDS = [  # generated texts: a class shows in these words
    ["minister", "election", "embassy", "troops", "parliament"],
    ["coach", "season", "goal", "playoffs", "striker"],
    ["shares", "profit", "market", "bank", "earnings"],
    ["software", "internet", "chip", "space", "browser"],
]
# The first line of the generated test.csv, as it stands in the file: "" is a quote; the backslashes are kept.
ESCAPED_LINE = '"2","Coach says ""we won""","Line one\\Line two \\\\ tickets \\$5, caf\u00e9 \u20ac3"\n'
ESCAPED_TEXT = 'Coach says "we won" Line one\\Line two \\\\ tickets \\$5, caf\u00e9 \u20ac3'
TINY = {"batch_size": 4, "max_steps": 2, "log_every": 1, "eval_batch_size": 64}  # the full-size network


def agnews_rows(n_per_class: int, seed: int) -> list[list[str]]:
    """GENERATED AG News-like rows (NOT the real data): [class 1..4, title, description], classes interleaved."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_per_class):
        for label, words in enumerate(WORDS):
            a, b, c = rng.choice(words, size=3)
            title = f"{a.title()} news: {b} update {i}"
            desc = f"AP - Reports on the {a} and the {c} today.\\More on {b} later ({rng.integers(1000)})."
            rows.append([str(label + 1), title, desc])
    return rows


def write_agnews_csv(path: Path, rows: list[list[str]]) -> Path:
    """Write rows as AG News does: every field quoted, inner quotes doubled, one line per row."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    return path


def write_agnews_raw(raw: Path, train_per_class: int = 60, test_per_class: int = 10) -> dict:
    """A generated train.csv (240 rows) and test.csv (40 rows, the first one ESCAPED_LINE)."""
    raw.mkdir(parents=True, exist_ok=True)
    write_agnews_csv(raw / "train.csv", agnews_rows(train_per_class, seed=0))
    test = agnews_rows(test_per_class, seed=1)
    del test[1]  # a class-2 row: ESCAPED_LINE (class 2) comes first instead
    write_agnews_csv(raw / "test.csv", test)
    (raw / "test.csv").write_text(ESCAPED_LINE + (raw / "test.csv").read_text(encoding="utf-8"), encoding="utf-8")
    return {}


def write_raw(raw: Path) -> dict:
    return write_agnews_raw(raw)


VAL_SPLIT = "val"  # the split the self-reported val_score is measured on (prepare.py's name)
