"""A verdict: one case judged on one criterion."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Outcome = Literal["PASS", "FAIL", "MISSING", "EXCLUDED"]
OUTCOMES: tuple[Outcome, ...] = ("PASS", "FAIL", "MISSING", "EXCLUDED")


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    case_id: str
    criterion: str
    outcome: Outcome
    reason: str
    details: Any = None
