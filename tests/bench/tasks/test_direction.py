"""bench.tasks.direction against the paper: Eq. 1's terms and the published per-task numbers.

Expected values are computed by hand from the paper's Table 4 (e.g. T6: baseline MSE 0.384, Kimi K2.5 0.3835,
an improvement of (0.384 - 0.3835) / 0.384 = +0.0013; T2: baseline 0.343, Kimi 0.6015, (0.6015 - 0.343) / 0.343).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.tasks import Direction, get_task
from bench.tasks.direction import relative, signs


def test_spellings_of_the_two_directions() -> None:
    assert Direction("min") is Direction("lower") is Direction("minimize") is Direction.MIN
    assert Direction("max") is Direction("Higher") is Direction.MAX
    assert str(Direction.MIN) == "min" and f"{Direction.MAX:>4}" == " max"
    with pytest.raises(ValueError):
        Direction("sideways")
    assert get_task("t6").direction is Direction.MIN and get_task("t2").direction is Direction.MAX


def test_better_and_best() -> None:
    assert Direction.MIN.better(0.37, 0.38) and not Direction.MIN.better(0.38, 0.38)
    assert Direction.MAX.better(0.9, 0.8) and Direction.MAX.better(0.1, None)
    assert not Direction.MAX.better(math.nan, 0.1) and not Direction.MIN.better(math.inf, None)
    scores = [("a", 0.40), ("b", 0.38), ("c", 0.38), ("d", 0.45)]
    assert Direction.MIN.best(scores, key=lambda x: x[1]) == ("b", 0.38)  # the first of equals
    assert Direction.MAX.best(scores, key=lambda x: x[1]) == ("d", 0.45)
    assert Direction.MAX.best([], key=float) is None
    assert sorted([0.3, 0.1, 0.2], key=Direction.MAX.rank_key) == [0.3, 0.2, 0.1]
    assert (Direction.MIN.optuna, Direction.MAX.optuna, Direction.MIN.arrow) == ("minimize", "maximize", "↓")


def test_relative_is_the_papers_eq_1() -> None:
    assert Direction.MIN.relative(0.3835, 0.384) == pytest.approx((0.384 - 0.3835) / 0.384)
    assert Direction.MAX.relative(0.6015, 0.343) == pytest.approx((0.6015 - 0.343) / 0.343)
    assert Direction.MIN.relative(2.5643, 3.438) == pytest.approx(0.254130, abs=1e-6)  # T1, bpb


def test_element_wise_forms_match_the_scalar_ones() -> None:
    scores, baselines, higher = [0.3835, 0.6015, np.nan], [0.384, 0.343, 0.5], [False, True, True]
    out = relative(scores, baselines, higher)
    assert out[:2] == pytest.approx([(0.384 - 0.3835) / 0.384, (0.6015 - 0.343) / 0.343]) and math.isnan(out[2])
    assert list(signs([True, False])) == [1.0, -1.0]
