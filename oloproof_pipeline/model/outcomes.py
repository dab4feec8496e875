"""The words results are said in, each defined once: a verdict's outcome, a rule's decision,
the gate's decision, and the exit code each decision ends a command with.

Exit codes are Oloproof's, so a CI script written for it keeps working:

| code | constant                   | meaning                                                       |
| ---- | -------------------------- | ------------------------------------------------------------- |
| 0    | EXIT_ALLOW                 | every rule PASSed                                             |
| 1    | EXIT_BLOCK_FAIL            | BLOCK: some rule FAILed                                       |
| 2    | EXIT_USAGE                 | a usage or configuration error (a bad option, a bad file)     |
| 3    | EXIT_BLOCK_INSUFFICIENT    | BLOCK: the blocking rules are INSUFFICIENT_EVIDENCE           |
| 4    | EXIT_BLOCK_MANUAL_REVIEW   | BLOCK: no FAIL, some rule awaits MANUAL_REVIEW                |
| 5    | EXIT_INCOMPLETE            | the pipeline failed before the gate could decide              |

Among blocked rules the code follows Oloproof's precedence: FAIL, then incomplete, then
MANUAL_REVIEW, then INSUFFICIENT_EVIDENCE.
"""

from __future__ import annotations

from typing import Any, Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field

# -- verdicts ------------------------------------------------------------------------------

Outcome = Literal["PASS", "FAIL", "MISSING", "EXCLUDED"]
PASS: Outcome = "PASS"
FAIL: Outcome = "FAIL"
MISSING: Outcome = "MISSING"
EXCLUDED: Outcome = "EXCLUDED"
OUTCOMES: tuple[Outcome, ...] = (PASS, FAIL, MISSING, EXCLUDED)

# EXCLUDED because the case is not of the kind a criterion judges at all (a metamorphic copy
# under a state check, a source under a relation), as opposed to a case where the criterion
# found nothing to judge. A rule's counts leave these out, so "excluded" stays meaningful.
# Evaluators exclude structurally only through these names.
METAMORPHIC_COPY = "metamorphic_copy"
NOT_A_METAMORPHIC_PAIR = "not_a_metamorphic_pair"
ANOTHER_TRANSFORM = "another_transform"
# A case outside an evaluator's `applies_to` was never in its criterion's population.
NOT_SELECTED = "not_selected"
STRUCTURAL_EXCLUSIONS = frozenset({METAMORPHIC_COPY, NOT_A_METAMORPHIC_PAIR, ANOTHER_TRANSFORM, NOT_SELECTED})

# Why case certification flags a case (`oloproof certify`, the `case_certification` asset):
# the case, not the agent, is what is wrong. Under `require_certified_cases: true` a flagged
# case's verdicts are EXCLUDED with the flag as their reason, never counted as passes.
PASSES_WHEN_NOTHING_IS_DONE = "passes_when_nothing_is_done"  # the starting state already passes
REFERENCE_FAILS = "reference_fails"  # a correct agent's actions fail the case's own criteria
COPY_LEAVES_FIELD_UNCHANGED = "copy_leaves_field_unchanged"  # the copy asks what its source asks
JUDGED_BY_NO_CRITERION = "judged_by_no_criterion"  # every criterion excludes the case
SAME_INPUT_DIFFERENT_EXPECTED = "same_input_different_expected"  # one request, two right answers
CERTIFICATION_FLAGS = (
    PASSES_WHEN_NOTHING_IS_DONE,
    REFERENCE_FAILS,
    COPY_LEAVES_FIELD_UNCHANGED,
    JUDGED_BY_NO_CRITERION,
    SAME_INPUT_DIFFERENT_EXPECTED,
)


class Judgement(BaseModel):
    """A verdict without its case: what every evaluator kind (and a python grader) returns."""

    model_config = ConfigDict(extra="forbid")

    outcome: Outcome
    reason: str = Field(min_length=1)
    details: Any = None


class Verdict(Judgement):
    """One case judged on one criterion."""

    case_id: str
    criterion: str


# -- rules and the gate --------------------------------------------------------------------

RuleOutcome = Literal["PASS", "FAIL", "INSUFFICIENT_EVIDENCE", "MANUAL_REVIEW"]
INSUFFICIENT_EVIDENCE: RuleOutcome = "INSUFFICIENT_EVIDENCE"
MANUAL_REVIEW: RuleOutcome = "MANUAL_REVIEW"
GateOutcome = Literal["ALLOW", "BLOCK"]
ALLOW: GateOutcome = "ALLOW"
BLOCK: GateOutcome = "BLOCK"
# A reason that stops a rule from being decided by its interval forces one of these.
BlockingKind = Literal["MANUAL_REVIEW", "INSUFFICIENT_EVIDENCE"]
# The order blocking rules are listed in a gate's reasons.
BLOCKING_ORDER: tuple[RuleOutcome, ...] = (FAIL, MANUAL_REVIEW, INSUFFICIENT_EVIDENCE)

# -- exit codes ----------------------------------------------------------------------------

EXIT_ALLOW = 0
EXIT_BLOCK_FAIL = 1
EXIT_USAGE = 2
EXIT_BLOCK_INSUFFICIENT = 3
EXIT_BLOCK_MANUAL_REVIEW = 4
EXIT_INCOMPLETE = 5
# `oloproof certify`: some case is flagged, so the suite fails its certification.
EXIT_CASES_FLAGGED = EXIT_BLOCK_FAIL


def exit_code_for(rule_decisions: Iterable[str]) -> int:
    """The code a gate over these rule decisions ends a command with: 0 only when none blocks."""
    decisions = set(rule_decisions)
    if FAIL in decisions:
        return EXIT_BLOCK_FAIL
    if MANUAL_REVIEW in decisions:
        return EXIT_BLOCK_MANUAL_REVIEW
    if INSUFFICIENT_EVIDENCE in decisions:
        return EXIT_BLOCK_INSUFFICIENT
    return EXIT_ALLOW


# What each exit code tells the person who ran the command (the table above, in words).
EXIT_MEANINGS = {
    EXIT_ALLOW: f"every rule {PASS}ed",
    EXIT_BLOCK_FAIL: f"a rule {FAIL}ed",
    EXIT_USAGE: "a usage or configuration error",
    EXIT_BLOCK_INSUFFICIENT: f"no rule {FAIL}ed; some lack the evidence to decide ({INSUFFICIENT_EVIDENCE})",
    EXIT_BLOCK_MANUAL_REVIEW: f"no rule {FAIL}ed; some await {MANUAL_REVIEW}",
    EXIT_INCOMPLETE: "incomplete: the pipeline failed before the gate could decide",
}
