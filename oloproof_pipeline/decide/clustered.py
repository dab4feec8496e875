"""Intervals for a pass rate whose cases come in clusters of unequal size (many singletons and
a few large groups): the rate is sum(passed) / sum(cases), and cases of one cluster may pass or
fail together.

Two methods, both Clopper-Pearson at an effective sample size n* with x* = rate * n* passes
(the beta quantiles accept non-integer x* and n*):

- `effective_clusters_interval`, the valid fallback. n* = (sum m_i)^2 / sum m_i^2, Kish's
  effective sample size for a weighted mean (Kish 1965, Survey Sampling) under the worst case of
  clustering, an intra-cluster correlation (ICC) of 1: every cluster then passes or fails as
  one case, and the rate is a mean of cluster outcomes weighted by size. With equal sizes n* is
  the number of clusters (the clusters-as-cases interval); with unequal sizes it is smaller,
  which is what keeps it valid where clusters-as-cases is not. It needs no estimate of the
  correlation, so it holds however few clusters there are. Its coverage depends on the data
  only through the number of passes, so tests/test_decide_clustered.py computes it exactly, by
  convolving the clusters' beta-binomial distributions: at least 0.94 at every ICC from 0 to 1
  (clusters-as-cases falls to 0.02 on the same designs), and by simulation at least 0.97. The
  price is width when cases are in fact independent (0.3-0.65 where Korn-Graubard gives
  0.1-0.2 on the simulated designs).

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

from scipy import special

EFFECTIVE_CLUSTERS_METHOD = "clopper_pearson_effective_clusters"
KORN_GRAUBARD_METHOD = "korn_graubard_clopper_pearson"


def effective_clusters_interval(
    passed_by_cluster: list[int],
    judged_by_cluster: list[int],
    confidence: float = 0.95,
    *,
    missing_by_cluster: list[int] | None = None,
) -> tuple[float, float]:
    """Clopper-Pearson at n* = (sum m)^2 / sum m^2 for the pass rate over clusters of any
    sizes, sized for the worst correlation within clusters (see the module docstring).

    `missing_by_cluster` (cases with no verdict) widens it the worst-case way: the lower bound
    counts them as failures, the upper bound as passes. No cases at all give (0, 1)."""
    return _widened(_effective_clusters_bounds, passed_by_cluster, judged_by_cluster, confidence, missing_by_cluster)


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
    return _beta_bounds(sum(passed_by_cluster) / total, effective_clusters(cases_by_cluster), confidence)


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
