r"""`regex`: the answer matches (or, with `pass_if: no_match`, does not match) a pattern.

```yaml
- {type: regex, criterion: no_card_number, field: answer, pattern: '\b\d{16}\b', pass_if: no_match}
```

Oloproof's keys and meaning: Python's `re.search` of `pattern` anywhere in the field's text
(the whole output when `field` is left out). A pattern that does not compile is a
configuration error at load, naming the line.
"""

from __future__ import annotations

import re
from typing import ClassVar, Literal

from pydantic import field_validator

from ..model.cases import CaseRecord
from ..model.outcomes import FAIL, PASS, Verdict
from ..model.paths import ABSENT, read_path
from ..model.records import RecordedRun
from .answer_text import FIELD_ABSENT, AnswerFieldConfig, as_text
from .base import Evaluator, EvaluatorConfig, JudgingContext


class RegexConfig(AnswerFieldConfig):
    pattern: str
    pass_if: Literal["match", "no_match"] = "match"

    @field_validator("pattern")
    @classmethod
    def _pattern_compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as error:
            raise ValueError(f"invalid pattern: {error}") from None
        return pattern


class Regex(Evaluator):
    type: ClassVar[str] = "regex"
    config_model: ClassVar[type[EvaluatorConfig]] = RegexConfig
    reads_answer: ClassVar[bool] = True
    config: RegexConfig

    def __init__(self, config: RegexConfig):
        super().__init__(config)
        self._compiled = re.compile(config.pattern)

    def judge(self, case: CaseRecord, recording: RecordedRun, context: JudgingContext) -> Verdict:
        actual = read_path(recording.output, self.config.output_path)
        if actual is ABSENT:
            return self.verdict(case, FAIL, FIELD_ABSENT, {"pattern": self.config.pattern, "actual": None, "absent": True})
        found = self._compiled.search(as_text(actual))
        details = {"pattern": self.config.pattern, "actual": actual, "matched": found.group(0) if found else None}
        wanted = self.config.pass_if == "match"
        if (found is not None) == wanted:
            return self.verdict(case, PASS, "matches" if wanted else "no_match", details)
        return self.verdict(case, FAIL, "no_match" if wanted else "matches", details)
