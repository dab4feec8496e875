"""What the text evaluators (`contains`, `regex`, `json_schema`) read, as Oloproof reads it.

`field` is a dotted path into the recorded output; left out, it is the whole output (Oloproof's
meaning). A value is compared as text the way Oloproof turns it into text: null is "", anything
else its `str`. A path that names nothing in the output is a FAIL (`field_absent`), as for
`exact_match`: an answer that is not there never passes, whatever `pass_if` says.
"""

from __future__ import annotations

from typing import Any

from pydantic import field_validator

from ..model.paths import check_dotted_path
from .base import EvaluatorConfig

FIELD_ABSENT = "field_absent"


class AnswerFieldConfig(EvaluatorConfig):
    """The keys every text evaluator shares: its criterion (required, as in Oloproof) and the field."""

    criterion: str
    field: str | None = None

    @field_validator("field")
    @classmethod
    def _field_is_a_path(cls, field: str | None) -> str | None:
        return None if field is None else check_dotted_path(field)

    @property
    def output_path(self) -> str:
        """The path into the output ("" is the whole of it)."""
        return self.field or ""


def as_text(value: Any) -> str:
    """A value as Oloproof's text evaluators see it."""
    return "" if value is None else str(value)
