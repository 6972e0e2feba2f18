"""Which way a metric improves: the one place where "better" is decided.

A task's ``direction`` is ``max`` (accuracy, AUROC, mIoU) or ``min`` (MSE, bits per byte). The
checkpoint selection, the Optuna agent, the leaderboard's relative improvement (paper Eq. 1) and
the tables all ask this object instead of comparing numbers by hand; :func:`signs` and
:func:`relative` are its element-wise forms for DataFrame columns (``analysis/``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from enum import StrEnum
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import numpy as np

T = TypeVar("T")


class Direction(StrEnum):
    """``Direction("min")`` / ``Direction("max")``; the paper's ``lower`` / ``higher`` too."""

    MIN = "min"
    MAX = "max"

    @classmethod
    def _missing_(cls, value: object) -> Direction | None:
        aliases = {"lower": cls.MIN, "minimize": cls.MIN, "higher": cls.MAX, "maximize": cls.MAX}
        return aliases.get(str(value).strip().lower())

    @classmethod
    def of(cls, higher_is_better: bool) -> Direction:
        """The direction of a ``higher_is_better`` flag (as MLflow params and analysis/ hold it)."""
        return cls.MAX if higher_is_better else cls.MIN

    @property
    def higher_is_better(self) -> bool:
        """True for ``max``."""
        return self is Direction.MAX

    @property
    def sign(self) -> float:
        """+1 where higher is better, -1 where lower is.

        ``sign * score`` always grows with quality.
        """
        return 1.0 if self.higher_is_better else -1.0

    @property
    def optuna(self) -> str:
        """Optuna's spelling (``create_study(direction=...)``)."""
        return "maximize" if self.higher_is_better else "minimize"

    @property
    def arrow(self) -> str:
        """↑ or ↓, for table headers and axis labels."""
        return "↑" if self.higher_is_better else "↓"

    def better(self, a: float, b: float | None) -> bool:
        """True when ``a`` strictly beats ``b`` (anything beats None; NaN beats nothing)."""
        if not math.isfinite(a):
            return False
        return b is None or (a > b if self.higher_is_better else a < b)

    def rank_key(self, score: float) -> float:
        """Sort key that puts the best score first (ascending sort)."""
        return -score if self.higher_is_better else score

    def best(self, items: Iterable[T], key: Callable[[T], float]) -> T | None:
        """The best item by ``key`` (the first of equals); None when there is none."""
        items = list(items)
        return min(items, key=lambda x: self.rank_key(key(x))) if items else None

    def relative(self, score: float, baseline: float) -> float:
        """The paper's Eq. 1 term.

        (s - b) / b where higher is better, (b - s) / b where lower is.
        """
        return self.sign * (score - baseline) / baseline

    def gap_closed(self, score: float, baseline: float, reference: float) -> float:
        """MLRC-Bench's measure (Zhang et al. 2025, arXiv:2504.09702; there in percent).

        The share of the baseline-to-reference gap closed, (s - b) / (r - b), as a fraction. The
        same formula in both directions, but NaN unless the reference strictly beats the baseline
        here (or when any value is missing): never a number whose sign means the opposite.
        :mod:`analysis.gap` builds the leaderboard's columns on it.
        """
        values = [math.nan if v is None else float(v) for v in (score, baseline, reference)]
        if not all(math.isfinite(v) for v in values) or not self.better(values[2], values[1]):
            return math.nan
        return (values[0] - values[1]) / (values[2] - values[1])


# --- element-wise forms, for columns of scores with one direction per row (analysis/) -------------
# numpy is imported inside these two functions, so that importing bench.tasks does not import it.
def signs(higher_is_better: Iterable[bool]) -> np.ndarray:
    """``Direction.of(h).sign`` for each ``h``: ``signs(h) * scores`` grows with quality per row."""
    import numpy as np

    return np.array([Direction.of(bool(h)).sign for h in higher_is_better], dtype=float)


def relative(scores, baselines, higher_is_better) -> np.ndarray:
    """``Direction.of(h).relative(s, b)`` element by element.

    Eq. 1's term, each row with its own direction.

    Arrays of one length, or scalars that broadcast against them; NaN in, NaN out.
    """
    import numpy as np

    s, b, h = np.broadcast_arrays(
        np.asarray(scores, dtype=float), np.asarray(baselines, dtype=float), np.asarray(higher_is_better, dtype=bool)
    )
    out = np.full(s.shape, np.nan)
    for direction in Direction:
        rows = h == direction.higher_is_better
        out[rows] = direction.relative(s[rows], b[rows])
    return out
