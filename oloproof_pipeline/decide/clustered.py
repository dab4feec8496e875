"""Intervals for a pass rate whose cases come in clusters of unequal size (many singletons and
a few large groups): the rate is sum(passed) / sum(cases), and cases of one cluster may pass or
fail together.

Two methods, built on Clopper-Pearson at an effective sample size n* with x* = rate * n*
passes (the beta quantiles accept non-integer x* and n*):

- `effective_clusters_interval`, the valid fallback: the hull of two intervals, each valid
  where the other is not.
  * Clopper-Pearson at n* = (sum m_i)^2 / sum m_i^2, Kish's effective sample size for a
    weighted mean (Kish 1965, Survey Sampling) under the worst case of clustering, an
    intra-cluster correlation (ICC) of 1: every cluster then passes or fails as one case, and
    the rate is a mean of cluster outcomes weighted by size. With equal sizes n* is the number
    of clusters (the clusters-as-cases interval); with unequal sizes it is smaller. It gets the
    variance at ICC 1 right but not the shape: when one cluster holds a large share w of the
    cases, the rate at ICC 1 is a two-humped mixture (the cluster passed, or it failed and
    the rate is about (1 - w) p), and a failed big cluster then gives an upper bound below p
    far more often than 2.5%. Exact coverage fell to 0.907 with 200 singletons and one
    cluster of 50, 0.931 with 60 x 3 + 1 x 60, 0.940 with 100 x 1 + 1 x 100 (issue 24).
  * The exact interval under that worst case (`all_or_nothing_interval`): each cluster passes
    entirely with probability p, so the total passes is a sum of size-weighted Bernoulli
    variables whose distribution is exact (a convolution of binomials, one per distinct
    size), and the bounds invert its tails as Clopper-Pearson inverts the binomial's. Exact at
    ICC 1, and plain Clopper-Pearson when every cluster is a single case; but at a low ICC a
    big cluster passes in part, which that model never does, and alone it covers as little
    as 0.89 (100 x 1 + 1 x 100 at ICC 0).
  The hull covers whenever either does. Its exact coverage (tests/test_decide_clustered.py,
  every true rate on a fine grid, ICC 0 to 1) is at least 0.954 on every design tested,
  including one cluster holding 17-50% of the cases (0.975 on the three above at ICC 1), and
  0.979 in the seeded simulation. What it costs over n* alone, in mean width at p = 0.8: at
  most +0.005 where no cluster holds more than 16% of the cases or one holds half of them
  (n* is then already small), and up to +0.036 where one holds 17-25% (200 x 1 + 1 x 50 at
  ICC 0: 0.387 against 0.351). The interval depends on the data only through the total
  passes, which is what lets the tests enumerate it exactly. It needs no estimate of the
  correlation, so it holds however few clusters there are. The price is width when cases are
  in fact independent (0.3-0.65 where Korn-Graubard gives 0.1-0.2 on the simulated designs).

- `korn_graubard_interval`, Korn and Graubard (1998, Survey Methodology 24:193-201), as in R's
  survey::svyciprop(method = "beta"): n* from the estimated design effect, adjusted for the
  degrees of freedom of the cluster count. Narrower, and fine when cases are not clustered,
  but NOT a valid fallback for the designs above: its variance comes from the clusters that
  happen to vary, and a sample in which the few large clusters all passed looks precise.
  Simulated coverage at ICC 0.8 falls to 0.80 with 30 singletons and 5 clusters of 10, and to
  0.78 with 50 singletons and 2 clusters of 25.

Both assume independent clusters whose pass rates do not depend on their size (the
beta-binomial model the tests simulate).
"""

from __future__ import annotations

import functools
from collections import Counter

import numpy as np
from scipy import special  # not scipy.optimize: its import adds ~0.13 s to every CLI start

from .roots import monotone_root

EFFECTIVE_CLUSTERS_METHOD = "clopper_pearson_effective_clusters"
KORN_GRAUBARD_METHOD = "korn_graubard_clopper_pearson"


def effective_clusters_interval(
    passed_by_cluster: list[int],
    judged_by_cluster: list[int],
    confidence: float = 0.95,
    *,
    missing_by_cluster: list[int] | None = None,
) -> tuple[float, float]:
    """The pass rate over clusters of any sizes, sized for the worst correlation within
    clusters: the hull of Clopper-Pearson at n* = (sum m)^2 / sum m^2 and the exact interval
    when every cluster passes or fails as one (`all_or_nothing_interval`); the module
    docstring says why both, and what coverage the hull was measured to have.

    `missing_by_cluster` (cases with no verdict) widens it the worst-case way: the lower bound
    counts them as failures, the upper bound as passes. No cases at all give (0, 1)."""
    return _widened(_effective_clusters_bounds, passed_by_cluster, judged_by_cluster, confidence, missing_by_cluster)


def all_or_nothing_interval(
    passed_by_cluster: list[int],
    judged_by_cluster: list[int],
    confidence: float = 0.95,
    *,
    missing_by_cluster: list[int] | None = None,
) -> tuple[float, float]:
    """The exact interval for p when each cluster passes entirely with probability p and
    fails entirely otherwise (ICC 1): the lower bound is the p at which P(total passes >= t)
    = alpha/2, the upper the p at which P(total passes <= t) = alpha/2, for t the observed
    total. With single-case clusters it is Clopper-Pearson. One half of
    `effective_clusters_interval`, not valid alone at a low ICC (module docstring)."""
    return _widened(_all_or_nothing_bounds, passed_by_cluster, judged_by_cluster, confidence, missing_by_cluster)


def korn_graubard_interval(
    passed_by_cluster: list[int],
    judged_by_cluster: list[int],
    confidence: float = 0.95,
    *,
    missing_by_cluster: list[int] | None = None,
) -> tuple[float, float]:
    """Korn-Graubard (1998) interval: Clopper-Pearson at the degrees-of-freedom-adjusted
    effective sample size. Approximate: it under-covers with a few large clusters and strong
    correlation within them, where `effective_clusters_interval` is the valid choice.

    For C clusters with y_i passes out of m_i cases and N cases in all:
      rate = sum y_i / N
      v = C / (C - 1) * sum (y_i - rate m_i)^2 / N^2   (with-replacement ratio variance)
      n_eff = min(N, rate (1 - rate) / v)              (a design effect below 1 is not credited)
      n* = n_eff * (t_{N-1} / t_{C-1})^2               (t quantiles at 1 - alpha/2)
    When the rate is 0 or 1 the variance is 0 and says nothing of the clustering; then, as with
    one cluster, n* = C: a cluster passes entirely with probability at most its per-case rate p,
    so P(all pass) <= p^C, the Binomial(C, p) probability the bound is built on.
    `missing_by_cluster` widens it as in `effective_clusters_interval`."""
    return _widened(_korn_graubard_bounds, passed_by_cluster, judged_by_cluster, confidence, missing_by_cluster)


def effective_clusters(cases_by_cluster: list[int]) -> float:
    """(sum m)^2 / sum m^2: the number of independent cases the clusters are worth when every
    cluster passes or fails as one. 0.0 for no cases."""
    total = sum(cases_by_cluster)
    return 0.0 if total == 0 else total * total / sum(cases * cases for cases in cases_by_cluster)


def korn_graubard_effective_size(passed_by_cluster: list[int], cases_by_cluster: list[int], confidence: float = 0.95) -> float:
    """n* of `korn_graubard_interval`; 0.0 for no cases."""
    clusters = [(passed, cases) for passed, cases in zip(passed_by_cluster, cases_by_cluster) if cases > 0]
    count = len(clusters)
    total = sum(cases for _, cases in clusters)
    if total == 0:
        return 0.0
    rate = sum(passed for passed, _ in clusters) / total
    if count < 2 or rate in (0.0, 1.0):
        return float(count)
    squared_residuals = sum((passed - rate * cases) ** 2 for passed, cases in clusters)
    variance = count / (count - 1) * squared_residuals / (total * total)
    effective = total if variance <= 0.0 else min(total, rate * (1.0 - rate) / variance)
    level = 1.0 - (1.0 - confidence) / 2.0
    t_cases = special.stdtrit(total - 1, level)
    t_clusters = special.stdtrit(count - 1, level)
    return float(effective * (t_cases / t_clusters) ** 2)


# -- shared --------------------------------------------------------------------------------


def _effective_clusters_bounds(passed_by_cluster: list[int], cases_by_cluster: list[int], confidence: float) -> tuple[float, float]:
    total = sum(cases_by_cluster)
    smooth = _beta_bounds(sum(passed_by_cluster) / total, effective_clusters(cases_by_cluster), confidence)
    return _hull_with_all_or_nothing(int(sum(passed_by_cluster)), _size_groups(cases_by_cluster), confidence, *smooth)


def _all_or_nothing_bounds(passed_by_cluster: list[int], cases_by_cluster: list[int], confidence: float) -> tuple[float, float]:
    # The hull with an empty interval (lower 1, upper 0) is the all-or-nothing interval itself.
    return _hull_with_all_or_nothing(int(sum(passed_by_cluster)), _size_groups(cases_by_cluster), confidence, 1.0, 0.0)


def _size_groups(cases_by_cluster: list[int]) -> tuple[tuple[int, int], ...]:
    """(size, how many clusters of it), the most numerous size first. Only the total passes
    and these matter, so the cache key is small and the many intervals a coverage test asks
    for over one design are solved once."""
    return tuple(sorted(Counter(int(cases) for cases in cases_by_cluster if cases > 0).items(), key=lambda group: -group[1]))


@functools.lru_cache(maxsize=8192)
def _hull_with_all_or_nothing(
    passes: int, sizes: tuple[tuple[int, int], ...], confidence: float, lower: float, upper: float
) -> tuple[float, float]:
    """The hull of (lower, upper) with the all-or-nothing bounds for `passes` total passes.
    Both tails are monotone in p (each cluster's pass is), so one evaluation at `lower` says
    whether the all-or-nothing lower bound lies below it, and only then is it solved for
    (likewise above `upper`): on most designs the hull costs two evaluations."""
    total = sum(size * count for size, count in sizes)
    tail = (1.0 - confidence) / 2.0
    at_least = lambda p: _total_passes_distribution(sizes, total, p)[passes:].sum() - tail  # noqa: E731
    at_most = lambda p: _total_passes_distribution(sizes, total, p)[: passes + 1].sum() - tail  # noqa: E731
    if passes == 0:
        lower = 0.0
    elif at_least(lower) > 0.0:
        lower = monotone_root(at_least, 0.0, lower)
    if passes == total:
        upper = 1.0
    elif at_most(upper) > 0.0:
        upper = monotone_root(at_most, upper, 1.0)
    return lower, upper


def _total_passes_distribution(sizes: tuple[tuple[int, int], ...], total: int, rate: float) -> np.ndarray:
    """P(total passes = t), t = 0..total, when each cluster passes as one with probability
    `rate`. The total is a sum of independent size-weighted Bernoulli variables, so its
    discrete Fourier transform is the product of their characteristic functions,
    prod (1 - rate + rate w^size)^count, w running over the roots of unity: one inverse FFT
    gives every probability, whatever the number of clusters (rounding error about 1e-16)."""
    distribution = np.zeros(total + 1)
    if rate <= 0.0 or rate >= 1.0:
        distribution[0 if rate <= 0.0 else total] = 1.0
        return distribution
    length = 1 << total.bit_length()  # a power of two above total: numpy's FFT is slowest on others
    transform = np.ones(length // 2 + 1, dtype=complex)
    for size, count in sizes:
        transform *= (1.0 - rate + rate * _roots_of_unity(length, size)) ** count
    distribution[:] = np.fft.irfft(transform, length)[: total + 1]
    return np.clip(distribution, 0.0, None)


@functools.lru_cache(maxsize=256)
def _roots_of_unity(length: int, size: int) -> np.ndarray:
    """exp(-2 pi i k size / length) for k = 0..length/2, the transform of a pass of `size`."""
    return np.exp(-2j * np.pi * size * np.arange(length // 2 + 1) / length)


def _korn_graubard_bounds(passed_by_cluster: list[int], cases_by_cluster: list[int], confidence: float) -> tuple[float, float]:
    total = sum(cases_by_cluster)
    effective = korn_graubard_effective_size(passed_by_cluster, cases_by_cluster, confidence)
    return _beta_bounds(sum(passed_by_cluster) / total, effective, confidence)


def _beta_bounds(rate: float, effective: float, confidence: float) -> tuple[float, float]:
    """Clopper-Pearson bounds for rate * effective passes of `effective` cases."""
    passes = rate * effective
    alpha = 1.0 - confidence
    # special.betaincinv is what stats.beta.ppf computes, without its per-call overhead.
    lower = 0.0 if rate <= 0.0 else float(special.betaincinv(passes, effective - passes + 1.0, alpha / 2))
    upper = 1.0 if rate >= 1.0 else float(special.betaincinv(passes + 1.0, effective - passes, 1.0 - alpha / 2))
    return lower, upper


def _widened(bounds, passed_by_cluster, judged_by_cluster, confidence, missing_by_cluster) -> tuple[float, float]:
    """Lower bound with missing cases as failures, upper bound with them as passes."""
    passed, judged = list(passed_by_cluster), list(judged_by_cluster)
    missing = list(missing_by_cluster) if missing_by_cluster is not None else [0] * len(judged)
    if len(passed) != len(judged) or len(missing) != len(judged):
        raise ValueError("passed, judged and missing counts need one entry per cluster")
    for won, tried, lost in zip(passed, judged, missing):
        if not (int(won) == won and int(tried) == tried and int(lost) == lost):
            raise ValueError("counts must be integers")
        if not 0 <= won <= tried or lost < 0:
            raise ValueError(f"invalid cluster counts: passed {won}, judged {tried}, missing {lost}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence!r}")
    cases = [tried + lost for tried, lost in zip(judged, missing)]
    if sum(cases) == 0:
        return 0.0, 1.0
    lower, upper = bounds(passed, cases, confidence)
    if any(missing):
        _, upper = bounds([won + lost for won, lost in zip(passed, missing)], cases, confidence)
    return lower, upper
