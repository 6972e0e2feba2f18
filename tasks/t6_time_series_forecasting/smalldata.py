"""Small GENERATED data for this task, for `bench tasks check` and the test suite (docs/extending.md).

An ETTh1.csv with the real schema and length (NOT the real data: no score on them means anything). This file is never
copied into an agent's workspace (bench/pipeline/workspace.py copies program.md, train.py and the locked files only).
"""

from __future__ import annotations

import csv
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

ETT_COLUMNS = ["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"]
ETT_ROWS = 17420
TINY = {"epochs": 2, "batch_size": 1024, "log_every": 2}  # 8 steps an epoch on the 8,209 training windows


def write_fake_etth1(path: Path, seed: int = 0) -> np.ndarray:
    """A generated file with the schema of ETTh1.csv (NOT the real data); returns its values [ETT_ROWS, 7]."""
    rng = np.random.default_rng(seed)
    t = np.arange(ETT_ROWS)[:, None]
    k = np.arange(len(ETT_COLUMNS))[None, :]
    values = 5 + k + 2 * np.sin(2 * np.pi * t / 24 + k) + 0.01 * t / (1 + k) + 0.3 * rng.standard_normal(t.shape)
    values = values.round(6)
    start = datetime(2016, 7, 1)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["date", *ETT_COLUMNS])
        for i, row in enumerate(values):
            w.writerow([(start + timedelta(hours=i)).strftime("%Y-%m-%d %H:%M:%S"), *(repr(float(v)) for v in row)])
    return values


def write_raw(raw: Path) -> dict:
    return {"values": write_fake_etth1(raw / "ETTh1.csv")}


VAL_SPLIT = "val"  # the split the self-reported val_score is measured on (prepare.py's name)
