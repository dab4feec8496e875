"""Intervals for a clustered pass rate with unequal cluster sizes, and their coverage.

The shipped interval (`effective_clusters_interval`) is the hull of Clopper-Pearson at n* and
the exact interval when every cluster passes or fails as one (`all_or_nothing_interval`): n*
alone under-covered (0.907) when one cluster holds a large share of the cases (issue 24).

Two coverage checks (print the tables with `pytest -s`):
- a seeded simulation over designs with many singletons and a few large clusters, intra-cluster
  correlation (ICC) from 0 to 0.8 through a beta-binomial, true rates 0.7, 0.8, 0.9, 1000
  replications per cell, for both methods;
- for `effective_clusters_interval`, whose interval depends on the data only through the total
  number of passes, exact coverage: the distribution of that total is the convolution of the
  clusters' beta-binomial distributions, over a fine grid of true rates and ICC up to 1,
  including designs where one cluster holds 15-50% of the cases; the table shows Clopper-Pearson
  at n* alone (the interval before issue 24) beside it, coverage and mean width.

Slack: coverage >= 0.93 (nominal 0.95 minus 0.02, which also absorbs the simulation's Monte
Carlo error of about 0.007 per cell) everywhere for `effective_clusters_interval`. Korn-Graubard
is asserted only where it is claimed to hold (no clustering, ICC = 0); the table shows where it
does not.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from oloproof_pipeline.decide.clustered import (
    EFFECTIVE_CLUSTERS_METHOD,
    KORN_GRAUBARD_METHOD,
    all_or_nothing_interval,
    effective_clusters,
    effective_clusters_interval,
    korn_graubard_effective_size,
    korn_graubard_interval,
)

CONFIDENCE = 0.95
SEED = 20240612
REPLICATIONS = 1000

DESIGNS = {
    "30 x 1 + 5 x 10": [1] * 30 + [10] * 5,
    "20 of sizes 1..20": list(range(1, 21)),
    "50 x 1 + 2 x 25": [1] * 50 + [25] * 2,
    "100 x 1 + 5 x 20": [1] * 100 + [20] * 5,
}
# One cluster holding a large share of the cases: 20%, 25%, 50%, 17% and 50%.
DOMINANT_CLUSTER_DESIGNS = {
    "200 x 1 + 1 x 50": [1] * 200 + [50],
    "60 x 3 + 1 x 60": [3] * 60 + [60],
    "100 x 1 + 1 x 100": [1] * 100 + [100],
    "150 x 1 + 1 x 30": [1] * 150 + [30],
    "40 x 1 + 1 x 40": [1] * 40 + [40],
}
EXACT_DESIGNS = {
    **DESIGNS,
    **DOMINANT_CLUSTER_DESIGNS,
    "20 x 1 + 10 x 3 + 3 x 15": [1] * 20 + [3] * 10 + [15] * 3,
    "10 x 5 (equal)": [5] * 10,
    "3 x 10 (equal)": [10] * 3,
    "200 x 1 (independent)": [1] * 200,
}
CORRELATIONS = (0.0, 0.2, 0.5, 0.8)
RATES = (0.7, 0.8, 0.9)


def _clopper_pearson(passes: float, cases: float) -> tuple[float, float]:
    alpha = 1 - CONFIDENCE
    lower = 0.0 if passes <= 0 else stats.beta.ppf(alpha / 2, passes, cases - passes + 1)
    upper = 1.0 if passes >= cases else stats.beta.ppf(1 - alpha / 2, passes + 1, cases - passes)
    return float(lower), float(upper)


def _cluster_rates(rng: np.random.Generator, rate: float, correlation: float, shape: tuple[int, int]) -> np.ndarray:
    """Per-cluster pass probabilities: Beta with mean `rate` and ICC `correlation`
    (a + b = 1/ICC - 1), so passes in a cluster of m are beta-binomial."""
    if correlation == 0:
        return np.full(shape, rate)
    scale = (1 - correlation) / correlation
    return rng.beta(rate * scale, (1 - rate) * scale, size=shape)


# -- spot values ---------------------------------------------------------------------------


def test_singletons_give_plain_clopper_pearson():
    passed = [1] * 17 + [0] * 3
    expected = stats.binomtest(17, 20).proportion_ci(confidence_level=CONFIDENCE, method="exact")
    assert effective_clusters_interval(passed, [1] * 20) == pytest.approx((expected.low, expected.high), abs=1e-10)
    # Korn-Graubard on independent cases: the C/(C-1) variance factor makes n_eff = N - 1, and
    # the t-ratio is 1 (C - 1 = N - 1).
    assert korn_graubard_effective_size(passed, [1] * 20) == pytest.approx(19)
    assert korn_graubard_interval(passed, [1] * 20) == pytest.approx(_clopper_pearson(0.85 * 19, 19), abs=1e-12)


def test_equal_sizes_give_clusters_as_cases():
    passed, sizes = [5, 4, 5, 3, 5, 5, 2, 5], [5] * 8
    rate = sum(passed) / sum(sizes)
    assert effective_clusters(sizes) == pytest.approx(8)
    assert effective_clusters_interval(passed, sizes) == pytest.approx(_clopper_pearson(rate * 8, 8), abs=1e-12)


def test_unequal_sizes_count_fewer_effective_clusters():
    sizes = [1] * 30 + [10] * 5
    assert effective_clusters(sizes) == pytest.approx(80**2 / 530)
    assert effective_clusters(sizes) < len(sizes)


def test_korn_graubard_matches_a_hand_computation():
    passed = [1] * 25 + [0] * 5 + [8, 10, 9, 10, 3]
    sizes = [1] * 30 + [10] * 5
    clusters, total = len(sizes), sum(sizes)
    rate = sum(passed) / total
    residuals = np.array(passed) - rate * np.array(sizes)
    variance = clusters / (clusters - 1) * (residuals**2).sum() / total**2
    n_eff = min(total, rate * (1 - rate) / variance)
    ratio = stats.t.ppf(0.975, total - 1) / stats.t.ppf(0.975, clusters - 1)
    effective = n_eff * ratio**2
    assert korn_graubard_effective_size(passed, sizes) == pytest.approx(effective, rel=1e-12)
    assert korn_graubard_interval(passed, sizes) == pytest.approx(_clopper_pearson(rate * effective, effective), abs=1e-12)


def test_korn_graubard_all_passing_uses_the_number_of_clusters():
    sizes = [1] * 10 + [6] * 4
    assert korn_graubard_effective_size(sizes, sizes) == 14
    lower, upper = korn_graubard_interval(sizes, sizes)
    assert lower == pytest.approx(0.025 ** (1 / 14)) and upper == 1.0


def _all_or_nothing_tails(sizes: list[int], total_passes: int, rate: float) -> tuple[float, float]:
    """P(total >= t), P(total <= t) when each cluster passes as one, by listing every subset."""
    at_least = at_most = 0.0
    for passing in itertools.product((0, 1), repeat=len(sizes)):
        probability = math.prod(rate if won else 1 - rate for won in passing)
        total = sum(size for size, won in zip(sizes, passing) if won)
        at_least += probability * (total >= total_passes)
        at_most += probability * (total <= total_passes)
    return at_least, at_most


def test_all_or_nothing_interval_inverts_the_exact_tails():
    sizes = [1, 1, 2, 3, 5, 5, 8]
    for total_passes in (1, 4, 9, 13, 24):
        lower, upper = all_or_nothing_interval(_passes_in_order(sizes, total_passes), sizes)
        assert _all_or_nothing_tails(sizes, total_passes, lower)[0] == pytest.approx(0.025, abs=1e-9)
        assert _all_or_nothing_tails(sizes, total_passes, upper)[1] == pytest.approx(0.025, abs=1e-9)
    assert all_or_nothing_interval([0] * 7, sizes)[0] == 0.0
    assert all_or_nothing_interval(sizes, sizes)[1] == 1.0


def test_all_or_nothing_interval_over_single_cases_is_clopper_pearson():
    passed = [1] * 41 + [0] * 9
    expected = stats.binomtest(41, 50).proportion_ci(confidence_level=CONFIDENCE, method="exact")
    assert all_or_nothing_interval(passed, [1] * 50) == pytest.approx((expected.low, expected.high), abs=1e-10)


def test_the_interval_is_the_hull_of_its_two_halves():
    sizes = [1] * 200 + [50]
    passed = [1] * 178 + [0] * 22 + [0]  # the big cluster failed, 178 of the 200 singletons passed
    rate = sum(passed) / sum(sizes)
    smooth = _clopper_pearson(rate * effective_clusters(sizes), effective_clusters(sizes))
    lumpy = all_or_nothing_interval(passed, sizes)
    lower, upper = effective_clusters_interval(passed, sizes)
    assert (lower, upper) == pytest.approx((min(smooth[0], lumpy[0]), max(smooth[1], lumpy[1])), abs=1e-12)
    # Issue 24: n* alone gave (0.488, 0.879) here, below a true rate of 0.89 that puts the big
    # cluster's failure at 11%; the all-or-nothing half reaches past it.
    assert smooth[1] < 0.89 < upper


def test_missing_cases_widen_the_worst_case_way():
    passed, judged, missing = [1, 0, 1, 4, 7], [1, 1, 1, 5, 9], [0, 0, 0, 1, 1]
    for interval in (effective_clusters_interval, korn_graubard_interval):
        plain = interval(passed, judged)
        widened = interval(passed, judged, missing_by_cluster=missing)
        cases = [j + m for j, m in zip(judged, missing)]
        assert widened[0] == interval(passed, cases)[0]
        assert widened[1] == interval([p + m for p, m in zip(passed, missing)], cases)[1]
        assert widened[0] <= plain[0] and widened[1] >= plain[1]


def test_no_cases_and_bad_input():
    assert effective_clusters_interval([], []) == (0.0, 1.0)
    assert korn_graubard_interval([0, 0], [0, 0]) == (0.0, 1.0)
    with pytest.raises(ValueError):
        effective_clusters_interval([3], [2])
    with pytest.raises(ValueError):
        korn_graubard_interval([1, 2], [2])
    with pytest.raises(ValueError):
        effective_clusters_interval([1], [2], missing_by_cluster=[-1])


# -- simulated coverage --------------------------------------------------------------------


def test_simulated_coverage_with_unequal_cluster_sizes():
    rng = np.random.default_rng(SEED)
    header = f"{'design':>18} {'ICC':>4} | " + " ".join(f"{'p=' + str(rate):>13}" for rate in RATES) + " | widths (EC / KG)"
    lines = ["", f"clustered intervals, simulated coverage at {CONFIDENCE}, {REPLICATIONS} replications per cell, seed {SEED}",
             f"EC = {EFFECTIVE_CLUSTERS_METHOD}, KG = {KORN_GRAUBARD_METHOD}; each cell: EC / KG", header]
    effective_worst, korn_graubard_by_cell = 1.0, {}
    for name, sizes in DESIGNS.items():
        sizes_array = np.array(sizes)
        for correlation in CORRELATIONS:
            cells, widths = [], []
            for rate in RATES:
                covered = {"EC": 0, "KG": 0}
                width = {"EC": 0.0, "KG": 0.0}
                rates = _cluster_rates(rng, rate, correlation, (REPLICATIONS, len(sizes)))
                samples = rng.binomial(sizes_array, rates).tolist()
                for passed in samples:
                    for label, interval in (("EC", effective_clusters_interval), ("KG", korn_graubard_interval)):
                        lower, upper = interval(passed, sizes, CONFIDENCE)
                        covered[label] += lower <= rate <= upper
                        width[label] += upper - lower
                coverage = {label: count / REPLICATIONS for label, count in covered.items()}
                effective_worst = min(effective_worst, coverage["EC"])
                korn_graubard_by_cell[(name, correlation, rate)] = coverage["KG"]
                assert coverage["EC"] >= 0.93, (name, correlation, rate, coverage["EC"])
                cells.append(f"{coverage['EC']:.3f} / {coverage['KG']:.3f}")
                widths.append(f"{width['EC'] / REPLICATIONS:.2f}/{width['KG'] / REPLICATIONS:.2f}")
            lines.append(f"{name:>18} {correlation:4.1f} | " + " ".join(f"{cell:>13}" for cell in cells) + " | " + " ".join(widths))
    korn_graubard_worst = min(korn_graubard_by_cell.values())
    lines.append(f"minimum coverage: EC {effective_worst:.3f}, KG {korn_graubard_worst:.3f}")
    print("\n".join(lines))
    for (name, correlation, rate), coverage in korn_graubard_by_cell.items():
        if correlation == 0:
            assert coverage >= 0.93, (name, rate, coverage)


# -- exact coverage of the effective-clusters interval -------------------------------------


def total_passes_distribution(sizes: list[int], rate: float, correlation: float) -> np.ndarray:
    """P(total passes = t), t = 0..N: the convolution of each cluster's beta-binomial (a binomial
    at ICC 0; all-or-nothing at ICC 1)."""
    total = sum(sizes)
    distribution = np.zeros(total + 1)
    distribution[0] = 1.0
    for size, count in Counter(sizes).items():
        passes = np.arange(size + 1)
        if correlation == 0:
            pmf = stats.binom.pmf(passes, size, rate)
        elif correlation == 1:
            pmf = np.zeros(size + 1)
            pmf[0], pmf[size] = 1 - rate, rate
        else:
            scale = (1 - correlation) / correlation
            pmf = stats.betabinom.pmf(passes, size, rate * scale, (1 - rate) * scale)
        while count:  # convolve `count` copies of pmf in by squaring
            if count & 1:
                distribution = np.convolve(distribution, pmf)[: total + 1]
            count >>= 1
            if count:
                pmf = np.convolve(pmf, pmf)
    return distribution


def _passes_in_order(sizes: list[int], total_passes: int) -> list[int]:
    passed, left = [], total_passes
    for size in sizes:
        passed.append(min(size, left))
        left -= passed[-1]
    return passed


def test_effective_clusters_interval_depends_only_on_total_passes():
    rng = np.random.default_rng(SEED)
    sizes = DESIGNS["30 x 1 + 5 x 10"]
    for total_passes in (0, 7, 40, 71, 80):
        expected = effective_clusters_interval(_passes_in_order(sizes, total_passes), sizes)
        for _ in range(5):
            order = rng.permutation(len(sizes))
            shuffled = [sizes[i] for i in order]
            passed = _passes_in_order(shuffled, total_passes)
            assert effective_clusters_interval(passed, shuffled) == pytest.approx(expected, abs=1e-14)


def test_exact_coverage_of_the_effective_clusters_interval():
    rates = [0.005, *np.round(np.arange(0.02, 0.981, 0.02), 2), 0.89, 0.995]
    correlations = (0.0, 0.2, 0.5, 0.8, 0.95, 1.0)
    lines = ["", f"{EFFECTIVE_CLUSTERS_METHOD}: exact minimum coverage over true rates 0.005, 0.02..0.98, 0.89, 0.995; "
             "in brackets Clopper-Pearson at n* alone (before issue 24)",
             f"{'design':>26} {'n*':>5} {'top':>4} | " + " ".join(f"{'ICC ' + str(c):>13}" for c in correlations)
             + " | mean width p=0.8, ICC 0 / 0.5"]
    worst = 1.0
    for name, sizes in EXACT_DESIGNS.items():
        total, effective = sum(sizes), effective_clusters(sizes)
        bounds = np.array([effective_clusters_interval(_passes_in_order(sizes, t), sizes) for t in range(total + 1)])
        alone = np.array([_clopper_pearson(t / total * effective, effective) for t in range(total + 1)])
        cells = []
        for correlation in correlations:
            coverage, coverage_alone = [], []
            for rate in rates:
                distribution = total_passes_distribution(sizes, rate, correlation)
                coverage.append(distribution[(bounds[:, 0] <= rate) & (rate <= bounds[:, 1])].sum())
                coverage_alone.append(distribution[(alone[:, 0] <= rate) & (rate <= alone[:, 1])].sum())
            worst = min(worst, min(coverage))
            assert min(coverage) >= 0.93, (name, correlation, min(coverage))
            cells.append(f"{min(coverage):.3f} ({min(coverage_alone):.3f})")
        widths = []
        for correlation in (0.0, 0.5):
            distribution = total_passes_distribution(sizes, 0.8, correlation)
            widths.append(f"{distribution @ (bounds[:, 1] - bounds[:, 0]):.3f} ({distribution @ (alone[:, 1] - alone[:, 0]):.3f})")
        lines.append(f"{name:>26} {effective:5.1f} {max(sizes) / total:4.2f} | " + " ".join(f"{cell:>13}" for cell in cells)
                     + " | " + " / ".join(widths))
    lines.append(f"minimum over all: {worst:.3f} (top: the largest cluster's share of the cases)")
    print("\n".join(lines))


def _minimum_exact_coverage(sizes: list[int], correlation: float, interval) -> float:
    total = sum(sizes)
    bounds = np.array([interval(_passes_in_order(sizes, t), sizes) for t in range(total + 1)])
    coverage = []
    for rate in np.round(np.arange(0.02, 0.981, 0.02), 2):
        distribution = total_passes_distribution(sizes, rate, correlation)
        coverage.append(distribution[(bounds[:, 0] <= rate) & (rate <= bounds[:, 1])].sum())
    return min(coverage)


def test_each_half_alone_undercovers_where_the_other_holds():
    """Why the hull: Clopper-Pearson at n* misses with a dominant cluster at ICC 1, the
    all-or-nothing interval with one at ICC 0; the hull holds at both."""
    def n_star_alone(passed, sizes):
        effective = effective_clusters(sizes)
        return _clopper_pearson(sum(passed) / sum(sizes) * effective, effective)

    dominant, half = DOMINANT_CLUSTER_DESIGNS["200 x 1 + 1 x 50"], DOMINANT_CLUSTER_DESIGNS["100 x 1 + 1 x 100"]
    assert _minimum_exact_coverage(dominant, 1.0, n_star_alone) < 0.91
    assert _minimum_exact_coverage(half, 0.0, all_or_nothing_interval) < 0.9
    assert _minimum_exact_coverage(dominant, 1.0, effective_clusters_interval) >= 0.95
    assert _minimum_exact_coverage(half, 0.0, effective_clusters_interval) >= 0.95
