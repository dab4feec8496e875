import math
import random

import numpy as np
import pytest
from scipy import stats

from oloproof_pipeline.decide.statistics import (
    benjamini_yekutieli,
    clopper_pearson,
    cluster_bootstrap_rate,
    exact_rate,
    rate_from_outcomes,
    seed_from,
    suite_size_to_decide,
)

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


# -- suite size ----------------------------------------------------------------------------


def _clears(estimate, cases, bar, kind):
    lower, upper = clopper_pearson(round(estimate * cases), cases, 0.95)
    return lower >= bar if kind == "min" else upper <= bar


@pytest.mark.parametrize("estimate, bar, kind", [(0.9, 0.8, "min"), (0.95, 0.9, "min"), (0.02, 0.05, "max")])
def test_suite_size_decides(estimate, bar, kind):
    size = suite_size_to_decide(estimate, bar, kind, 0.95)
    assert size is not None and size > 10
    assert _clears(estimate, size, bar, kind)
    assert not _clears(estimate, size - 1, bar, kind)
    assert not _clears(estimate, size // 2, bar, kind)


@pytest.mark.parametrize(
    "estimate, bar, kind",
    [(0.7, 0.8, "min"), (0.8, 0.8, "min"), (0.1, 0.05, "max"), (0.05, 0.05, "max"), (None, 0.8, "min")],
)
def test_suite_size_none_when_estimate_is_on_the_wrong_side(estimate, bar, kind):
    assert suite_size_to_decide(estimate, bar, kind, 0.95) is None


def test_suite_size_none_beyond_the_cap():
    assert suite_size_to_decide(0.8000001, 0.8, "min", 0.95) is None


# -- the cluster bootstrap -----------------------------------------------------------------


def _clustered_rows(clusters=24, seed=3):
    rng = random.Random(seed)
    rows = []
    for cluster in range(clusters):
        rate = rng.choice([0.5, 0.8, 1.0])
        for copy in range(3):
            rows.append((f"case-{cluster:02d}", "PASS" if rng.random() < rate else "FAIL"))
    return rows


def test_same_data_gives_the_same_interval_whatever_the_order():
    rows = _clustered_rows()
    first = rate_from_outcomes(rows, allow_approximate=True)
    shuffled = list(rows)
    random.Random(99).shuffle(shuffled)
    second = rate_from_outcomes(shuffled, allow_approximate=True)
    assert first.estimate.method == "cluster_bootstrap"
    assert first.estimate == second.estimate
    assert first.estimate.clusters == 24 and first.estimate.observed == 72


def test_bootstrap_ignores_the_order_of_clusters():
    outcomes = {"b": ["PASS", "FAIL", "PASS"], "a": ["PASS", "PASS", "PASS"], "c": ["FAIL", "FAIL", "PASS"]}
    reordered = {name: outcomes[name] for name in ["c", "a", "b"]}
    seed = seed_from("some", "data")
    assert cluster_bootstrap_rate(outcomes, 0.95, seed) == cluster_bootstrap_rate(reordered, 0.95, seed)


def test_seed_from_is_deterministic_and_separates_parts():
    assert seed_from("a", "b") == seed_from("a", "b")
    assert seed_from("ab", "c") != seed_from("a", "bc")
    assert 0 <= seed_from("x") < 2**63


def test_bootstrap_all_pass_and_all_fail_are_finite():
    all_pass = cluster_bootstrap_rate({f"c{i}": ["PASS"] * 3 for i in range(20)}, 0.95, seed=1)
    all_fail = cluster_bootstrap_rate({f"c{i}": ["FAIL"] * 3 for i in range(20)}, 0.95, seed=1)
    assert all_pass.estimate == 1.0 and all_pass.upper == 1.0
    assert all_pass.lower == pytest.approx(clopper_pearson(20, 20)[0])  # clusters counted as cases
    assert all_fail.estimate == 0.0 and all_fail.lower == 0.0
    assert all_fail.upper == pytest.approx(clopper_pearson(0, 20)[1])
    for estimate in (all_pass, all_fail):
        assert not math.isnan(estimate.lower) and not math.isnan(estimate.upper)


def test_bootstrap_missing_widens_interval():
    base = {f"c{i}": ["PASS", "PASS", "FAIL"] if i % 3 else ["PASS"] * 3 for i in range(24)}
    with_missing = {name: outcomes + (["MISSING"] if index < 4 else []) for index, (name, outcomes) in enumerate(base.items())}
    complete = cluster_bootstrap_rate(base, 0.95, seed=5)
    widened = cluster_bootstrap_rate(with_missing, 0.95, seed=5)
    assert widened.estimate == complete.estimate
    assert widened.missing == 4
    assert widened.lower < complete.lower
    assert widened.upper > complete.upper
    assert widened.lower <= widened.estimate <= widened.upper


def _simulated_coverage(true_rate, repetitions, rng, clusters=20, cases_per_cluster=3, concentration=4.0):
    """Each cluster's success probability is drawn from Beta(mean true_rate), so the three cases
    of one cluster are correlated (intra-cluster correlation 1/(concentration+1) = 0.2)."""
    covered = 0
    for repetition in range(repetitions):
        cluster_rates = rng.beta(true_rate * concentration, (1 - true_rate) * concentration, size=clusters)
        outcomes = {
            f"c{cluster:02d}": ["PASS" if rng.random() < cluster_rates[cluster] else "FAIL" for _ in range(cases_per_cluster)]
            for cluster in range(clusters)
        }
        estimate = cluster_bootstrap_rate(outcomes, 0.95, seed=repetition)
        covered += estimate.lower <= true_rate <= estimate.upper
    return covered / repetitions


def test_cluster_bootstrap_coverage_at_twenty_clusters():
    rng = np.random.default_rng(20240601)
    coverage = {rate: _simulated_coverage(rate, 300, rng) for rate in (0.7, 0.8, 0.9)}
    print(f"\ncluster bootstrap coverage at 0.95, 20 clusters x 3 correlated cases, 300 runs: {coverage}")
    assert coverage[0.7] >= 0.93
    assert coverage[0.8] >= 0.93
    assert 0.0 <= coverage[0.9] <= 1.0


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
    assert rate.estimate.method == "cluster_bootstrap"


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
