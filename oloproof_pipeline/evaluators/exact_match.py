"""`exact_match`: one field of the output equals one field of the case (1 and 1.0 alike, true never 1).

Text is compared as Oloproof compares it: with surrounding whitespace stripped (`strip`, on by
default) and, with `casefold: true`, without regard to case. An `expected_field` that does not
start with `input`, `expected` or `metadata` is, as in Oloproof, a field of the case's `expected`.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator

from ..model.cases import CaseRecord
from ..model.records import RecordedRun
from ..model.outcomes import EXCLUDED, FAIL, PASS, Verdict
from .base import Evaluator, EvaluatorConfig, JudgingContext
from ..model.paths import ABSENT, DottedPath, read_path, split_path
from .state_matches import values_equal

# The parts of a case an `expected_field` may start from.
CASE_PARTS = ("input", "expected", "metadata")


def names_a_case_part(path: str) -> str:
    """A path from the case's top: a bare name (Oloproof's wording) is a field of `expected`."""
    if not path:
        raise ValueError(f"{path!r} names no field: write e.g. 'answer' or 'expected.answer'")
    return path if split_path(path)[0] in CASE_PARTS else f"expected.{path}"


def normalized(value: Any, *, strip: bool, casefold: bool) -> Any:
    """Text as Oloproof compares it; anything else unchanged."""
    if not isinstance(value, str):
        return value
    value = value.strip() if strip else value
    return value.casefold() if casefold else value


def case_parts(case: CaseRecord) -> dict[str, Any]:
    return {"input": case.input, "expected": case.expected, "metadata": case.metadata}


class ExactMatchConfig(EvaluatorConfig):
    criterion: str
    # A dotted path into the recorded output; "" is the whole output.
    field: DottedPath = "answer"
    expected_field: Annotated[DottedPath, AfterValidator(names_a_case_part)] = "expected.answer"
    strip: bool = True
    casefold: bool = False


class ExactMatch(Evaluator):
    type: ClassVar[str] = "exact_match"
    config_model: ClassVar[type[EvaluatorConfig]] = ExactMatchConfig
    reads_answer: ClassVar[bool] = True
    config: ExactMatchConfig

    def judge(self, case: CaseRecord, recording: RecordedRun, context: JudgingContext) -> Verdict:
        expected = read_path(case_parts(case), self.config.expected_field)
        if expected is ABSENT:
            return self.verdict(case, EXCLUDED, "no_expected_value")
        actual = read_path(recording.output, self.config.field)
        if actual is ABSENT:
            return self.verdict(case, FAIL, "field_absent", {"expected": expected, "actual": None, "absent": True})
        details = {"expected": expected, "actual": actual}
        options = {"strip": self.config.strip, "casefold": self.config.casefold}
        if values_equal(normalized(expected, **options), normalized(actual, **options)):
            return self.verdict(case, PASS, "matches", details)
        return self.verdict(case, FAIL, "differs", details)
