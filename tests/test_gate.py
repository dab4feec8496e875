import re

import numpy as np
import pytest
from scipy import stats

from oloproof_pipeline.model.outcomes import (
    EXIT_ALLOW,
    EXIT_BLOCK_FAIL,
    EXIT_BLOCK_INSUFFICIENT,
    EXIT_BLOCK_MANUAL_REVIEW,
    EXIT_INCOMPLETE,
    EXIT_USAGE,
)
from oloproof_pipeline.decide.clustered import effective_clusters_interval
from oloproof_pipeline.decide.gate import (
    DECISION_PROBABILITY,
    decide_gate,
    decide_rule,
    gate_markdown,
)
from oloproof_pipeline.decide.validity import TransformValidity
from oloproof_pipeline.model.config import RuleConfig
from oloproof_pipeline.decide.statistics import RateEstimate, exact_rate, rate_from_outcomes
from test_decide_clustered import total_passes_distribution


def _estimate(lower, upper, estimate=None, observed=100, missing=0, method="clopper_pearson"):
    estimate = (lower + upper) / 2 if estimate is None else estimate
    passed = round(estimate * observed)
    return RateEstimate(
        estimate=estimate, lower=lower, upper=upper, method=method, observed=observed,
        passed=passed, failed=observed - passed, missing=missing, excluded=0, clusters=observed + missing,
    )


MIN_RULE = RuleConfig(id="resolved", metric="state_match", min=0.8)
MAX_RULE = RuleConfig(id="unsafe", metric="unsafe_calls", max=0.05)

# -- min rules -----------------------------------------------------------------------------


def test_lower_exactly_at_min_passes():
    decision = decide_rule(MIN_RULE, _estimate(0.8, 0.95))
    assert decision.decision == "PASS"
    assert decision.reasons == ["lower 0.800 >= min 0.8"]
    assert (decision.bar_kind, decision.bar) == ("min", 0.8)


def test_upper_just_below_min_fails():
    decision = decide_rule(MIN_RULE, _estimate(0.6, 0.7999))
    assert decision.decision == "FAIL"
    assert decision.reasons == ["upper 0.7999 < min 0.8"]  # digits enough to stay below the bar


def test_bounds_print_on_their_side_of_the_bar():
    assert decide_rule(MIN_RULE, _estimate(0.79997, 0.9)).reasons[0].startswith("interval_straddles_bar: lower 0.79997 < min 0.8;")
    assert decide_rule(MIN_RULE, _estimate(0.6, 0.79996)).reasons == ["upper 0.79996 < min 0.8"]
    assert decide_rule(MAX_RULE, _estimate(0.0, 0.050004)).reasons[0].startswith("interval_straddles_bar: upper 0.050004 > max 0.05;")


def test_upper_exactly_at_min_straddles_and_heads_for_fail():
    # Before: "no size would decide it" whenever the estimate sat on the failing side. But a
    # suite at 0.7 against min 0.8 decides too, as FAIL, once its upper bound drops below 0.8.
    decision = decide_rule(MIN_RULE, _estimate(0.6, 0.8, estimate=0.7))
    assert decision.decision == "INSUFFICIENT_EVIDENCE"
    size = decision.suite_size_to_decide
    assert size is not None
    assert f"about {size} cases would decide it (FAIL, with 80% probability if the rate holds)" in decision.reasons[0]
    assert _reference_probability(size, 0.7, 0.8, "min", "FAIL") >= 0.8


def test_no_suite_size_on_the_bar():
    decision = decide_rule(MIN_RULE, _estimate(0.7, 0.9, estimate=0.8))
    assert decision.suite_size_to_decide is None
    assert decision.reasons[0].endswith("no suite size would decide it (the estimate is on the bar)")


def test_straddling_min_gives_a_suite_size():
    decision = decide_rule(MIN_RULE, exact_rate(27, 3, 0, 0.95))  # 0.9 over 30 cases
    assert decision.decision == "INSUFFICIENT_EVIDENCE"
    assert decision.reasons[0].startswith("interval_straddles_bar: lower 0.735 < min 0.8")
    assert decision.suite_size_to_decide is not None and decision.suite_size_to_decide > 30
    assert f"about {decision.suite_size_to_decide} cases would decide it (PASS, with 80% probability" in decision.reasons[0]


# -- max rules -----------------------------------------------------------------------------


def test_max_rule_boundaries():
    assert decide_rule(MAX_RULE, _estimate(0.0, 0.05)).decision == "PASS"
    failed = decide_rule(MAX_RULE, _estimate(0.0501, 0.2))
    assert failed.decision == "FAIL"
    assert failed.reasons == ["lower 0.0501 > max 0.05"]
    assert decide_rule(MAX_RULE, _estimate(0.05, 0.2)).decision == "INSUFFICIENT_EVIDENCE"  # lower on the bar
    straddling = decide_rule(MAX_RULE, exact_rate(1, 99, 0, 0.95))  # 0.01 over 100 cases
    assert straddling.decision == "INSUFFICIENT_EVIDENCE"
    assert straddling.suite_size_to_decide is not None and straddling.suite_size_to_decide > 100


# -- precedence ----------------------------------------------------------------------------


def test_manual_review_outranks_insufficient_outranks_interval():
    passing = _estimate(0.85, 0.95)
    reasons = [
        ("INSUFFICIENT_EVIDENCE", "insufficient_clusters: 12 clusters < min_clusters 20"),
        ("MANUAL_REVIEW", "approximate_method_not_permitted: ..."),
    ]
    manual = decide_rule(MIN_RULE, passing, reasons)
    assert manual.decision == "MANUAL_REVIEW"
    assert manual.reasons[0].startswith("approximate_method_not_permitted")
    insufficient = decide_rule(MIN_RULE, passing, [("INSUFFICIENT_EVIDENCE", "transform_not_checked: paraphrase")])
    assert insufficient.decision == "INSUFFICIENT_EVIDENCE"
    assert insufficient.reasons == ["transform_not_checked: paraphrase"]
    assert insufficient.estimate == passing.estimate  # the rate is still shown
    failing = decide_rule(MIN_RULE, _estimate(0.1, 0.2), [("INSUFFICIENT_EVIDENCE", "transform_not_checked: x")])
    assert failing.decision == "INSUFFICIENT_EVIDENCE"


def test_no_cases_is_insufficient():
    decision = decide_rule(MIN_RULE, exact_rate(0, 0, 0))
    assert decision.decision == "INSUFFICIENT_EVIDENCE"
    assert decision.reasons[0].startswith("no_cases")


def test_unknown_blocking_kind_is_refused():
    with pytest.raises(ValueError):
        decide_rule(MIN_RULE, _estimate(0.85, 0.95), [("MAYBE", "why")])


# -- the gate ------------------------------------------------------------------------------


def _rule(rule_id, lower, upper, blocking=()):
    return decide_rule(RuleConfig(id=rule_id, metric="m", min=0.8), _estimate(lower, upper), list(blocking))


def test_gate_allows_when_every_rule_passes():
    gate = decide_gate([_rule("a", 0.85, 0.95), _rule("b", 0.9, 1.0)])
    assert gate.decision == "ALLOW" and gate.reasons == [] and gate.exit_code == EXIT_ALLOW


def test_gate_without_rules_never_allows():
    """No release policy (an ungated run) decides nothing, so it allows nothing."""
    gate = decide_gate([])
    assert gate.decision == "BLOCK" and gate.exit_code == EXIT_USAGE
    assert gate.reasons == ["no release policy (release.yaml): nothing is gated"]


def test_gate_reasons_fail_first_then_manual_then_insufficient():
    rules = [
        _rule("straddles", 0.7, 0.9),
        _rule("manual", 0.85, 0.95, [("MANUAL_REVIEW", "approximate_method_not_permitted")]),
        _rule("passes", 0.85, 0.95),
        _rule("fails", 0.5, 0.7),
    ]
    gate = decide_gate(rules)
    assert gate.decision == "BLOCK"
    assert [reason.split(":")[0] for reason in gate.reasons] == ["fails", "manual", "straddles"]
    assert gate.reasons[0] == "fails: FAIL: upper 0.700 < min 0.8"
    assert gate.exit_code == EXIT_BLOCK_FAIL
    assert [rule.rule_id for rule in gate.rules] == ["straddles", "manual", "passes", "fails"]


def test_gate_exit_codes_per_cause():
    manual = _rule("manual", 0.85, 0.95, [("MANUAL_REVIEW", "approximate_method_not_permitted")])
    insufficient = _rule("straddles", 0.7, 0.9)
    # Oloproof's precedence: MANUAL_REVIEW before INSUFFICIENT_EVIDENCE.
    assert decide_gate([manual, insufficient]).exit_code == EXIT_BLOCK_MANUAL_REVIEW
    assert decide_gate([insufficient]).exit_code == EXIT_BLOCK_INSUFFICIENT
    assert decide_gate([manual, _rule("passes", 0.85, 0.95)]).exit_code == EXIT_BLOCK_MANUAL_REVIEW
    codes = [EXIT_ALLOW, EXIT_BLOCK_FAIL, EXIT_USAGE, EXIT_BLOCK_INSUFFICIENT, EXIT_BLOCK_MANUAL_REVIEW,
             EXIT_INCOMPLETE]
    assert codes == [0, 1, 2, 3, 4, 5]


def test_gate_serialises_its_exit_code():
    gate = decide_gate([_rule("fails", 0.5, 0.7)])
    assert gate.model_dump()["exit_code"] == EXIT_BLOCK_FAIL


def test_markdown_has_every_rule_and_the_decision_above_the_table():
    rules = [_rule("resolved|rate", 0.85, 0.95), _rule("fails", 0.5, 0.7), _rule("straddles", 0.7, 0.9)]
    text = gate_markdown(decide_gate(rules))
    lines = text.splitlines()
    assert lines[0] == "**Gate: BLOCK** (exit code 1)"
    assert lines[2].startswith("| rule | metric | decision |")
    assert "resolved\\|rate" in text  # a pipe in an id cannot break the row
    for rule_id in ("fails", "straddles"):
        assert f"| {rule_id} |" in text
    assert len([line for line in lines if line.startswith("| ")]) == 2 + len(rules)


# -- the suite size that would decide a rule -----------------------------------------------
#
# The figure the gate reports: the smallest suite that decides the rule (PASS or FAIL, the
# way the estimate points) with probability >= 80% if the true rate is the estimate. Checked
# here against an independent computation over a grid: at the reported n the decision
# probability, summed from scipy's binomial pmf over the Clopper-Pearson intervals (scipy's
# beta quantiles, the gate's comparisons) that decide, is >= 0.8, and at n - 1 it is not.
# The old figure ("the size at which an interval centred on the estimate just clears") decided
# only 51-70% of the time, was not the smallest in most cells, and had no answer for an
# estimate on the failing side.

# (passed, failed, missing, bar, kind): every one straddles its bar; the issue's 8/12 against
# min 0.8 and 0.87 against 0.8 among them.
SUITE_GRID = [
    (27, 3, 0, 0.8, "min"),
    (87, 13, 0, 0.8, "min"),
    (8, 4, 0, 0.8, "min"),
    (1, 99, 0, 0.05, "max"),
    (19, 1, 0, 0.9, "min"),
    (5, 15, 0, 0.2, "max"),
    (45, 55, 0, 0.5, "min"),
    (18, 2, 2, 0.8, "min"),
    (12, 8, 0, 0.5, "min"),
    (2, 18, 0, 0.2, "max"),
]


def _reference_probability(cases: int, rate: float, bar: float, kind: str, direction: str) -> float:
    passes = np.arange(cases + 1)
    alpha = 1 - 0.95
    with np.errstate(all="ignore"):
        lower = np.where(passes == 0, 0.0, stats.beta.ppf(alpha / 2, passes, cases - passes + 1))
        upper = np.where(passes == cases, 1.0, stats.beta.ppf(1 - alpha / 2, passes + 1, cases - passes))
    if kind == "min":
        decides = lower >= bar if direction == "PASS" else upper < bar
    else:
        decides = upper <= bar if direction == "PASS" else lower > bar
    return float(stats.binom.pmf(passes, cases, rate)[decides].sum())


def _bar_rule(kind: str, bar: float) -> RuleConfig:
    return RuleConfig(id="r", metric="m", **{kind: bar})


def _reported(decision) -> tuple[int, str]:
    match = re.search(r"about (\d+) cases would decide it \((PASS|FAIL), with 80% probability if the rate holds", decision.reasons[0])
    assert match, decision.reasons
    assert int(match.group(1)) == decision.suite_size_to_decide
    return decision.suite_size_to_decide, match.group(2)


def test_reported_suite_size_decides_with_80_percent_over_a_grid():
    assert DECISION_PROBABILITY == 0.8
    lines = ["", "suite size to decide (independent cases): P(decide) at the reported n and at n - 1",
             f"{'passed/failed/missing':>22} {'bar':>8} {'rate':>6} {'decides':>7} {'n':>6} {'P(n)':>6} {'P(n-1)':>6}"]
    for passed, failed, missing, bar, kind in SUITE_GRID:
        estimate = exact_rate(passed, failed, missing)
        decision = decide_rule(_bar_rule(kind, bar), estimate)
        assert decision.decision == "INSUFFICIENT_EVIDENCE", (passed, failed, bar)
        size, direction = _reported(decision)
        rate = estimate.estimate
        assert direction == ("PASS" if (rate > bar) == (kind == "min") else "FAIL")
        at_size = _reference_probability(size, rate, bar, kind, direction)
        below = _reference_probability(size - 1, rate, bar, kind, direction)
        assert at_size >= 0.8 > below, (passed, failed, bar, size, at_size, below)
        lines.append(f"{f'{passed}/{failed}/{missing}':>22} {kind + ' ' + str(bar):>8} {rate:6.3f} {direction:>7} {size:6d} {at_size:6.3f} {below:6.3f}")
    print("\n".join(lines))


# Clustered metrics: the gate's interval is Clopper-Pearson at the effective number of
# clusters, which assumes the worst intra-cluster correlation (ICC 1), so the suite size is
# scaled by the design effect at ICC 1 (the case-weighted mean cluster size). Checked exactly:
# suites of the reported size, built by repeating the observed cluster sizes, at the observed
# rate and a true ICC of 0, 0.5 or 1 (beta-binomial clusters); the interval depends on the
# data only through the total of passes (tests/test_decide_clustered.py), whose distribution
# is the convolution of the clusters'. Asserted: P(decide) >= 0.78, 0.8 less 0.02 for the
# normal approximation behind a design effect (at ICC 1 the passes come in lumps of a
# cluster's size, which costs about 0.01). A design effect from the ICC estimated from the
# data would be smaller, and name suites this interval decides far less often when the true
# ICC is low (0-54% in the simulation behind issue 12's note).
CLUSTER_PATTERNS = {
    "30 x 1 + 5 x 10": [1] * 30 + [10] * 5,
    "24 x 3 (equal)": [3] * 24,
    "20 of sizes 1..20": list(range(1, 21)),
}
# (rate, bar, kind): heading for PASS, for FAIL, and for PASS under a max bar.
CLUSTER_RULES = [(0.875, 0.8, "min"), (0.65, 0.8, "min"), (0.05, 0.15, "max")]


def _repeated(pattern: list[int], cases: int) -> list[int]:
    sizes, index = [], 0
    while sum(sizes) < cases:
        sizes.append(min(pattern[index % len(pattern)], cases - sum(sizes)))
        index += 1
    return sizes


def _observed_rows(pattern: list[int], rate: float) -> list[tuple[str, str]]:
    """The observed data: passes filled cluster by cluster up to round(rate * N)."""
    left = round(rate * sum(pattern))
    rows = []
    for index, size in enumerate(pattern):
        won = min(size, left)
        left -= won
        rows += [(f"g{index:02d}", "PASS")] * won + [(f"g{index:02d}", "FAIL")] * (size - won)
    return rows


def _decision_by_total(sizes: list[int], bar: float, kind: str, direction: str) -> np.ndarray:
    """For each total of passes t, whether the gate's interval decides in `direction`."""
    decided = []
    for total in range(sum(sizes) + 1):
        passed, left = [], total
        for size in sizes:
            passed.append(min(size, left))
            left -= passed[-1]
        lower, upper = effective_clusters_interval(passed, sizes)
        if kind == "min":
            decided.append(lower >= bar if direction == "PASS" else upper < bar)
        else:
            decided.append(upper <= bar if direction == "PASS" else lower > bar)
    return np.array(decided)


def test_clustered_suite_size_decides_with_80_percent():
    lines = ["", "clustered suite size: exact P(decide) for suites of the reported size, by true ICC",
             f"{'design':>18} {'rate':>6} {'bar':>8} {'decides':>7} {'deff':>6} {'n':>6} | ICC 0  ICC 0.5  ICC 1"]
    worst = 1.0
    for name, pattern in CLUSTER_PATTERNS.items():
        for target, bar, kind in CLUSTER_RULES:
            estimate = rate_from_outcomes(_observed_rows(pattern, target), allow_approximate=True).estimate
            decision = decide_rule(_bar_rule(kind, bar), estimate)
            size, direction = _reported(decision)
            assert f"design effect {estimate.design_effect:.2f} for clustered cases" in decision.reasons[0]
            sizes = _repeated(pattern, size)
            decides = _decision_by_total(sizes, bar, kind, direction)
            cells = []
            for correlation in (0.0, 0.5, 1.0):
                probability = float(total_passes_distribution(sizes, estimate.estimate, correlation)[decides].sum())
                worst = min(worst, probability)
                assert probability >= 0.78, (name, target, bar, correlation, size, probability)
                cells.append(f"{probability:.3f}")
            lines.append(f"{name:>18} {estimate.estimate:6.3f} {kind + ' ' + str(bar):>8} {direction:>7} "
                         f"{estimate.design_effect:6.2f} {size:6d} | " + "  ".join(cells))
    lines.append(f"minimum: {worst:.3f}")
    print("\n".join(lines))


# -- the validity message ------------------------------------------------------------------


def _validity(lower_bound: float, minimum: float) -> TransformValidity:
    return TransformValidity(
        transform="injected", transform_digest="sha256:x", pairs=24, kept=22, rejected=2, unlabelled=0,
        stale_labels=0, lower_bound=lower_bound, minimum_validity=minimum, checked=lower_bound >= minimum,
    )


def test_validity_summary_prints_the_bound_on_its_side_of_the_minimum():
    assert _validity(0.89997, 0.9).summary().endswith("95% lower bound 0.89997 < minimum_validity 0.9")
    assert _validity(0.7, 0.9).summary().endswith("95% lower bound 0.700 < minimum_validity 0.9")
    assert _validity(0.9, 0.9).summary().endswith("95% lower bound 0.900 >= minimum_validity 0.9")
    assert _validity(0.85753, 0.85).summary().endswith("95% lower bound 0.858 >= minimum_validity 0.85")
