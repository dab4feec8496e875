"""A violated constraint, as trace and python graders report it in a FAIL verdict's details:
`{"violations": [{"rule", "step", "tool", "record", "detail"}, ...]}`, where `step` counts
tool calls from 1 (the number `oloproof inspect` shows beside each call)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

VIOLATION_FIELDS = ("rule", "step", "tool", "record", "detail")


class Violation(BaseModel):
    """One broken constraint: which rule, at which tool call, of which tool, on which record."""

    model_config = ConfigDict(extra="forbid")

    rule: str
    step: int | None = None
    tool: str | None = None
    record: str | None = None
    detail: str | None = None
