"""Two versions side by side: the same cases paired per criterion, with Tango's score interval
for the change in pass rate (decide/paired.py) and the cases that got fixed and that broke.

A case not judged PASS or FAIL in both versions (MISSING on either side, EXCLUDED on one only,
or in one version's cases only) is an unpaired case: it is left out of the point estimate and
widens the interval the worst-case way (broken for the lower bound, fixed for the upper), as
missing cases widen a rate."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from pydantic import BaseModel

from ..model.outcomes import EXCLUDED, FAIL, PASS
from ..model.errors import ProjectError
from .results import VersionResults
from ..decide.paired import PAIRED_METHOD, paired_difference_interval
from ..store.layout import stored_partitions


class CriterionComparison(BaseModel):
    criterion: str
    paired: int  # cases judged PASS or FAIL in both versions
    both_pass: int
    fixed: int  # FAIL in the base, PASS in the candidate
    broken: int  # PASS in the base, FAIL in the candidate
    both_fail: int
    unpaired: int  # MISSING on either side, EXCLUDED on one, or present in one version only
    base_rate: float | None
    candidate_rate: float | None
    difference: float | None  # candidate minus base pass rate over the paired cases
    lower: float | None  # the interval, over paired and unpaired cases (unpaired worst-case)
    upper: float | None
    method: str = PAIRED_METHOD
    broken_cases: list[str]
    fixed_cases: list[str]


def _outcomes(results: VersionResults) -> dict[str, dict[str, str]]:
    by_criterion: dict[str, dict[str, str]] = {}
    for verdict in results.verdicts:
        by_criterion.setdefault(verdict["criterion"], {})[verdict["case_id"]] = verdict["outcome"]
    return by_criterion


def compare_criterion(criterion: str, base: dict[str, str], candidate: dict[str, str], confidence: float) -> CriterionComparison:
    counts = {"both_pass": [], "fixed": [], "broken": [], "both_fail": []}
    unpaired = 0
    for case_id in sorted(set(base) | set(candidate)):
        pair = (base.get(case_id), candidate.get(case_id))
        if all(outcome in (EXCLUDED, None) for outcome in pair):
            continue  # the criterion does not apply to this case in any version that ran it
        kind = {(PASS, PASS): "both_pass", (FAIL, PASS): "fixed", (PASS, FAIL): "broken", (FAIL, FAIL): "both_fail"}.get(pair)
        if kind is None:
            unpaired += 1
        else:
            counts[kind].append(case_id)
    paired = sum(len(cases) for cases in counts.values())
    base_passes = len(counts["both_pass"]) + len(counts["broken"])
    candidate_passes = len(counts["both_pass"]) + len(counts["fixed"])
    lower = upper = difference = None
    if paired:
        difference = (candidate_passes - base_passes) / paired
    if paired or unpaired:
        lower, upper = paired_difference_interval(
            **{kind: len(cases) for kind, cases in counts.items()}, missing=unpaired, confidence=confidence
        )
    return CriterionComparison(
        criterion=criterion,
        paired=paired,
        both_pass=len(counts["both_pass"]),
        fixed=len(counts["fixed"]),
        broken=len(counts["broken"]),
        both_fail=len(counts["both_fail"]),
        unpaired=unpaired,
        base_rate=base_passes / paired if paired else None,
        candidate_rate=candidate_passes / paired if paired else None,
        difference=difference,
        lower=lower,
        upper=upper,
        broken_cases=counts["broken"],
        fixed_cases=counts["fixed"],
    )


def compare_versions(base: VersionResults, candidate: VersionResults, confidence: float = 0.95) -> list[CriterionComparison]:
    base_outcomes, candidate_outcomes = _outcomes(base), _outcomes(candidate)
    criteria = list(dict.fromkeys([*base_outcomes, *candidate_outcomes]))
    return [
        compare_criterion(criterion, base_outcomes.get(criterion, {}), candidate_outcomes.get(criterion, {}), confidence)
        for criterion in criteria
    ]


def choose_versions(project_root: Path, known: list[str], base: str | None, candidate: str | None) -> tuple[str, str]:
    """The versions asked for, else the two newest (in the order they were added) with verdicts."""
    judged = [version for version in known if version in set(stored_partitions(project_root, "verdicts"))]
    if base is None or candidate is None:
        if len(judged) < 2:
            raise ProjectError(f"comparing needs two judged versions; judged so far: {', '.join(judged) or 'none'}")
        base, candidate = base or judged[-2], candidate or judged[-1]
    return base, candidate


def comparison_table(comparisons: list[CriterionComparison], base: str, candidate: str) -> pd.DataFrame:
    rows = [{"base_version": base, "candidate_version": candidate, **item.model_dump()} for item in comparisons]
    frame = pd.DataFrame(rows)
    for column in ("broken_cases", "fixed_cases"):
        if column in frame:
            frame[column] = frame[column].map(lambda cases: ", ".join(cases))
    return frame


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


def comparison_markdown(comparisons: list[CriterionComparison], base: str, candidate: str) -> str:
    lines = [
        f"{base} -> {candidate}",
        "",
        "| criterion | paired | both pass | fixed | broken | both fail | unpaired | rate change | interval | fixed cases | broken cases |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for item in comparisons:
        lines.append(
            f"| {item.criterion} | {item.paired} | {item.both_pass} | {item.fixed} | {item.broken} | "
            f"{item.both_fail} | {item.unpaired} | {_signed(item.difference)} | {interval_text(item)} | "
            f"{', '.join(item.fixed_cases) or '-'} | {', '.join(item.broken_cases) or '-'} |"
        )
    method = comparisons[0].method if comparisons else PAIRED_METHOD
    lines += ["", f"Intervals: {method} (Tango 1998) at the policy's confidence level; unpaired cases widen them worst-case."]
    return "\n".join(lines)


def interval_text(item: CriterionComparison) -> str:
    """`[-0.138, +0.138]`; three decimals, so a non-zero width never prints as a point."""
    return "-" if item.lower is None else f"[{item.lower:+.3f}, {item.upper:+.3f}]"
