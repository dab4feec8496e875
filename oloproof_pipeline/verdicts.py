"""A verdict: one case judged on one criterion."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Outcome = Literal["PASS", "FAIL", "MISSING", "EXCLUDED"]
OUTCOMES: tuple[Outcome, ...] = ("PASS", "FAIL", "MISSING", "EXCLUDED")
# EXCLUDED because the case is not of the kind a criterion judges at all (a metamorphic copy
# under a state check, a source under a relation), as opposed to a case where the criterion
# found nothing to judge. A rule's counts leave these out, so "excluded" stays meaningful.
STRUCTURAL_EXCLUSIONS = frozenset({"metamorphic_copy", "not_a_metamorphic_pair", "another_transform"})


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    case_id: str
    criterion: str
    outcome: Outcome
    reason: str
    details: Any = None
