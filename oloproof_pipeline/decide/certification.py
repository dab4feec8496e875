"""`require_certified_cases: true`: cases certification flagged count as EXCLUDED, with the
flag as the reason, and never as passes. passes_when_nothing_is_done excludes the case from the
criterion it names only; every other flag (a broken case, a duplicated input) from every
criterion. Each rule says how many cases it lost this way."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Iterable

import pandas as pd

from ..model.config import Project
from ..model.outcomes import EXCLUDED, PASSES_WHEN_NOTHING_IS_DONE, STRUCTURAL_EXCLUSIONS
from .gate import GateDecision, RuleDecision, decide_gate, decide_release_gate

UNCERTIFIED_EXCLUDED = "uncertified_cases_excluded"
# The one flag about a criterion rather than the case: doing nothing passes that criterion
# only. A broken case (its reference fails, its input repeats with other expectations) is
# left out of every criterion, whichever criterion showed it broken.
PER_CRITERION_FLAGS = frozenset({PASSES_WHEN_NOTHING_IS_DONE})


def excluded_flags(flags: Iterable[dict[str, Any]]) -> dict[str, dict[str | None, str]]:
    """case id -> {criterion (None: every criterion) -> the flag that excludes it}."""
    by_case: dict[str, dict[str | None, str]] = defaultdict(dict)
    for item in flags:
        criterion = item["criterion"] if item["flag"] in PER_CRITERION_FLAGS else None
        by_case[item["case_id"]].setdefault(criterion, item["flag"])
    return by_case


def exclude_uncertified(verdicts: pd.DataFrame, flags: Iterable[dict[str, Any]]) -> tuple[pd.DataFrame, dict[str, Counter]]:
    """The verdicts (columns case_id, criterion, outcome, reason, ...) with each flagged case's
    verdicts EXCLUDED and the flag as their reason; and per criterion, the flags counted."""
    by_case = excluded_flags(flags)
    frame = verdicts.copy()
    counts: dict[str, Counter] = defaultdict(Counter)
    outcomes, reasons = frame["outcome"].tolist(), frame["reason"].tolist()
    for position, (case_id, criterion, reason) in enumerate(zip(frame["case_id"], frame["criterion"], reasons)):
        case_flags = by_case.get(case_id)
        if not case_flags or reason in STRUCTURAL_EXCLUSIONS:
            continue
        name = case_flags.get(None) or case_flags.get(criterion)
        if name is None:
            continue
        outcomes[position], reasons[position] = EXCLUDED, name
        counts[criterion][name] += 1
    frame["outcome"], frame["reason"] = outcomes, reasons
    return frame, counts


def exclusion_reason(counts: Counter) -> str:
    """`uncertified_cases_excluded: 13 (passes_when_nothing_is_done 12, reference_fails 1)`."""
    parts = ", ".join(f"{name} {count}" for name, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])))
    return f"{UNCERTIFIED_EXCLUDED}: {sum(counts.values())} ({parts})"


def decide_certified_gate(
    project: Project, verdicts: pd.DataFrame, derived_cases: pd.DataFrame | None, flags: Iterable[dict[str, Any]],
    trial_verdicts: pd.DataFrame | None = None,
) -> GateDecision:
    """The gate over certified cases only: flagged cases EXCLUDED, each rule naming how many."""
    certified, counts = exclude_uncertified(verdicts, flags)
    gate = decide_release_gate(project, certified, derived_cases, trial_verdicts)
    rules: list[RuleDecision] = []
    for rule in gate.rules:
        lost = counts.get(rule.metric)
        rules.append(rule.model_copy(update={"reasons": [*rule.reasons, exclusion_reason(lost)]}) if lost else rule)
    return decide_gate(rules)
