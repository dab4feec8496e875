"""The report's comparison page (`oloproof report --compare BASE`): the version's cases against
BASE's, as plain data for the templates. Per criterion the paired counts and Tango's interval
(read/compare.py, as `oloproof compare` prints them), each side's gate and cost, and a matrix
of the cases by criterion, each cell the base's outcome and the version's with fixed (FAIL to
PASS) and broken (PASS to FAIL) marked, the changed cases first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..model.outcomes import EXCLUDED, FAIL, PASS
from .compare import CriterionComparison, compare_versions
from .results import VersionResults
from .spend import VersionSpend, version_spend

FIXED, BROKEN = "fixed", "broken"
# The order the matrix lists its rows in: what broke first, then what got fixed.
CHANGE_ORDER = {BROKEN: 0, FIXED: 1, None: 2}


@dataclass(frozen=True)
class MatrixCell:
    base: str | None  # None: the case was not judged on the criterion in that version
    candidate: str | None

    @property
    def change(self) -> str | None:
        return {(FAIL, PASS): FIXED, (PASS, FAIL): BROKEN}.get((self.base, self.candidate))

    @property
    def judged(self) -> bool:
        """Whether either version judged the case on the criterion (EXCLUDED is not judged)."""
        return any(outcome not in (None, EXCLUDED) for outcome in (self.base, self.candidate))


@dataclass(frozen=True)
class MatrixRow:
    case_id: str
    cells: list[MatrixCell]

    @property
    def change(self) -> str | None:
        """broken when any criterion broke, else fixed when any got fixed, else None."""
        changes = {cell.change for cell in self.cells}
        return BROKEN if BROKEN in changes else FIXED if FIXED in changes else None


@dataclass(frozen=True)
class SideView:
    version: str
    decision: str | None
    rules: list[dict[str, Any]]
    spend: VersionSpend


@dataclass(frozen=True)
class ComparisonView:
    base: SideView
    candidate: SideView
    criteria: list[CriterionComparison]
    matrix_criteria: list[str]
    rows: list[MatrixRow]

    @property
    def changed(self) -> int:
        return sum(row.change is not None for row in self.rows)

    def cost_difference(self) -> float | None:
        """The version's dollars minus BASE's (None unless both are priced)."""
        if self.base.spend.cost_usd is None or self.candidate.spend.cost_usd is None:
            return None
        return self.candidate.spend.cost_usd - self.base.spend.cost_usd


def side(results: VersionResults) -> SideView:
    return SideView(results.version, results.gate_decision, results.gate, version_spend(results.run_table))


def outcomes_by_case(results: VersionResults) -> dict[str, dict[str, str]]:
    table = results.verdict_table
    found: dict[str, dict[str, str]] = {}
    if not table.empty:
        for case_id, criterion, outcome in zip(table["case_id"], table["criterion"], table["outcome"]):
            found.setdefault(case_id, {})[criterion] = outcome
    return found


def comparison_view(base: VersionResults, candidate: VersionResults, confidence: float = 0.95) -> ComparisonView:
    criteria = compare_versions(base, candidate, confidence)
    names = [item.criterion for item in criteria]
    before, after = outcomes_by_case(base), outcomes_by_case(candidate)
    case_ids = list(dict.fromkeys([*candidate.case_ids, *base.case_ids]))
    rows = [
        MatrixRow(case_id, [MatrixCell(before.get(case_id, {}).get(name), after.get(case_id, {}).get(name)) for name in names])
        for case_id in case_ids
    ]
    rows.sort(key=lambda row: CHANGE_ORDER[row.change])
    return ComparisonView(side(base), side(candidate), criteria, names, rows)
