import random
import typing

import numpy as np
import pytest
from scipy import stats

from oloproof_pipeline.decide.clustered import EFFECTIVE_CLUSTERS_METHOD, effective_clusters_interval
from oloproof_pipeline.decide.statistics import (
    EXACT_METHOD,
    Method,
    benjamini_yekutieli,
    clopper_pearson,
    clustered_rate,
    exact_rate,
    rate_from_outcomes,
)
from oloproof_pipeline.decide.suite_size import design_effect

from test_decide_clustered import _clopper_pearson as _fractional_clopper_pearson
from test_decide_clustered import _passes_in_order, total_passes_distribution

# -- Clopper-Pearson -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "successes, trials, confidence",
    [(0, 10, 0.95), (10, 10, 0.95), (3, 10, 0.90), (7, 20, 0.99), (50, 100, 0.95), (1, 1, 0.80), (59, 60, 0.95)],
)
def test_clopper_pearson_matches_scipy_exact(successes, trials, confidence):
    expected = stats.binomtest(successes, trials).proportion_ci(confidence_level=confidence, method="exact")
    lower, upper = clopper_pearson(successes, trials, confidence)
    assert lower == pytest.approx(expected.low, abs=1e-10)
    assert upper == pytest.approx(expected.high, abs=1e-10)


def test_clopper_pearson_edges():
    assert clopper_pearson(0, 0) == (0.0, 1.0)
    assert clopper_pearson(0, 5)[0] == 0.0
    assert clopper_pearson(5, 5)[1] == 1.0
    assert clopper_pearson(np.int64(3), 5.0) == clopper_pearson(3, 5)  # whole numbers of any type


@pytest.mark.parametrize("successes, trials", [(2.5, 5), (2, 5.5), (0.1, 0), (True, 5), (6, 5), (-1, 5), (0, -2)])
def test_clopper_pearson_refuses_counts_no_binomial_has(successes, trials):
    with pytest.raises(ValueError):
        clopper_pearson(successes, trials)


# -- missing cases widen -------------------------------------------------------------------


def test_exact_rate_missing_widens_interval():
    complete = exact_rate(8, 2, 0, 0.95)
    with_missing = exact_rate(8, 2, 3, 0.95)
    assert complete.estimate == with_missing.estimate == 0.8
    assert with_missing.lower < complete.lower
    assert with_missing.upper > complete.upper
    assert with_missing.lower == pytest.approx(clopper_pearson(8, 13)[0])
    assert with_missing.upper == pytest.approx(clopper_pearson(11, 13)[1])
    assert (with_missing.observed, with_missing.missing, with_missing.method) == (10, 3, "clopper_pearson")


def test_exact_rate_with_nothing_observed():
    empty = exact_rate(0, 0, 0)
    assert empty.estimate is None and (empty.lower, empty.upper) == (0.0, 1.0)
    only_missing = exact_rate(0, 0, 4)
    assert only_missing.estimate is None and (only_missing.lower, only_missing.upper) == (0.0, 1.0)


# -- clustered cases: Clopper-Pearson at the effective number of clusters --------------------
#
# Why this method (see `clustered_rate`): the studentised cluster bootstrap the gate used
# before, capped by the clusters-as-cases interval, covered 0.56-0.86 with a few large
# clusters and a strong intra-cluster correlation (ICC); the reference bootstrap below shows
# it. The effective-clusters interval (itself the hull of Clopper-Pearson at n* and the exact
# all-or-nothing interval, decide/clustered.py) is used without the bootstrap: intersected with
# it, it covers no better than the bootstrap, and a hull with it is only wider.


def _clustered_rows(clusters=24, seed=3):
    rng = random.Random(seed)
    rows = []
    for cluster in range(clusters):
        rate = rng.choice([0.5, 0.8, 1.0])
        for copy in range(3):
            rows.append((f"case-{cluster:02d}", "PASS" if rng.random() < rate else "FAIL"))
    return rows


def test_method_names_are_the_stored_ones():
    assert EXACT_METHOD == "clopper_pearson" and EFFECTIVE_CLUSTERS_METHOD == "clopper_pearson_effective_clusters"
    assert set(typing.get_args(Method)) == {EXACT_METHOD, EFFECTIVE_CLUSTERS_METHOD}


def test_same_data_gives_the_same_interval_whatever_the_order():
    rows = _clustered_rows()
    first = rate_from_outcomes(rows, allow_approximate=True)
    shuffled = list(rows)
    random.Random(99).shuffle(shuffled)
    second = rate_from_outcomes(shuffled, allow_approximate=True)
    assert first.estimate.method == EFFECTIVE_CLUSTERS_METHOD and first.clustered
    assert first.estimate == second.estimate
    assert first.estimate.clusters == 24 and first.estimate.observed == 72


def test_clustered_rate_is_the_effective_clusters_interval():
    outcomes = {"b": ["PASS", "FAIL", "PASS"], "a": ["PASS"], "c": ["FAIL", "FAIL", "PASS", "MISSING"], "d": ["EXCLUDED"]}
    rate = clustered_rate(outcomes, 0.95)
    # Clusters in name order (a, b, c; d has nothing to count), missing cases widening.
    expected = effective_clusters_interval([1, 2, 1], [1, 3, 3], 0.95, missing_by_cluster=[0, 0, 1])
    assert (rate.lower, rate.upper) == expected
    assert (rate.passed, rate.failed, rate.missing, rate.excluded, rate.clusters) == (4, 3, 1, 1, 3)
    assert rate.estimate == 4 / 7
    reordered = {name: outcomes[name] for name in ["d", "c", "a", "b"]}
    assert clustered_rate(reordered, 0.95) == rate


def test_equal_clusters_all_pass_or_all_fail_count_clusters_as_cases():
    all_pass = clustered_rate({f"c{i}": ["PASS"] * 3 for i in range(20)}, 0.95)
    all_fail = clustered_rate({f"c{i}": ["FAIL"] * 3 for i in range(20)}, 0.95)
    assert all_pass.estimate == 1.0 and all_pass.upper == 1.0
    assert all_pass.lower == pytest.approx(clopper_pearson(20, 20)[0])  # 20 clusters of 3: n* = 20
    assert all_fail.estimate == 0.0 and all_fail.lower == 0.0
    assert all_fail.upper == pytest.approx(clopper_pearson(0, 20)[1])


def test_clustered_missing_widens_interval():
    base = {f"c{i}": ["PASS", "PASS", "FAIL"] if i % 3 else ["PASS"] * 3 for i in range(24)}
    with_missing = {name: outcomes + (["MISSING"] if index < 4 else []) for index, (name, outcomes) in enumerate(base.items())}
    complete = clustered_rate(base, 0.95)
    widened = clustered_rate(with_missing, 0.95)
    assert widened.estimate == complete.estimate
    assert widened.missing == 4
    assert widened.lower < complete.lower
    assert widened.upper > complete.upper
    assert widened.lower <= widened.estimate <= widened.upper


def test_design_effect_is_the_case_weighted_cluster_size():
    # The interval assumes every cluster passes or fails as one (ICC 1), so a suite size is
    # scaled by the design effect at ICC 1: sum(m^2) / sum(m), missing cases included.
    sizes = [1] * 30 + [10] * 5
    outcomes = {f"g{index:02d}": ["PASS"] * (size - 1) + ["FAIL"] for index, size in enumerate(sizes)}
    rate = clustered_rate(outcomes, 0.95)
    assert rate.design_effect == pytest.approx(design_effect(sizes, 1.0)) == pytest.approx(530 / 80)
    assert exact_rate(30, 10).design_effect == 1.0


# Coverage of the shipped method (`clustered_rate`, which rate_from_outcomes calls for clustered
# rows, as tested above) with unequal cluster sizes: many singletons and a few large clusters,
# pass rates per cluster from a beta distribution with the given ICC (beta-binomial cases).
# Its interval depends on the outcomes only through the total of passes (checked below on
# shuffled clusters), so its coverage is computed exactly from the distribution of that total
# (tests/test_decide_clustered.py), not simulated a second time: that file's seeded simulation
# covers the same designs. Slack: coverage >= 0.93, nominal 0.95 less 0.02.
COVERAGE_SEED = 20241130
COVERAGE_DESIGNS = {
    "30 x 1 + 5 x 10": [1] * 30 + [10] * 5,
    "20 of sizes 1..20": list(range(1, 21)),
    "50 x 1 + 2 x 25": [1] * 50 + [25] * 2,
    "100 x 1 + 5 x 20": [1] * 100 + [20] * 5,
    "24 x 3 (equal)": [3] * 24,
    "200 x 1 + 1 x 50": [1] * 200 + [50],  # one cluster holds 20% of the cases (issue 24)
}
COVERAGE_CORRELATIONS = (0.0, 0.5, 0.8, 1.0)
COVERAGE_RATES = (0.7, 0.8, 0.9, 0.95)


def _cluster_pass_counts(rng, sizes, rate, correlation, replications):
    if correlation == 0:
        rates = np.full((replications, len(sizes)), rate)
    else:
        scale = (1 - correlation) / correlation
        rates = rng.beta(rate * scale, (1 - rate) * scale, size=(replications, len(sizes)))
    return rng.binomial(np.array(sizes), rates)


def _outcomes_by_cluster(sizes, passed):
    return {f"g{index:03d}": ["PASS"] * won + ["FAIL"] * (size - won) for index, (size, won) in enumerate(zip(sizes, passed))}


def test_clustered_coverage_with_unequal_cluster_sizes():
    rng = np.random.default_rng(COVERAGE_SEED)
    lines = ["", f"clustered rate ({EFFECTIVE_CLUSTERS_METHOD}) with unequal cluster sizes: exact coverage at "
             f"0.95; mean width in brackets",
             f"{'design':>18} {'ICC':>4} | " + " ".join(f"{'p=' + str(rate):>13}" for rate in COVERAGE_RATES)]
    worst = 1.0
    for name, sizes in COVERAGE_DESIGNS.items():
        bounds = []
        for total_passes in range(sum(sizes) + 1):
            estimate = clustered_rate(_outcomes_by_cluster(sizes, _passes_in_order(sizes, total_passes)))
            bounds.append((estimate.lower, estimate.upper))
            # The same total over the clusters in another order: the same interval.
            order = rng.permutation(len(sizes))
            shuffled = [sizes[i] for i in order]
            again = clustered_rate(_outcomes_by_cluster(shuffled, _passes_in_order(shuffled, total_passes)))
            assert (again.lower, again.upper) == pytest.approx((estimate.lower, estimate.upper), abs=1e-12)
        lower, upper = np.array(bounds).T
        for correlation in COVERAGE_CORRELATIONS:
            cells = []
            for rate in COVERAGE_RATES:
                distribution = total_passes_distribution(sizes, rate, correlation)
                coverage = distribution[(lower <= rate) & (rate <= upper)].sum()
                worst = min(worst, coverage)
                assert coverage >= 0.93, (name, correlation, rate, coverage)
                cells.append(f"{coverage:.3f} ({(distribution * (upper - lower)).sum():.2f})")
            lines.append(f"{name:>18} {correlation:4.1f} | " + " ".join(f"{cell:>13}" for cell in cells))
    lines.append(f"minimum coverage: {worst:.3f}")
    print("\n".join(lines))


def _bootstrap_t_interval(passed, sizes, rng, resamples=500, confidence=0.95):
    """For comparison only: the studentised cluster bootstrap of the ratio sum(passed) /
    sum(sizes) that the gate used before, with its clusters-as-cases cap."""
    passed, sizes = np.asarray(passed, float), np.asarray(sizes, float)
    clusters, ratio = len(sizes), passed.sum() / sizes.sum()

    def standard_error(y, m):  # linearised, per resample row when given 2-D arrays
        residuals = y - (y.sum(-1, keepdims=True) / m.sum(-1, keepdims=True)) * m
        return np.sqrt(clusters / (clusters - 1) * (residuals**2).sum(-1)) / m.sum(-1)

    cap = _fractional_clopper_pearson(ratio * clusters, clusters)  # at 0.95, the only level used
    error = float(standard_error(passed, sizes))
    if error == 0:
        return cap
    draws = rng.integers(0, clusters, size=(resamples, clusters))
    y, m = passed[draws], sizes[draws]
    errors = standard_error(y, m)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(errors > 0, (y.sum(1) / m.sum(1) - ratio) / np.where(errors > 0, errors, 1), 0.0)
    t_low, t_high = np.quantile(t, [(1 - confidence) / 2, (1 + confidence) / 2])
    lower, upper = max(ratio - t_high * error, cap[0]), min(ratio - t_low * error, cap[1])
    return min(lower, ratio), max(upper, ratio)


def test_the_cluster_bootstrap_it_replaces_undercovers_where_it_holds():
    rng = np.random.default_rng(COVERAGE_SEED)
    replications = 200
    lines = ["", f"where the bootstrap failed: coverage of the capped cluster bootstrap against {EFFECTIVE_CLUSTERS_METHOD}, "
             f"{replications} replications, ICC 0.8, p = 0.8"]
    for name in ("50 x 1 + 2 x 25", "100 x 1 + 5 x 20"):
        sizes = COVERAGE_DESIGNS[name]
        bootstrap = effective = 0
        for passed in _cluster_pass_counts(rng, sizes, 0.8, 0.8, replications):
            lower, upper = _bootstrap_t_interval(passed, sizes, rng)
            bootstrap += lower <= 0.8 <= upper
            lower, upper = effective_clusters_interval(passed.tolist(), sizes)
            effective += lower <= 0.8 <= upper
        lines.append(f"{name:>18}: bootstrap {bootstrap / replications:.3f}, effective clusters {effective / replications:.3f}")
        assert bootstrap / replications < 0.9 and effective / replications >= 0.93
    print("\n".join(lines))


# -- the rate of a metric ------------------------------------------------------------------


def _rows_with_clusters(clusters):
    return [(f"g{cluster:02d}", outcome) for cluster in range(clusters) for outcome in ("PASS", "PASS", "FAIL")]


def test_nineteen_clusters_are_insufficient():
    rate = rate_from_outcomes(_rows_with_clusters(19), allow_approximate=True, min_clusters=20)
    kinds_and_codes = [(kind, reason.split(":")[0]) for kind, reason in rate.blocking_reasons]
    assert kinds_and_codes == [("INSUFFICIENT_EVIDENCE", "insufficient_clusters")]
    assert rate.estimate.estimate == pytest.approx(2 / 3)  # the point estimate is still shown
    assert rate.estimate.clusters == 19


def test_twenty_clusters_suffice():
    rate = rate_from_outcomes(_rows_with_clusters(20), allow_approximate=True, min_clusters=20)
    assert rate.blocking_reasons == []
    assert rate.estimate.method == EFFECTIVE_CLUSTERS_METHOD


def test_approximate_methods_off_needs_manual_review():
    rate = rate_from_outcomes(_rows_with_clusters(25), allow_approximate=False, min_clusters=20)
    assert [(kind, reason.split(":")[0]) for kind, reason in rate.blocking_reasons] == [
        ("MANUAL_REVIEW", "approximate_method_not_permitted")
    ]


def test_independent_cases_use_the_exact_interval():
    rows = [(f"case-{index}", "PASS" if index % 4 else "FAIL") for index in range(40)]
    rows += [("case-0", "EXCLUDED"), ("case-40", "MISSING")]  # an excluded row does not make a cluster
    rate = rate_from_outcomes(rows, allow_approximate=False)
    assert rate.blocking_reasons == []
    assert rate.estimate.method == "clopper_pearson"
    assert (rate.estimate.passed, rate.estimate.failed, rate.estimate.missing, rate.estimate.excluded) == (30, 10, 1, 1)
    assert rate.estimate == exact_rate(30, 10, 1, 0.95, excluded=1)


def test_unknown_outcome_is_refused():
    with pytest.raises(ValueError, match="unknown outcome"):
        rate_from_outcomes([("a", "PASSED")])


# -- Benjamini-Yekutieli -------------------------------------------------------------------


def test_benjamini_yekutieli_hand_example():
    # m = 8, c(8) = 1 + 1/2 + ... + 1/8 = 2.717857; at fdr 0.1 the k-th threshold is
    # k * 0.1 / (8 * 2.717857) = 0.0045992 k: 0.001 <= 0.0046 and 0.008 <= 0.0092 are rejected,
    # 0.039 > 0.0138 and every later p-value stays above its threshold.
    p_values = [0.039, 0.001, 0.205, 0.041, 0.008, 0.042, 0.06, 0.074]
    assert benjamini_yekutieli(p_values, fdr=0.1) == [False, True, False, False, True, False, False, False]
    # at fdr 0.05 the thresholds halve: only 0.001 <= 0.0023.
    assert benjamini_yekutieli(p_values, fdr=0.05) == [False, True, False, False, False, False, False, False]


def test_benjamini_yekutieli_steps_up():
    # m = 3, c(3) = 11/6, thresholds 0.1 k / 5.5 = 0.0182, 0.0364, 0.0545: the smallest p-value
    # misses its own threshold, but the largest meets its own, so all three are rejected.
    assert benjamini_yekutieli([0.05, 0.03, 0.035], fdr=0.1) == [True, True, True]
    assert benjamini_yekutieli([0.06, 0.03, 0.035], fdr=0.1) == [False, True, True]
    assert benjamini_yekutieli([], fdr=0.1) == []


def test_benjamini_yekutieli_agrees_with_scipy():
    p_values = list(np.random.default_rng(4).uniform(0, 0.05, size=30))
    adjusted = stats.false_discovery_control(p_values, method="by")
    assert benjamini_yekutieli(p_values, fdr=0.1) == [bool(value <= 0.1) for value in adjusted]
