"""`exact_match`: one field of the output equals one field of the case (1 and 1.0 alike, true never 1)."""

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
    if not path or split_path(path)[0] not in CASE_PARTS:
        raise ValueError(f"{path!r} must start with one of: {', '.join(CASE_PARTS)} (e.g. 'expected.answer')")
    return path


def case_parts(case: CaseRecord) -> dict[str, Any]:
    return {"input": case.input, "expected": case.expected, "metadata": case.metadata}


class ExactMatchConfig(EvaluatorConfig):
    criterion: str
    # A dotted path into the recorded output; "" is the whole output.
    field: DottedPath = "answer"
    expected_field: Annotated[DottedPath, AfterValidator(names_a_case_part)] = "expected.answer"


class ExactMatch(Evaluator):
    type: ClassVar[str] = "exact_match"
    config_model: ClassVar[type[EvaluatorConfig]] = ExactMatchConfig
    config: ExactMatchConfig

    def judge(self, case: CaseRecord, recording: RecordedRun, context: JudgingContext) -> Verdict:
        expected = read_path(case_parts(case), self.config.expected_field)
        if expected is ABSENT:
            return self.verdict(case, EXCLUDED, "no_expected_value")
        actual = read_path(recording.output, self.config.field)
        if actual is ABSENT:
            return self.verdict(case, FAIL, "field_absent", {"expected": expected, "actual": None, "absent": True})
        details = {"expected": expected, "actual": actual}
        if values_equal(expected, actual):
            return self.verdict(case, PASS, "matches", details)
        return self.verdict(case, FAIL, "differs", details)
