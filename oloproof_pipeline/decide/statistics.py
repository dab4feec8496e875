"""Rates with intervals: exact Clopper-Pearson for independent cases, Clopper-Pearson at the
effective number of clusters (hulled with the exact all-or-nothing interval) where one cluster
holds several cases (decide/clustered.py), and
Benjamini-Yekutieli marks for exploratory slices. The suite size that would decide a rule is
in decide/suite_size.py, the paired difference between two versions in decide/paired.py.

Missing cases never narrow an interval: the lower bound counts them as failures and the upper
bound as successes, so a run that lost cases can only look less certain, never better.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Literal

from pydantic import BaseModel, ConfigDict
from scipy import special  # not scipy.stats: its import alone takes seconds, on every CLI start

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
from .clustered import EFFECTIVE_CLUSTERS_METHOD, effective_clusters_interval
from .suite_size import design_effect

EXACT_METHOD = "clopper_pearson"
# The names stored in the gate table's `method` column (tests check they match the constants).
Method = Literal["clopper_pearson", "clopper_pearson_effective_clusters"]
# A reason that stops a rule from being decided by its interval, with the decision it forces.
BlockingReason = tuple[BlockingKind, str]


# -- Clopper-Pearson -----------------------------------------------------------------------


def clopper_pearson(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided exact interval for a binomial proportion. Counts must be whole numbers: the
    beta quantiles would accept 2.5 of 5, but no binomial count is, and its "exact" coverage
    would then hold for nothing (a clustered rate's effective counts go through
    decide/clustered.py, which says what they mean). No trials give (0, 1)."""
    for name, count in (("successes", successes), ("trials", trials)):
        if isinstance(count, bool) or int(count) != count:
            raise ValueError(f"{name} must be a whole number, got {count!r}")
    if trials < 0:
        raise ValueError(f"trials must not be negative, got {trials!r}")
    if trials == 0:
        return 0.0, 1.0
    if successes < 0 or successes > trials:
        raise ValueError(f"successes {successes} outside 0..{trials}")
    alpha = 1.0 - confidence
    lower = 0.0 if successes <= 0 else float(special.betaincinv(successes, trials - successes + 1, alpha / 2))
    upper = 1.0 if successes >= trials else float(special.betaincinv(successes + 1, trials - successes, 1 - alpha / 2))
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
    # How much clustering inflates the variance against independent cases (1 for them): a
    # suite size to decide a rule is scaled by it.
    design_effect: float = 1.0


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
        method=EXACT_METHOD,
        observed=passed + failed,
        passed=passed,
        failed=failed,
        missing=missing,
        excluded=excluded,
        clusters=total,  # every case is its own cluster
    )


# -- clustered cases -----------------------------------------------------------------------


@dataclass(frozen=True)
class _ClusterCounts:
    """Per-cluster counts, clusters in sorted-name order (so dict order never matters)."""

    passed: list[int]
    failed: list[int]
    missing: list[int]
    excluded: int

    @property
    def judged(self) -> list[int]:
        return [won + lost for won, lost in zip(self.passed, self.failed)]

    @property
    def cases(self) -> list[int]:
        """The cases each cluster counts towards the rate, missing ones included."""
        return [judged + missing for judged, missing in zip(self.judged, self.missing)]


def _count_by_cluster(outcomes_by_cluster: dict[str, list[str]]) -> _ClusterCounts:
    passed, failed, missing, excluded = [], [], [], 0
    for name in sorted(outcomes_by_cluster):
        outcomes = outcomes_by_cluster[name]
        tally = [outcomes.count(outcome) for outcome in (PASS, FAIL, MISSING, EXCLUDED)]
        if sum(tally) != len(outcomes):
            _check_outcomes(outcomes)
        excluded += tally[3]
        if tally[3] == len(outcomes):
            continue  # a cluster with nothing to count is no cluster of this metric
        passed.append(tally[0])
        failed.append(tally[1])
        missing.append(tally[2])
    return _ClusterCounts(passed, failed, missing, excluded)


def _check_outcomes(outcomes: Iterable[str]) -> None:
    unknown = sorted({outcome for outcome in outcomes if outcome not in OUTCOMES})
    if unknown:
        raise ValueError(f"unknown outcome(s) {unknown}; expected one of {', '.join(OUTCOMES)}")


def clustered_rate(outcomes_by_cluster: dict[str, list[str]], confidence: float = 0.95) -> RateEstimate:
    """The rate over clusters of any sizes: Clopper-Pearson at the effective number of
    clusters, with its hull with the exact all-or-nothing interval where one cluster holds
    a large share of the cases (decide/clustered.py), widened by the missing cases.

    Why this interval alone: its coverage with unequal cluster sizes, computed exactly over a
    grid (tests/test_statistics.py, tests/test_decide_clustered.py) and simulated
    (tests/test_decide_clustered.py), stays at 0.95 or more, while the studentised
    cluster bootstrap used before covered as little as 0.56 with its clusters-as-cases cap
    (0.77 without it, in a simulation made while choosing) with a few large clusters and an
    intra-cluster correlation (ICC) of 0.5-0.8. Intersecting the two (the bootstrap where it
    is narrower) covers no better than the bootstrap; their hull only widens this interval.

    The design effect that scales a suite size is the one at an ICC of 1, the case-weighted
    mean cluster size: the interval assumes that worst case whatever the data show, so its
    width shrinks only as N / that size. A smaller design effect from an estimated ICC names
    suites this interval decides far less often than the size promises when the true ICC is
    low (0-54% instead of 80% in a simulation; tests/test_gate.py checks the size shipped)."""
    counts = _count_by_cluster(outcomes_by_cluster)
    passed, failed, missing = sum(counts.passed), sum(counts.failed), sum(counts.missing)
    lower, upper = effective_clusters_interval(
        counts.passed, counts.judged, confidence, missing_by_cluster=counts.missing
    )
    return RateEstimate(
        estimate=_point_estimate(passed, failed),
        lower=lower,
        upper=upper,
        method=EFFECTIVE_CLUSTERS_METHOD,
        observed=passed + failed,
        passed=passed,
        failed=failed,
        missing=missing,
        excluded=counts.excluded,
        clusters=len(counts.passed),
        design_effect=design_effect(counts.cases, icc=1.0),
    )


# -- a metric's rate from its verdicts -----------------------------------------------------


@dataclass(frozen=True)
class RateEvidence:
    """A metric's rate, and the reasons (with the decision each forces) that stop a rule over
    it from being decided by the interval alone."""

    estimate: RateEstimate
    blocking_reasons: list[BlockingReason] = field(default_factory=list)

    @property
    def clustered(self) -> bool:
        return self.estimate.method == EFFECTIVE_CLUSTERS_METHOD


def rate_from_outcomes(
    rows: Iterable[tuple[str, str]],
    *,
    confidence: float = 0.95,
    allow_approximate: bool = False,
    min_clusters: int = 20,
) -> RateEvidence:
    """The rate of one metric from (group_id, outcome) rows.

    When some cluster holds more than one counted case the cases are not independent: the
    interval is Clopper-Pearson at the effective number of clusters, an approximate method
    (its coverage rests on a model of the clusters), so it needs the policy's permission and
    enough clusters. Otherwise exact Clopper-Pearson.
    """
    rows = [(str(group), outcome) for group, outcome in rows]
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
    estimate = clustered_rate(dict(outcomes_by_cluster), confidence)
    return RateEvidence(estimate, _clustered_blocking_reasons(estimate.clusters, allow_approximate, min_clusters))


def _is_clustered(outcomes_by_cluster: dict[str, list[str]]) -> bool:
    return any(len(outcomes) - outcomes.count(EXCLUDED) > 1 for outcomes in outcomes_by_cluster.values())


def _clustered_blocking_reasons(clusters: int, allow_approximate: bool, min_clusters: int) -> list[BlockingReason]:
    reasons: list[BlockingReason] = []
    if not allow_approximate:
        reasons.append((
            MANUAL_REVIEW,
            f"approximate_method_not_permitted: cases share clusters ({EFFECTIVE_CLUSTERS_METHOD}) "
            "and release.yaml has allow_approximate_methods: false",
        ))
    if clusters < min_clusters:
        reasons.append((INSUFFICIENT_EVIDENCE, f"insufficient_clusters: {clusters} clusters < min_clusters {min_clusters}"))
    return reasons


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
