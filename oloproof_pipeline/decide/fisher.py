"""Fisher's exact test on a 2x2 table, two-sided, as `scipy.stats.fisher_exact` computes it,
without importing `scipy.stats` (its import alone costs a run a second and tens of MiB; the
slices are its only use on a run).

Given the margins, the table's first cell is hypergeometric. The two-sided p-value sums the
probabilities of the tables no more probable than the observed one, within scipy's relative
tolerance (`TIE_TOLERANCE`, so that tables tied with the observed one count however rounding
fell). Those tables are both tails outside the interval around the mode where tables are more
probable; the interval's ends are found by bisection, the order of two tables decided exactly
(in whole numbers) whenever their logged probabilities are too close for floating point. A
probability is Loader's saddle-point form of the binomial (as R's `dhyper`), accurate to a few
units in the last place at any size; each tail is summed outward from its end by the ratio of
neighbouring terms until the terms no longer count, so 100,000-case margins cost a few hundred
steps, never a loop over the whole support or a huge integer.
"""

from __future__ import annotations

import functools
import math
from decimal import Decimal, localcontext
from fractions import Fraction

# scipy's (1.17) relative tolerance: a table whose probability is within it of the observed
# table's counts as no more probable (R's fisher.test uses 1e-7; the tables it changes are rare).
TIE_TOLERANCE = Fraction(1, 10**14)
_LOG_TIE = math.log1p(float(TIE_TOLERANCE))
# Logged probabilities closer than this (relative to their size) are ordered exactly instead,
# unless a table that probable weighs nothing in a double anyway (below the smallest one).
_FLOAT_DOUBT = 1e-9
_LOG_UNDERFLOW = math.log(math.ulp(0.0)) - 1.0
# A tail's sum stops once all its further terms add less than this share of it.
_NEGLIGIBLE = 1e-17
_LN_SQRT_2PI = 0.918938533204672741780329736406


@functools.cache
def _stirling_error_exact(n: int) -> float:
    """log(n!) - log(sqrt(2 pi n) (n/e)^n) in 40 digits, for the n where the series below is not
    yet accurate (computed on first use, not at import)."""
    with localcontext() as context:
        context.prec = 40
        pi = Decimal("3.141592653589793238462643383279502884197")
        value = Decimal(math.factorial(n)).ln() - ((2 * pi).ln() / 2 + (n + Decimal("0.5")) * Decimal(n).ln() - n)
        return float(value)


def _stirling_error(n: int) -> float:
    if n <= 15:
        return _stirling_error_exact(n)
    square = float(n) * n
    # 1/12n - 1/360n^3 + 1/1260n^5 - 1/1680n^7 + 1/1188n^9: the next term is below 1e-16 from 16 on.
    return (1 / 12 - (1 / 360 - (1 / 1260 - (1 / 1680 - 1 / 1188 / square) / square) / square) / square) / n


def _deviance(x: float, mean: float) -> float:
    """x log(x/mean) + mean - x, without cancellation when x is near the mean (Loader's bd0)."""
    if abs(x - mean) < 0.1 * (x + mean):
        ratio = (x - mean) / (x + mean)
        total = (x - mean) * ratio
        term = 2 * x * ratio
        ratio *= ratio
        for j in range(1, 1000):
            term *= ratio
            grown = total + term / (2 * j + 1)
            if grown == total:
                return grown
            total = grown
    return x * math.log(x / mean) + mean - x


def _log_binomial(x: int, n: int, p: float, q: float) -> float:
    """log P(Binomial(n, p) = x), q = 1 - p given apart so that neither loses digits."""
    if x == 0:
        return 0.0 if n == 0 else (-_deviance(n, n * q) - n * p if p < 0.1 else n * math.log(q))
    if x == n:
        return -_deviance(n, n * p) - n * q if q < 0.1 else n * math.log(p)
    exponent = (
        _stirling_error(n) - _stirling_error(x) - _stirling_error(n - x)
        - _deviance(x, n * p) - _deviance(n - x, n * q)
    )
    return exponent - _LN_SQRT_2PI - 0.5 * (math.log(x) + math.log1p(-x / n))


def _product(factors: list[int]) -> int:
    """The product, multiplied in halves so that the big numbers meet as few times as possible."""
    if len(factors) <= 64:
        return math.prod(factors)
    half = len(factors) // 2
    return _product(factors[:half]) * _product(factors[half:])


class _FirstCell:
    """The first cell of a 2x2 table given its margins: `row` and `other_row` cases in the two
    rows, `column` of them in the first column. Tables are named by their first cell."""

    def __init__(self, row: int, other_row: int, column: int):
        self.row, self.other_row, self.column = row, other_row, column
        total = row + other_row
        self.low, self.high = max(0, column - other_row), min(column, row)
        self.mode = (column + 1) * (row + 1) // (total + 2)
        # Each binomial at the column's share, so the three terms stay near their centres.
        self._p, self._q = column / total, (total - column) / total
        self._log_whole = _log_binomial(column, total, self._p, self._q)

    def log_probability(self, x: int) -> float:
        p, q = self._p, self._q
        return _log_binomial(x, self.row, p, q) + _log_binomial(self.column - x, self.other_row, p, q) - self._log_whole

    def neighbour_ratio(self, x: int, step: int) -> float:
        """P(x + step) / P(x), step 1 or -1."""
        row, other_row, column = self.row, self.other_row, self.column
        if step > 0:
            return (row - x) * (column - x) / ((x + 1) * (other_row - column + x + 1))
        return x * (other_row - column + x) / ((row - x + 1) * (column - x + 1))

    def exact_ratio(self, x: int, y: int) -> Fraction:
        """P(x) / P(y), exactly: the product of the neighbour ratios between them."""
        steps = range(min(x, y), max(x, y))
        numerator = _product([(self.row - k) * (self.column - k) for k in steps])
        denominator = _product([(k + 1) * (self.other_row - self.column + k + 1) for k in steps])
        return Fraction(numerator, denominator) if x >= y else Fraction(denominator, numerator)

    def tail(self, start: int, step: int) -> float:
        """P(start) + P(start + step) + ... to the end of the support (step 1 or -1)."""
        if not self.low <= start <= self.high:
            return 0.0
        end = self.high if step > 0 else self.low
        term = math.exp(self.log_probability(start))
        total, x = term, start
        while x != end and term > 0:
            ratio = self.neighbour_ratio(x, step)
            term *= ratio
            x += step
            total += term
            if ratio < 1 and term * ratio <= total * _NEGLIGIBLE * (1 - ratio):
                break  # log-concave: the ratios only fall, so the rest is below term * ratio / (1 - ratio)
        return total


def fisher_exact_p_value(table: list[list[int]]) -> float:
    """Two-sided p-value of Fisher's exact test on [[a, b], [c, d]] (non-negative counts); 1 when
    a row or a column is empty, as scipy says."""
    (a, b), (c, d) = table
    if min(a, b, c, d) < 0:
        raise ValueError(f"a 2x2 table of counts cannot hold a negative count: {table!r}")
    if 0 in (a + b, c + d, a + c, b + d):
        return 1.0
    cell = _FirstCell(a + b, c + d, a + c)
    observed = cell.log_probability(a)

    def more_probable(x: int) -> bool:
        """Is table x more probable than the observed one, beyond the tolerance?"""
        logged = cell.log_probability(x)
        gap = logged - observed - _LOG_TIE
        if abs(gap) > _FLOAT_DOUBT * max(1.0, abs(logged), abs(observed)) or logged < _LOG_UNDERFLOW:
            return gap > 0
        return cell.exact_ratio(x, a) > 1 + TIE_TOLERANCE

    if not more_probable(cell.mode):
        return 1.0  # the observed table is as probable as the most probable one
    # The more probable tables are an interval around the mode: find its ends.
    lo, hi = cell.low, cell.mode  # first: the smallest x in lo..mode that is more probable
    while lo < hi:
        middle = (lo + hi) // 2
        lo, hi = (lo, middle) if more_probable(middle) else (middle + 1, hi)
    first = lo
    lo, hi = cell.mode, cell.high  # last: the largest x in mode..hi that is more probable
    while lo < hi:
        middle = (lo + hi + 1) // 2
        lo, hi = (middle, hi) if more_probable(middle) else (lo, middle - 1)
    last = lo
    return min(1.0, cell.tail(first - 1, -1) + cell.tail(last + 1, 1))
