"""Small GENERATED data for this task, for `bench tasks check` and the test suite (docs/extending.md).

covtype.data.gz rows with the schema of the real file (NOT the real data: no score on them means anything). This file
is never copied into an agent's workspace (bench/pipeline/workspace.py copies program.md, train.py and the locked
files only).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

ROWS = 3000  # generated rows: 2,400 train, 300 val, 300 test
CLASS_P = [0.36, 0.49, 0.06, 0.02, 0.02, 0.03, 0.02]  # roughly the skew of the real classes
TINY = {"epochs": 2, "batch_size": 256, "log_every": 4}  # 9 steps an epoch on the 2,400 generated training rows


def make_covtype_like(rows: int = ROWS, seed: int = 0) -> np.ndarray:
    """GENERATED rows with the schema of covtype.data (NOT the real data): int64 [rows, 55], class 1..7 last.

    The class is learnable: the elevation rises with the class and each class prefers one wilderness area.
    """
    rng = np.random.default_rng(seed)
    y = rng.choice(7, size=rows, p=CLASS_P)
    t = np.zeros((rows, 55), dtype=np.int64)
    t[:, 0] = 2000 + 250 * y + rng.integers(-150, 150, rows)  # Elevation
    t[:, 1] = rng.integers(0, 360, rows)  # Aspect
    t[:, 2] = rng.integers(0, 60, rows)  # Slope
    t[:, 3] = rng.integers(0, 1400, rows)
    t[:, 4] = rng.integers(-150, 600, rows)  # the vertical distance can be negative
    t[:, 5] = rng.integers(0, 7000, rows)
    t[:, 6:9] = rng.integers(0, 256, (rows, 3))  # hillshades
    t[:, 9] = rng.integers(0, 7000, rows)
    t[np.arange(rows), 10 + y % 4] = 1  # one wilderness area
    t[np.arange(rows), 14 + rng.integers(0, 40, rows)] = 1  # one soil type
    t[:, 54] = y + 1
    return t


def write_covtype(path: Path, table: np.ndarray) -> Path:
    np.savetxt(path, table, fmt="%d", delimiter=",")  # a .gz file name: numpy writes gzip
    return path


def write_raw(raw: Path) -> dict:
    table = make_covtype_like()
    write_covtype(raw / "covtype.data.gz", table)
    return {"table": table}


VAL_SPLIT = "val"  # the split the self-reported val_score is measured on (prepare.py's name)
