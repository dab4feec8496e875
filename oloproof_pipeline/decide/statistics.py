"""Rates with intervals: exact Clopper-Pearson for independent cases, a studentised cluster
bootstrap where one cluster holds several cases, the suite size that would decide a rule, and
Benjamini-Yekutieli marks for exploratory slices.

Missing cases never narrow an interval: the lower bound counts them as failures and the upper
bound as successes, so a run that lost cases can only look less certain, never better.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict
from scipy import stats

from ..model.outcomes import (
    EXCLUDED,
    FAIL,
    INSUFFICIENT_EVIDENCE,
    MANUAL_REVIEW,
    MISSING,
    OUTCOMES,
    PASS,
    BlockingKind,
)

Method = Literal["clopper_pearson", "cluster_bootstrap"]
BarKind = Literal["min", "max"]
# A reason that stops a rule from being decided by its interval, with the decision it forces.
BlockingReason = tuple[BlockingKind, str]

BOOTSTRAP_RESAMPLES = 2000
SUITE_SIZE_CAP = 1_000_000
# A t statistic from a resample whose standard error is zero: finite, so quantiles never go NaN.
_T_LIMIT = 1e9


# -- Clopper-Pearson -----------------------------------------------------------------------


def clopper_pearson(successes: float, trials: float, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided exact interval for a binomial proportion. Non-integer successes are accepted
    (the beta quantiles are defined for them), which the cluster fallback relies on."""
    if trials <= 0:
        return 0.0, 1.0
    if successes < 0 or successes > trials:
        raise ValueError(f"successes {successes} outside 0..{trials}")
    alpha = 1.0 - confidence
    lower = 0.0 if successes <= 0 else float(stats.beta.ppf(alpha / 2, successes, trials - successes + 1))
    upper = 1.0 if successes >= trials else float(stats.beta.ppf(1 - alpha / 2, successes + 1, trials - successes))
    return lower, upper


# -- the estimate --------------------------------------------------------------------------


class RateEstimate(BaseModel):
    """A pass rate with its interval. `observed` counts cases judged PASS or FAIL; the point
    estimate is passed/observed, while the interval also carries the missing cases."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    estimate: float | None
    lower: float
    upper: float
    method: Method
    observed: int
    passed: int
    failed: int
    missing: int
    excluded: int = 0
    clusters: int


def _point_estimate(passed: int, failed: int) -> float | None:
    observed = passed + failed
    return passed / observed if observed else None


def exact_rate(passed: int, failed: int, missing: int = 0, confidence: float = 0.95, *, excluded: int = 0) -> RateEstimate:
    """Clopper-Pearson over independent cases, widened by the missing ones."""
    total = passed + failed + missing
    lower, _ = clopper_pearson(passed, total, confidence)
    _, upper = clopper_pearson(passed + missing, total, confidence)
    return RateEstimate(
        estimate=_point_estimate(passed, failed),
        lower=lower,
        upper=upper,
        method="clopper_pearson",
        observed=passed + failed,
        passed=passed,
        failed=failed,
        missing=missing,
        excluded=excluded,
        clusters=total,  # every case is its own cluster
    )


# -- the cluster bootstrap -----------------------------------------------------------------


def seed_from(*parts: str) -> int:
    """A deterministic 63-bit seed: the same data gives the same resamples on every machine.
    Each part is length-prefixed so ("ab", "c") and ("a", "bc") differ."""
    hasher = hashlib.sha256()
    for part in parts:
        encoded = str(part).encode("utf-8")
        hasher.update(f"{len(encoded)}:".encode("ascii") + encoded)
    return int.from_bytes(hasher.digest()[:8], "big") >> 1


@dataclass(frozen=True)
class _ClusterCounts:
    """Per-cluster counts, clusters in sorted-name order (so dict order never matters)."""

    passed: np.ndarray
    failed: np.ndarray
    missing: np.ndarray
    excluded: int

    @property
    def size(self) -> int:
        return len(self.passed)


def _count_by_cluster(outcomes_by_cluster: dict[str, list[str]]) -> _ClusterCounts:
    passed, failed, missing, excluded = [], [], [], 0
    for name in sorted(outcomes_by_cluster):
        outcomes = outcomes_by_cluster[name]
        _check_outcomes(outcomes)
        excluded += outcomes.count(EXCLUDED)
        if len(outcomes) == outcomes.count(EXCLUDED):
            continue  # a cluster with nothing to count is no cluster of this metric
        passed.append(outcomes.count(PASS))
        failed.append(outcomes.count(FAIL))
        missing.append(outcomes.count(MISSING))
    as_array = lambda values: np.asarray(values, dtype=float)  # noqa: E731
    return _ClusterCounts(as_array(passed), as_array(failed), as_array(missing), excluded)


def _check_outcomes(outcomes: Iterable[str]) -> None:
    unknown = sorted({outcome for outcome in outcomes if outcome not in OUTCOMES})
    if unknown:
        raise ValueError(f"unknown outcome(s) {unknown}; expected one of {', '.join(OUTCOMES)}")


def _resample_counts(rng: np.random.Generator, clusters: int, resamples: int) -> np.ndarray:
    """(resamples, clusters) matrix: how often each cluster is drawn in each resample."""
    drawn = rng.integers(0, clusters, size=(resamples, clusters))
    flat = drawn + np.arange(resamples)[:, None] * clusters
    return np.bincount(flat.ravel(), minlength=resamples * clusters).reshape(resamples, clusters).astype(float)


def _ratio_standard_error(totals_m, ratio, sum_y2, sum_ym, sum_m2, clusters: int):
    """Cluster-robust (linearised) standard error of the ratio sum(y)/sum(m):
    sqrt(G/(G-1) * sum_g (y_g - R m_g)^2) / sum(m), expanded so it works on resample totals."""
    squared_residuals = np.maximum(sum_y2 - 2 * ratio * sum_ym + ratio**2 * sum_m2, 0.0)
    return np.sqrt(clusters / (clusters - 1) * squared_residuals) / totals_m


def _bootstrap_t_interval(
    successes: np.ndarray, trials: np.ndarray, counts: np.ndarray, confidence: float
) -> tuple[float, float]:
    """Studentised bootstrap interval for sum(successes)/sum(trials) over clusters."""
    clusters = len(successes)
    ratio = successes.sum() / trials.sum()
    standard_error = float(
        _ratio_standard_error(
            trials.sum(), ratio,
            (successes**2).sum(), (successes * trials).sum(), (trials**2).sum(), clusters,
        )
    )
    # Clopper-Pearson treating each cluster as one case: the most conservative reading of how
    # correlated the cases within a cluster may be (a design effect as large as the cluster).
    clusters_as_cases = clopper_pearson(ratio * clusters, clusters, confidence)
    if standard_error <= 1e-12:
        # Every cluster has the same rate (all pass, all fail): the bootstrap sees no spread.
        return clusters_as_cases
    totals_y, totals_m = counts @ successes, counts @ trials
    ratios = totals_y / totals_m
    errors = _ratio_standard_error(
        totals_m, ratios,
        counts @ successes**2, counts @ (successes * trials), counts @ trials**2, clusters,
    )
    t_values = _t_statistics(ratios - ratio, errors)
    alpha = 1.0 - confidence
    t_low, t_high = np.quantile(t_values, [alpha / 2, 1 - alpha / 2])
    lower = ratio - t_high * standard_error
    upper = ratio - t_low * standard_error
    # Near 0 or 1 many resamples have almost no spread, their t values explode and the interval
    # with them (a 95% pass rate over 20 clusters got a lower bound of 0 in half the simulations).
    # No interval needs to be wider than the clusters-as-cases one, so it caps the width.
    lower = max(lower, clusters_as_cases[0])
    upper = min(upper, clusters_as_cases[1])
    return float(np.clip(lower, 0.0, 1.0)), float(np.clip(upper, 0.0, 1.0))


def _t_statistics(differences: np.ndarray, errors: np.ndarray) -> np.ndarray:
    """differences/errors, where a zero error (a resample of identical clusters) gives 0 when
    the resample agrees with the estimate and a huge t of the right sign otherwise."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t_values = np.where(errors > 0, differences / np.where(errors > 0, errors, 1.0), np.sign(differences) * _T_LIMIT)
    return np.clip(t_values, -_T_LIMIT, _T_LIMIT)


def cluster_bootstrap_rate(
    outcomes_by_cluster: dict[str, list[str]],
    confidence: float = 0.95,
    seed: int = 0,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> RateEstimate:
    """Bootstrap-t over clusters for the ratio estimator (passes / judged cases).

    The lower bound comes from the data with missing cases as failures, the upper bound from
    the data with missing cases as passes; both use the same resamples. Fewer than two
    clusters cannot be resampled and give (0, 1).
    """
    counts_by_cluster = _count_by_cluster(outcomes_by_cluster)
    passed = int(counts_by_cluster.passed.sum())
    failed = int(counts_by_cluster.failed.sum())
    missing = int(counts_by_cluster.missing.sum())
    lower, upper = _bootstrap_bounds(counts_by_cluster, confidence, seed, resamples)
    estimate = _point_estimate(passed, failed)
    if estimate is not None:  # a skewed bootstrap must not leave the estimate outside its interval
        lower, upper = min(lower, estimate), max(upper, estimate)
    return RateEstimate(
        estimate=estimate,
        lower=lower,
        upper=upper,
        method="cluster_bootstrap",
        observed=passed + failed,
        passed=passed,
        failed=failed,
        missing=missing,
        excluded=counts_by_cluster.excluded,
        clusters=counts_by_cluster.size,
    )


def _bootstrap_bounds(counts_by_cluster: _ClusterCounts, confidence: float, seed: int, resamples: int) -> tuple[float, float]:
    if counts_by_cluster.size < 2:
        return 0.0, 1.0
    rng = np.random.default_rng(seed)
    counts = _resample_counts(rng, counts_by_cluster.size, resamples)
    cases = counts_by_cluster.passed + counts_by_cluster.failed + counts_by_cluster.missing
    lower, _ = _bootstrap_t_interval(counts_by_cluster.passed, cases, counts, confidence)
    if not counts_by_cluster.missing.any():
        _, upper = _bootstrap_t_interval(counts_by_cluster.passed, cases, counts, confidence)
    else:
        _, upper = _bootstrap_t_interval(counts_by_cluster.passed + counts_by_cluster.missing, cases, counts, confidence)
    return lower, upper


# -- a metric's rate from its verdicts -----------------------------------------------------


@dataclass(frozen=True)
class RateEvidence:
    """A metric's rate, and the reasons (with the decision each forces) that stop a rule over
    it from being decided by the interval alone."""

    estimate: RateEstimate
    blocking_reasons: list[BlockingReason] = field(default_factory=list)

    @property
    def clustered(self) -> bool:
        return self.estimate.method == "cluster_bootstrap"


def rate_from_outcomes(
    rows: Iterable[tuple[str, str]],
    *,
    confidence: float = 0.95,
    allow_approximate: bool = False,
    min_clusters: int = 20,
) -> RateEvidence:
    """The rate of one metric from (group_id, outcome) rows.

    When some cluster holds more than one counted case the cases are not independent: the
    interval is the cluster bootstrap (an approximate method, so it needs the policy's
    permission and enough clusters), seeded from the sorted rows. Otherwise Clopper-Pearson.
    """
    rows = sorted((str(group), outcome) for group, outcome in rows)
    _check_outcomes(outcome for _, outcome in rows)
    outcomes_by_cluster: dict[str, list[str]] = defaultdict(list)
    for group, outcome in rows:
        outcomes_by_cluster[group].append(outcome)
    if not _is_clustered(outcomes_by_cluster):
        counted = [outcome for _, outcome in rows]
        estimate = exact_rate(
            counted.count(PASS), counted.count(FAIL), counted.count(MISSING), confidence,
            excluded=counted.count(EXCLUDED),
        )
        return RateEvidence(estimate)
    seed = seed_from(*(f"{group}\t{outcome}" for group, outcome in rows))
    estimate = cluster_bootstrap_rate(dict(outcomes_by_cluster), confidence, seed)
    return RateEvidence(estimate, _clustered_blocking_reasons(estimate.clusters, allow_approximate, min_clusters))


def _is_clustered(outcomes_by_cluster: dict[str, list[str]]) -> bool:
    return any(sum(outcome != EXCLUDED for outcome in outcomes) > 1 for outcomes in outcomes_by_cluster.values())


def _clustered_blocking_reasons(clusters: int, allow_approximate: bool, min_clusters: int) -> list[BlockingReason]:
    reasons: list[BlockingReason] = []
    if not allow_approximate:
        reasons.append((
            MANUAL_REVIEW,
            "approximate_method_not_permitted: cases share clusters (cluster bootstrap) "
            "and release.yaml has allow_approximate_methods: false",
        ))
    if clusters < min_clusters:
        reasons.append((INSUFFICIENT_EVIDENCE, f"insufficient_clusters: {clusters} clusters < min_clusters {min_clusters}"))
    return reasons


# -- the suite size that would decide a rule -----------------------------------------------


def suite_size_to_decide(estimate: float | None, bar: float, kind: BarKind, confidence: float = 0.95) -> int | None:
    """The smallest number of cases n such that, if cases went like these (round(estimate*n)
    passes), the Clopper-Pearson interval would clear the bar. None when no size would: the
    estimate is on the wrong side of the bar or on it, or even SUITE_SIZE_CAP cases fall short."""
    if estimate is None or not _estimate_clears(estimate, bar, kind):
        return None
    clears = lambda n: _interval_clears(estimate, n, bar, kind, confidence)  # noqa: E731
    high = 1
    while not clears(high):
        if high >= SUITE_SIZE_CAP:
            return None
        high = min(high * 2, SUITE_SIZE_CAP)
    low = high // 2  # does not clear (or is 0)
    while high - low > 1:  # bisection: rounding makes this near-monotone, which is all we claim
        middle = (low + high) // 2
        low, high = (low, middle) if clears(middle) else (middle, high)
    return high


def _estimate_clears(estimate: float, bar: float, kind: BarKind) -> bool:
    return estimate > bar if kind == "min" else estimate < bar


def _interval_clears(estimate: float, cases: int, bar: float, kind: BarKind, confidence: float) -> bool:
    lower, upper = clopper_pearson(round(estimate * cases), cases, confidence)
    return lower >= bar if kind == "min" else upper <= bar


# -- paired comparison of two versions ---------------------------------------------------


def paired_difference_interval(fixed: int, broken: int, paired: int, confidence: float) -> tuple[float, float]:
    """Exact conditional (McNemar-style) interval for candidate minus base rate: given the
    discordant pairs, the fixed count is binomial, and the difference is
    discordant * (2p - 1) / paired for its Clopper-Pearson bounds p."""
    discordant = fixed + broken
    if discordant == 0:
        return 0.0, 0.0
    lower, upper = clopper_pearson(fixed, discordant, confidence)
    return discordant * (2 * lower - 1) / paired, discordant * (2 * upper - 1) / paired


# -- multiplicity --------------------------------------------------------------------------


def benjamini_yekutieli(p_values: list[float], fdr: float = 0.1) -> list[bool]:
    """Which hypotheses BY rejects at false-discovery rate `fdr` (valid under any dependence):
    the k smallest p-values, for the largest k with p_(k) <= k * fdr / (m * sum_{i<=m} 1/i)."""
    count = len(p_values)
    if count == 0:
        return []
    harmonic = sum(1.0 / i for i in range(1, count + 1))
    order = sorted(range(count), key=lambda index: p_values[index])
    rejected_count = 0
    for rank, index in enumerate(order, start=1):
        if p_values[index] <= rank * fdr / (count * harmonic):
            rejected_count = rank
    rejected = [False] * count
    for index in order[:rejected_count]:
        rejected[index] = True
    return rejected
