"""The significance tests of analysis/stats.py give the figures they gave when they were hand-written.

The numbers below were recorded from the hand-written Student t tail, Welch test, exact Wilcoxon signed-rank test and
Pearson test (before issue 30 moved them onto scipy.stats), and checked then against scipy.stats independently
(pearsonr, ttest_ind_from_stats, wilcoxon with an exhaustive permutation or exact distribution): a report drawn
before and after the move says the same.
"""

from __future__ import annotations

import math

import pytest

from analysis import stats

PEARSON = [  # x, y, r, p
    ([1.0, 2.0, 3.0, 4.0, 5.0], [2.1, 3.9, 6.2, 7.8, 10.1], 0.9986517555689656, 5.941539111755774e-05),
    (
        [0.3, -1.2, 0.8, 2.2, -0.5, 1.1, 0.0],
        [1.0, 0.4, -0.3, 2.5, 0.1, 0.9, -1.4],
        0.5913303592733042,
        0.16200456186619655,
    ),
    ([0.5, 0.1, 0.9, 0.4], [10.0, 12.0, 9.0, 11.0], -0.9768308314557042, 0.023169168544295824),
]
WELCH = [  # (m1, s1, n1, m2, s2, n2), p
    ((0.41, 0.05, 5, 0.37, 0.04, 5), 0.20173200626980325),
    ((0.9, 0.2, 3, 0.5, 0.6, 5), 0.2264973998462458),
    ((12.0, 1.5, 5, 12.0, 3.0, 4), 1.0),
    ((0.1, 0.0, 5, 0.2, 0.05, 5), 0.011056493393450077),
]
WILCOXON = [  # differences, p
    ([0.12, -0.03, 0.08, 0.2, 0.05, -0.01, 0.07], 0.078125),  # seven tasks, no ties
    ([0.1, -0.1, 0.2, 0.3, 0.3, -0.4], 0.65625),  # tied magnitudes: average ranks, counted exactly
    ([0.1, 0.0, 0.2, -0.05], 0.5),  # a zero difference is dropped
    ([0.5, -0.2], 1.0),
    ([1.0, 2.0, 2.0, -3.0, 4.0, 5.0, -5.0, 6.0], 0.3359375),
]
# sixty differences without ties (rounded draws of a normal, mean 0.1): still the exact distribution, not a normal
BIG = [
    2.140919, -2.455665, 0.518099, -0.46777, -0.352649, -0.115597, -1.919986, -0.131932, -0.765213, 3.423, 0.325787,
    -0.252631, -0.181287, -0.568046, -0.955151, -0.290801, 0.581945, -0.138554, 1.057759, -0.099802, 0.12426,
    1.645821, 0.645106, -0.405229, -0.082839, 0.640525, 2.035088, -0.16962, -0.143559, 1.102314, -0.78646, -0.19172,
    0.982539, 0.68035, 0.191517, 0.770104, -2.728162, 1.121307, -0.859645, -1.56862, 0.376446, 0.800545, -0.344767,
    -0.976406, 0.126125, 0.047253, 1.505598, 0.847408, 0.293816, 1.211633, -0.105523, -0.8259, 0.684058, 0.682538,
    -0.114829, -0.682809, 0.329154, -2.393894, 0.790125, 0.591368,
]  # fmt: skip
BIG_P = 0.4144786581676051


@pytest.mark.parametrize(("x", "y", "r", "p"), PEARSON)
def test_pearson_gives_the_recorded_figures(x, y, r, p):
    got_r, got_p = stats.pearson(x, y)
    assert got_r == pytest.approx(r, rel=1e-12) and got_p == pytest.approx(p, rel=1e-9)


def test_pearson_of_a_perfect_line_and_of_too_little():
    r, p = stats.pearson([1.0, 2.0, 3.0], [3.0, 2.0, 1.0])
    assert r == pytest.approx(-1.0) and p < 1e-7  # recorded: (-1.0, 0.0)
    assert all(math.isnan(v) for v in stats.pearson([1.0, 2.0], [2.0, 1.0]))  # n < 3
    assert all(math.isnan(v) for v in stats.pearson([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))  # no spread


@pytest.mark.parametrize(("summary", "p"), WELCH)
def test_welch_gives_the_recorded_figures(summary, p):
    assert stats.welch_p(*summary) == pytest.approx(p, rel=1e-9)


def test_welch_is_undefined_without_two_runs_or_any_spread():
    assert math.isnan(stats.welch_p(1.0, 0.1, 1, 2.0, 0.1, 5))
    assert math.isnan(stats.welch_p(1.0, 0.0, 5, 2.0, 0.0, 5))
    assert math.isnan(stats.welch_p(1.0, float("nan"), 5, 2.0, 0.1, 5))


@pytest.mark.parametrize(("diff", "p"), [*WILCOXON, (BIG, BIG_P)])
def test_wilcoxon_gives_the_recorded_figures(diff, p):
    assert stats.wilcoxon_p(diff) == pytest.approx(p, rel=1e-9)


def test_wilcoxon_needs_two_differences_that_are_not_zero():
    assert math.isnan(stats.wilcoxon_p([0.1])) and math.isnan(stats.wilcoxon_p([0.1, 0.0, 1e-13]))
