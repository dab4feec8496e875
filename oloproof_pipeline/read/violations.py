"""Violated constraints: what trace and python graders found wrong, and what a system recorded
as broken, in one shape for exports and summaries.

A grader puts its violations in a FAIL verdict's details as `{"violations": [{"rule", "step",
"tool", "record", "detail"}, ...]}`. `step` counts tool calls from 1 (the number `oloproof
inspect` shows beside each call; a scripted event's `at_step` counts the same way).
"""

from __future__ import annotations

from typing import Any, Iterable

from ..model.outcomes import FAIL
from ..model.violations import VIOLATION_FIELDS

def verdict_violations(verdict: dict[str, Any]) -> list[dict[str, Any]]:
    """The violations a FAIL verdict's details carry (none for other outcomes or shapes)."""
    details = verdict.get("details")
    if verdict.get("outcome") != FAIL or not isinstance(details, dict):
        return []
    found = details.get("violations")
    if not isinstance(found, list):
        return []
    return [{field: item.get(field) for field in VIOLATION_FIELDS} for item in found if isinstance(item, dict)]


def tool_calls_before(steps: list[dict[str, Any]], step_index: int | None) -> int | None:
    """How many tool calls a trajectory had made before step `step_index` (None stays None)."""
    if step_index is None:
        return None
    return sum(1 for step in steps[:step_index] if step.get("kind") == "tool_call")


def recorded_violations(recording: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The constraints the system itself recorded as broken, stepped like a grader's violations."""
    trajectory = (recording or {}).get("trajectory") or {}
    steps = trajectory.get("steps") or []
    return [
        {
            "rule": constraint["name"],
            "step": tool_calls_before(steps, constraint.get("step")),
            "tool": None,
            "record": None,
            "detail": constraint.get("detail"),
        }
        for constraint in trajectory.get("constraints") or []
        if not constraint.get("passed")
    ]


def case_violations(verdicts: list[dict[str, Any]], recording: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every violation of one case: `source` says who found it, `criterion` which grader."""
    found = [
        {"source": "grader", "criterion": verdict["criterion"], **violation}
        for verdict in verdicts
        for violation in verdict_violations(verdict)
    ]
    found += [{"source": "system", "criterion": None, **violation} for violation in recorded_violations(recording)]
    return found


def violation_summary(verdicts: Iterable[dict[str, Any]], examples: int = 3) -> list[dict[str, Any]]:
    """Per criterion with violations: how many cases and violations, and the first few named
    (`case: step N tool record`), in the order criteria first appear; the verdicts taken one
    at a time, as they are read."""
    summary: dict[str, dict[str, Any]] = {}
    for verdict in verdicts:
        found = verdict_violations(verdict)
        if not found:
            continue
        criterion = verdict["criterion"]
        entry = summary.setdefault(
            criterion, {"criterion": criterion, "rules": [], "cases": 0, "violations": 0, "examples": []}
        )
        entry["cases"] += 1
        entry["violations"] += len(found)
        for violation in found:
            if violation["rule"] not in entry["rules"]:
                entry["rules"].append(violation["rule"])
        if len(entry["examples"]) < examples:
            entry["examples"].append(f"{verdict['case_id']}: {describe_violation(found[0])}")
    return list(summary.values())


def describe_violation(violation: dict[str, Any]) -> str:
    """`step 5 attempt_action APP-2187` (the parts that are known)."""
    step = f"step {violation['step']}" if violation.get("step") is not None else None
    parts = [step, violation.get("tool"), violation.get("record")]
    return " ".join(str(part) for part in parts if part) or (violation.get("detail") or violation["rule"])
