import pytest

from oloproof_pipeline.model.outcomes import (
    EXIT_ALLOW,
    EXIT_BLOCK_FAIL,
    EXIT_BLOCK_INSUFFICIENT,
    EXIT_BLOCK_MANUAL_REVIEW,
    EXIT_INCOMPLETE,
    EXIT_USAGE,
)
from oloproof_pipeline.decide.gate import (
    decide_gate,
    decide_rule,
    gate_markdown,
)
from oloproof_pipeline.model.config import RuleConfig
from oloproof_pipeline.decide.statistics import RateEstimate, exact_rate


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
    assert decision.reasons == ["lower 0.80 >= min 0.80"]
    assert (decision.bar_kind, decision.bar) == ("min", 0.8)


def test_upper_just_below_min_fails():
    decision = decide_rule(MIN_RULE, _estimate(0.6, 0.7999))
    assert decision.decision == "FAIL"
    assert decision.reasons == ["upper 0.7999 < min 0.8000"]  # digits enough to tell them apart


def test_upper_exactly_at_min_straddles():
    decision = decide_rule(MIN_RULE, _estimate(0.6, 0.8, estimate=0.7))
    assert decision.decision == "INSUFFICIENT_EVIDENCE"
    assert decision.suite_size_to_decide is None
    assert "no size would decide it" in decision.reasons[0]


def test_straddling_min_gives_a_suite_size():
    decision = decide_rule(MIN_RULE, exact_rate(27, 3, 0, 0.95))  # 0.9 over 30 cases
    assert decision.decision == "INSUFFICIENT_EVIDENCE"
    assert decision.reasons[0].startswith("interval_straddles_bar: lower 0.73 < min 0.80")
    assert decision.suite_size_to_decide is not None and decision.suite_size_to_decide > 30
    assert f"about {decision.suite_size_to_decide} cases" in decision.reasons[0]


# -- max rules -----------------------------------------------------------------------------


def test_max_rule_boundaries():
    assert decide_rule(MAX_RULE, _estimate(0.0, 0.05)).decision == "PASS"
    failed = decide_rule(MAX_RULE, _estimate(0.0501, 0.2))
    assert failed.decision == "FAIL"
    assert failed.reasons == ["lower 0.0501 > max 0.0500"]
    assert decide_rule(MAX_RULE, _estimate(0.05, 0.2)).decision == "INSUFFICIENT_EVIDENCE"  # lower on the bar
    straddling = decide_rule(MAX_RULE, exact_rate(1, 99, 0, 0.95))  # 0.01 over 100 cases
    assert straddling.decision == "INSUFFICIENT_EVIDENCE"
    assert straddling.suite_size_to_decide is not None and straddling.suite_size_to_decide > 100


def test_range_rule_needs_both_bars():
    rule = RuleConfig(id="calibrated", metric="abstain", min=0.1, max=0.3)
    assert decide_rule(rule, _estimate(0.12, 0.28)).decision == "PASS"
    straddling = decide_rule(rule, _estimate(0.25, 0.4))  # min cleared, max straddled
    assert straddling.decision == "INSUFFICIENT_EVIDENCE"
    assert [reason.split(";")[0] for reason in straddling.reasons] == ["interval_straddles_bar: upper 0.40 > max 0.30"]
    failed = decide_rule(rule, _estimate(0.31, 0.4))  # min cleared, max missed
    assert failed.decision == "FAIL" and failed.reasons == ["lower 0.31 > max 0.30"]
    assert decide_rule(rule, _estimate(0.02, 0.08)).decision == "FAIL"
    decision = decide_rule(rule, _estimate(0.12, 0.28))
    assert (decision.bar_kind, decision.bar, decision.bar_min, decision.bar_max) == ("range", None, 0.1, 0.3)


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
    assert gate.reasons[0] == "fails: FAIL: upper 0.70 < min 0.80"
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
