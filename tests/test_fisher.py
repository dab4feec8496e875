"""Fisher's exact test (decide/fisher.py), which the slices use instead of importing
`scipy.stats` on every run: it equals `scipy.stats.fisher_exact` on every small table and on
large ones (scipy is imported here only), equals the test's definition computed in whole
numbers, stays a few hundred steps at 100,000-case margins, and its size under the null is at
most alpha, computed exactly over a grid of row sizes and true rates (`pytest -s` prints the
worst figures).
"""

from __future__ import annotations

import math

import pytest
from scipy import stats

from oloproof_pipeline.decide import fisher
from oloproof_pipeline.decide.fisher import fisher_exact_p_value

SMALL_ROWS = 10  # every table whose rows hold 0..10 cases each: 4,356 tables


def scipy_p_value(table: list[list[int]]) -> float:
    return float(stats.fisher_exact(table, alternative="two-sided").pvalue)


def defined_p_value(table: list[list[int]]) -> float:
    """The definition in whole numbers: the tables no more probable than the observed one (within
    scipy's tolerance), each weighed by its count of arrangements, over all arrangements."""
    (a, b), (c, d) = table
    row, other_row, column = a + b, c + d, a + c
    if 0 in (row, other_row, column, b + d):
        return 1.0
    weights = [math.comb(row, x) * math.comb(other_row, column - x)
               for x in range(max(0, column - other_row), min(column, row) + 1)]
    observed = math.comb(row, a) * math.comb(other_row, c)
    tolerance = fisher.TIE_TOLERANCE
    kept = sum(weight for weight in weights
               if weight * tolerance.denominator <= observed * (tolerance.denominator + tolerance.numerator))
    return min(1.0, kept / math.comb(row + other_row, column))


def tables_with_rows(row: int, other_row: int) -> list[list[list[int]]]:
    return [[[a, row - a], [c, other_row - c]] for a in range(row + 1) for c in range(other_row + 1)]


def test_every_small_table_has_scipys_p_value():
    worst = 0.0
    for row in range(SMALL_ROWS + 1):
        for other_row in range(SMALL_ROWS + 1):
            for table in tables_with_rows(row, other_row):
                ours, theirs = fisher_exact_p_value(table), scipy_p_value(table)
                assert ours == pytest.approx(theirs, rel=1e-12, abs=0), table
                worst = max(worst, abs(ours - theirs) / theirs)
    print(f"\nrows of 0..{SMALL_ROWS}: largest relative difference from scipy {worst:.1e}")


# Totals in the thousands: scipy agrees to 1e-12, the definition in whole numbers to 1e-13.
THOUSANDS = [
    [[500, 1000], [750, 700]],  # p ~ 1e-23
    [[600, 400], [500, 500]],
    [[5, 1495], [20, 1480]],
    [[700, 800], [650, 850]],
    [[490, 510], [510, 490]],  # tied with its mirror image across the mode
    [[1000, 1000], [1000, 1000]],  # the most probable table: 1
    [[0, 1500], [7, 1493]],
]
# 100,000-case margins: scipy's own error there reaches ~2e-11 (against the whole-number sum,
# which takes seconds, so it is not repeated here), ours ~1e-14.
HUNDRED_THOUSANDS = [
    [[50000, 50000], [49000, 51000]],
    [[49900, 50100], [50100, 49900]],  # tied with its mirror image, 200 tables apart
    [[50500, 49500], [50000, 50000]],
    [[30, 99970], [60, 99940]],
    [[99990, 10], [99950, 50]],
    [[7, 93], [40000, 60000]],
    [[100000, 0], [0, 100000]],  # below the smallest double: 0, as scipy says
]


@pytest.mark.parametrize("table", THOUSANDS, ids=str)
def test_tables_in_the_thousands(table):
    ours = fisher_exact_p_value(table)
    assert ours == pytest.approx(scipy_p_value(table), rel=1e-12, abs=0)
    assert ours == pytest.approx(defined_p_value(table), rel=1e-13, abs=0)


@pytest.mark.parametrize("table", HUNDRED_THOUSANDS, ids=str)
def test_hundred_thousand_case_margins_take_few_steps(table, monkeypatch):
    """The work is a bisection and the tails' terms that count, never the whole support."""
    work = {"probabilities": 0, "steps": 0, "exact factors": 0}
    cell = fisher._FirstCell
    log_probability, neighbour_ratio, exact_ratio = cell.log_probability, cell.neighbour_ratio, cell.exact_ratio

    def counted_probability(self, x):
        work["probabilities"] += 1
        return log_probability(self, x)

    def counted_step(self, x, step):
        work["steps"] += 1
        return neighbour_ratio(self, x, step)

    def counted_exact_ratio(self, x, y):
        work["exact factors"] += abs(x - y)
        return exact_ratio(self, x, y)

    monkeypatch.setattr(cell, "log_probability", counted_probability)
    monkeypatch.setattr(cell, "neighbour_ratio", counted_step)
    monkeypatch.setattr(cell, "exact_ratio", counted_exact_ratio)
    ours = fisher_exact_p_value(table)
    print(f"\n{table}: p {ours:.6g}, {work}")
    assert ours == pytest.approx(scipy_p_value(table), rel=1e-10, abs=0)
    assert work["probabilities"] <= 2 * math.log2(100_001) + 4
    assert work["steps"] <= 3000  # the support holds up to 100,001 tables
    assert work["exact factors"] <= 1000  # only a table tied with the observed one is ordered exactly


def test_a_few_columns_of_a_hundred_thousand_are_the_whole_number_sum():
    table = [[30, 99970], [60, 99940]]  # few arrangements of 90 in 200,000: the exact sum is quick
    assert fisher_exact_p_value(table) == pytest.approx(defined_p_value(table), rel=1e-13, abs=0)


def test_bad_tables():
    assert fisher_exact_p_value([[0, 0], [3, 4]]) == 1.0
    assert fisher_exact_p_value([[0, 5], [0, 4]]) == 1.0
    with pytest.raises(ValueError, match="negative"):
        fisher_exact_p_value([[1, -1], [2, 3]])


# -- size under the null ---------------------------------------------------------------------

ROW_SIZES = [2, 3, 5, 8, 13, 20, 40]
TRUE_RATES = [0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9]
ALPHAS = [0.05, 0.01]


def binomial(count: int, size: int, rate: float) -> float:
    return math.comb(size, count) * rate**count * (1 - rate) ** (size - count)


def test_size_under_the_null_is_at_most_alpha():
    """Both rows draw PASS at the same true rate; summing the probability of every table whose
    p-value is at most alpha gives the test's size exactly, which must not exceed alpha."""
    worst = {alpha: (0.0, None) for alpha in ALPHAS}
    for row in ROW_SIZES:
        for other_row in ROW_SIZES:
            if other_row < row:
                continue
            p_values = {(a, c): fisher_exact_p_value([[a, row - a], [c, other_row - c]])
                        for a in range(row + 1) for c in range(other_row + 1)}
            for rate in TRUE_RATES:
                for alpha in ALPHAS:
                    size = sum(binomial(a, row, rate) * binomial(c, other_row, rate)
                               for (a, c), p_value in p_values.items() if p_value <= alpha)
                    assert size <= alpha, (row, other_row, rate, alpha, size)
                    if size >= worst[alpha][0]:
                        worst[alpha] = (size, (row, other_row, rate))
    for alpha, (size, where) in worst.items():
        print(f"\nalpha {alpha}: largest size {size:.4f} at rows {where[:2]}, true rate {where[2]}")
