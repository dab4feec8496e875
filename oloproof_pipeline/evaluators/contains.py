"""`contains`: the case's expected text occurs in the answer (Oloproof's `contains`).

```yaml
- {type: contains, criterion: names_the_order, field: answer, expected_field: order_id}
```

Keys and meaning are Oloproof's: `field` is read from the output (the whole output when left
out); the expected text is `expected_field` of the case, else, when the case's `expected` is an
object, its field named like `field`, else the whole `expected`. A case with no such expected
value is EXCLUDED (`no_expected_value`). Both are compared as text, case and spaces kept.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator

from ..model.cases import CaseRecord
from ..model.outcomes import EXCLUDED, FAIL, PASS, Verdict
from ..model.paths import ABSENT, DottedPath, read_path
from ..model.records import RecordedRun
from .answer_text import FIELD_ABSENT, AnswerFieldConfig, as_text
from .base import Evaluator, EvaluatorConfig, JudgingContext
from .exact_match import case_parts, names_a_case_part


class ContainsConfig(AnswerFieldConfig):
    expected_field: Annotated[DottedPath, AfterValidator(names_a_case_part)] | None = None


def expected_path(config: ContainsConfig, case: CaseRecord) -> str:
    """Oloproof's choice of the expected value: `expected_field`, else `field` inside an
    object `expected`, else the whole `expected`."""
    if config.expected_field is not None:
        return config.expected_field
    if config.field and isinstance(case.expected, dict):
        return f"expected.{config.field}"
    return "expected"


class Contains(Evaluator):
    type: ClassVar[str] = "contains"
    config_model: ClassVar[type[EvaluatorConfig]] = ContainsConfig
    reads_answer: ClassVar[bool] = True
    config: ContainsConfig

    def judge(self, case: CaseRecord, recording: RecordedRun, context: JudgingContext) -> Verdict:
        expected: Any = read_path(case_parts(case), expected_path(self.config, case))
        if expected is ABSENT or expected is None:
            return self.verdict(case, EXCLUDED, "no_expected_value")
        actual = read_path(recording.output, self.config.output_path)
        if actual is ABSENT:
            return self.verdict(case, FAIL, FIELD_ABSENT, {"expected": expected, "actual": None, "absent": True})
        details = {"expected": expected, "actual": actual}
        if as_text(expected) in as_text(actual):
            return self.verdict(case, PASS, "contains", details)
        return self.verdict(case, FAIL, "does_not_contain", details)
