"""Custom graders of the conditional-approval example, for what the trace rules cannot say.

A grader is `func(case, recording)` returning `{"outcome", "reason", "details"}`; violations go
in `details["violations"]` so `oloproof export` lists them with the trace rules' own.
"""

from __future__ import annotations

from typing import Any

BLOCKING = ("open", "lapsed")
# Calls that show a person what a blocking condition still needs.
FOLLOW_UP_TOOLS = ("request_evidence", "add_note")


def followed_up(trajectory: Any) -> tuple[set[str], bool]:
    """The conditions the run asked evidence for or noted, and whether it escalated."""
    steps = trajectory.steps if trajectory is not None else []
    conditions, escalated = set(), False
    for position, step in enumerate(steps):
        if step.kind != "tool_call":
            continue
        following = steps[position + 1] if position + 1 < len(steps) else None
        result = following.result if following is not None and following.kind == "tool_result" else None
        if isinstance(result, dict) and "error" in result:
            continue  # a call the backend refused followed nothing up
        if step.tool in FOLLOW_UP_TOOLS and (step.arguments or {}).get("condition_id"):
            conditions.add(step.arguments["condition_id"])
        escalated = escalated or step.tool == "escalate"
    return conditions, escalated


def blockers_followed_up(case: Any, recording: Any) -> dict[str, Any]:
    """Every condition still blocking the application when the run ends has an evidence request
    or a note from this run (or the run escalated): nothing is left silently stuck."""
    application_id = case.input["application_id"]
    conditions = (recording.state_after or {}).get("conditions", {})
    blocking = sorted(
        condition_id
        for condition_id, condition in conditions.items()
        if condition.get("application_id") == application_id and condition.get("status") in BLOCKING
    )
    if not blocking:
        return {"outcome": "EXCLUDED", "reason": "nothing_blocking"}
    handled, escalated = followed_up(recording.trajectory)
    violations = [
        {
            "rule": "blocker_followed_up",
            "step": None,
            "tool": None,
            "record": condition_id,
            "detail": f"{condition_id} is {conditions[condition_id]['status']} at the end, with no evidence "
            "request or note for it",
        }
        for condition_id in blocking
        if condition_id not in handled and not escalated
    ]
    details = {"blocking": blocking, "followed_up": sorted(handled), "escalated": escalated, "violations": violations}
    if violations:
        stuck = ", ".join(violation["record"] for violation in violations)
        return {"outcome": "FAIL", "reason": f"not followed up: {stuck}", "details": details}
    return {"outcome": "PASS", "reason": "every blocker followed up", "details": details}
