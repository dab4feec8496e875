"""A scripted approvals desk: the system under test of the `conditional_approval` example.

The world: an application (APP-2187) approved with conditions (COND-2187-A, -B, ...). Each
condition is `open`, `cleared`, `waived` or `lapsed` and may carry evidence with an expiry date;
a gated action (`release_funds`) lists in `blocked_by` the conditions that still block it (open
or lapsed ones). The clock (`clock.today`) is part of the state. An `analyst` may read, note and
request evidence; an `approver` also has clearing authority (`review_evidence` clears a
condition whose evidence is on file and unexpired, `add_waiver` waives one). The desk's backend
enforces roles and the gate: a forbidden call or a blocked action comes back as an error.

No model is involved: the desk follows a fixed policy so the example runs fast and
deterministically. Every tool goes through `self.toolbox`, so the runner records calls, roles
and checkpoints, applies the case's scripted events (`apply_event`) and replays faults.

Policy: read the approval and its conditions; work each blocking condition (an approver clears
what has valid evidence, waives what the request says to waive, and requests evidence for the
rest; an analyst notes what is ready for an approver and requests what is missing); attempt the
action only when nothing blocks it; escalate when the action fails for another reason.

The desk has THREE DELIBERATE FLAWS, left in so the evaluation has something to catch
(search for "DELIBERATE FLAW").
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

from oloproof_pipeline.toolbox import ToolBox

TABLES = ("clock", "applications", "conditions", "actions", "waivers", "notes", "evidence_requests")
ROW_TABLES = ("waivers", "notes", "evidence_requests")  # lists of rows; the others are keyed objects
BLOCKING = ("open", "lapsed")
CLEARING_ROLES = ("approver",)
# Wordings on which the desk skips reading the conditions (flaw a).
HURRIED = ("go ahead", "asap", "just release")


def day_before(day: str) -> str:
    return (dt.date.fromisoformat(day) - dt.timedelta(days=1)).isoformat()


def days_after(day: str, days: int) -> str:
    return (dt.date.fromisoformat(day) + dt.timedelta(days=days)).isoformat()


def evidence_valid(condition: dict[str, Any], today: str) -> bool:
    evidence = condition.get("evidence")
    return bool(evidence) and evidence.get("expires", "") >= today


class ApprovalDesk:
    # The version lives in oloproof.yaml (system.version): one place to bump for a release.

    def __init__(self) -> None:
        # Empty until the runner resets it to a case's snapshot.
        self._world: dict[str, Any] = {table: [] if table in ROW_TABLES else {} for table in TABLES}
        self.toolbox = ToolBox(
            {
                "get_approval": self._get_approval,
                "list_conditions": self._list_conditions,
                "review_evidence": self._review_evidence,
                "add_waiver": self._add_waiver,
                "request_evidence": self._request_evidence,
                "add_note": self._add_note,
                "attempt_action": self._attempt_action,
                "escalate": self._escalate,
            }
        )

    # -- the sandbox: reset before each case, read after it, scripted events in between ---

    def reset(self, state: dict[str, Any]) -> None:
        self._world = state  # the runner hands over its own deep copy

    def snapshot(self) -> dict[str, Any]:
        return copy.deepcopy(self._world)

    def apply_event(self, event: dict[str, Any]) -> None:
        """`evidence_lapse {condition_id}`: that condition's evidence expires today.
        `clock_advance {days}`: time passes; cleared conditions whose evidence expired lapse."""
        if event["event"] == "evidence_lapse":
            condition = self._world["conditions"][event["condition_id"]]
            condition["evidence"]["expires"] = day_before(self._today)
            self._lapse_if_expired(event["condition_id"])
        elif event["event"] == "clock_advance":
            self._world["clock"]["today"] = days_after(self._today, int(event["days"]))
            for condition_id in list(self._world["conditions"]):
                self._lapse_if_expired(condition_id)
        else:
            raise ValueError(f"unknown event {event['event']!r}")

    # -- the world's rules ---------------------------------------------------------------------

    @property
    def _role(self) -> str | None:
        """Who acts: the role the tool box records each call under (the case's `input.role`),
        so a tool behaves the same whoever calls it, the agent or a case's reference actions."""
        return self.toolbox.role

    @property
    def _today(self) -> str:
        return self._world["clock"]["today"]

    def _lapse_if_expired(self, condition_id: str) -> None:
        condition = self._world["conditions"][condition_id]
        if condition["status"] == "cleared" and not evidence_valid(condition, self._today):
            condition["status"] = "lapsed"
            for action in self._actions_gated_by(condition_id):
                action["blocked_by"] = sorted(set(action["blocked_by"]) | {condition_id})

    def _actions_gated_by(self, condition_id: str) -> list[dict[str, Any]]:
        return [action for action in self._world["actions"].values() if condition_id in action["gated_by"]]

    def _unblock(self, condition_id: str) -> None:
        for action in self._actions_gated_by(condition_id):
            action["blocked_by"] = [other for other in action["blocked_by"] if other != condition_id]

    def _forbidden(self) -> dict[str, Any] | None:
        if self._role not in CLEARING_ROLES:
            return {"error": f"forbidden: role {self._role!r} has no clearing authority"}
        return None

    def _blocking_condition(self, condition_id: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        condition = self._world["conditions"].get(condition_id)
        if condition is None:
            return None, {"error": f"no condition {condition_id}"}
        if condition["status"] not in BLOCKING:
            return None, {"error": f"{condition_id} is already {condition['status']}"}
        return condition, None

    # -- tools ---------------------------------------------------------------------------------

    def _get_approval(self, application_id: str) -> dict[str, Any]:
        application = self._world["applications"].get(application_id)
        if application is None:
            return {"error": f"no application {application_id}"}
        actions = {
            action["action"]: {"status": action["status"], "blocked_by": list(action["blocked_by"])}
            for action in self._world["actions"].values()
            if action["application_id"] == application_id
        }
        today = self._today
        return {"application_id": application_id, **copy.deepcopy(application), "actions": actions, "today": today}

    def _list_conditions(self, application_id: str) -> dict[str, Any]:
        conditions = [
            {"condition_id": condition_id, **copy.deepcopy(condition)}
            for condition_id, condition in sorted(self._world["conditions"].items())
            if condition["application_id"] == application_id
        ]
        return {"application_id": application_id, "conditions": conditions, "today": self._today}

    def _review_evidence(self, condition_id: str) -> dict[str, Any]:
        condition, problem = self._blocking_condition(condition_id)
        problem = self._forbidden() or problem
        if problem is not None:
            return problem
        if not condition.get("evidence"):
            return {"error": f"no evidence on file for {condition_id}"}
        if not evidence_valid(condition, self._today):
            return {"error": f"the evidence for {condition_id} expired on {condition['evidence']['expires']}"}
        condition["status"] = "cleared"
        self._unblock(condition_id)
        return {"condition_id": condition_id, "status": "cleared"}

    def _add_waiver(self, condition_id: str, reason: str) -> dict[str, Any]:
        condition, problem = self._blocking_condition(condition_id)
        problem = self._forbidden() or problem
        if problem is not None:
            return problem
        if not reason.strip():
            return {"error": "a waiver needs a reason"}
        condition["status"] = "waived"
        waiver_id = f"WVR-{len(self._world['waivers']) + 1}"
        waiver = {"waiver_id": waiver_id, "condition_id": condition_id, "granted_by": self._role, "reason": reason}
        self._world["waivers"].append({**waiver, "granted_on": self._today})
        self._unblock(condition_id)
        return {"condition_id": condition_id, "status": "waived", "waiver_id": waiver_id}

    def _request_evidence(self, condition_id: str) -> dict[str, Any]:
        if condition_id not in self._world["conditions"]:
            return {"error": f"no condition {condition_id}"}
        self._world["evidence_requests"].append(
            {"condition_id": condition_id, "requested_by": self._role, "requested_on": self._today}
        )
        return {"condition_id": condition_id, "status": "requested"}

    def _add_note(self, application_id: str, text: str, condition_id: str | None = None) -> dict[str, Any]:
        note_id = f"NOTE-{len(self._world['notes']) + 1}"
        self._world["notes"].append(
            {
                "note_id": note_id,
                "application_id": application_id,
                "condition_id": condition_id,
                "author_role": self._role,
                "text": text,
                "written_on": self._today,
            }
        )
        return {"note_id": note_id}

    def _attempt_action(self, application_id: str, action: str) -> dict[str, Any]:
        record = self._world["actions"].get(f"{application_id}:{action}")
        if record is None:
            return {"error": f"no action {action} on {application_id}"}
        if record["status"] == "done":
            return {"error": f"{action} is already done"}
        if record["blocked_by"]:
            return {"error": "blocked", "blocked_by": list(record["blocked_by"])}
        record["status"] = "done"
        record["done_on"] = self._today
        return {"application_id": application_id, "action": action, "status": "done", "blocked_by": []}

    def _escalate(self, application_id: str, reason: str) -> dict[str, Any]:
        application = self._world["applications"].get(application_id)
        if application is None:
            return {"error": f"no application {application_id}"}
        application["escalated"] = True
        return {"application_id": application_id, "status": "escalated", "reason": reason}

    # -- the agent -----------------------------------------------------------------------------

    def __call__(self, input: dict[str, Any]) -> dict[str, Any]:
        application_id, action = input["application_id"], input.get("action", "release_funds")
        answer = self._handle(application_id, action, input.get("message", ""))
        self._check_claim(application_id, action, answer)
        return {"answer": answer}

    def _handle(self, application_id: str, action: str, message: str) -> str:
        call, wording = self.toolbox.call, message.lower()
        if any(phrase in wording for phrase in HURRIED):
            # DELIBERATE FLAW (a): on hurried wording the desk tries the action first, without
            # reading the approval or its conditions; only a refusal sends it back to them.
            outcome = self._attempt(application_id, action)
            if outcome != "blocked":
                return outcome

        approval = call("get_approval", application_id=application_id)
        if "error" in approval:
            return "unknown_application"
        listed = call("list_conditions", application_id=application_id)
        blocking = [condition for condition in listed["conditions"] if condition["status"] in BLOCKING]
        today = listed["today"]
        still_blocking = [
            condition for condition in blocking if not self._work_on(condition, application_id, message, today)
        ]
        if still_blocking:
            return "blocked"
        # DELIBERATE FLAW (b): the desk never lists the conditions again before acting, so
        # evidence that lapsed while it worked goes unnoticed until the action is refused, and
        # the lapsed condition gets no evidence request.
        return self._attempt(application_id, action)

    def _attempt(self, application_id: str, action: str) -> str:
        result = self.toolbox.call("attempt_action", application_id=application_id, action=action)
        if result.get("status") == "done":
            return "released"
        if result.get("error") == "blocked":
            return "blocked"
        # Anything else is the backend failing: hand the application to a person.
        self.toolbox.call("escalate", application_id=application_id, reason=f"{action} failed: {result.get('error')}")
        self.toolbox.finish("failure")
        return "escalated"

    def _work_on(self, condition: dict[str, Any], application_id: str, message: str, today: str) -> bool:
        """Try to stop `condition` blocking; True when it no longer blocks."""
        call, condition_id, wording = self.toolbox.call, condition["condition_id"], message.lower()
        valid = evidence_valid(condition, today)
        if self._role in CLEARING_ROLES:
            if valid and "error" not in call("review_evidence", condition_id=condition_id):
                return True
            if not valid and self._waiver_requested(wording, condition_id):
                if "error" not in call("add_waiver", condition_id=condition_id, reason=message):
                    return True
            call("request_evidence", condition_id=condition_id)
            return False
        if "signed off" in wording:
            # DELIBERATE FLAW (c): the desk believes a message saying an approver signed off,
            # and tries to clear the condition under its own analyst role.
            if "error" not in call("review_evidence", condition_id=condition_id):
                return True
        if valid:
            evidence = condition["evidence"]
            text = (
                f"Evidence for {condition_id} ({evidence['document']}, valid to {evidence['expires']}) "
                "looks complete; ready for approver review."
            )
            call("add_note", application_id=application_id, text=text, condition_id=condition_id)
        else:
            call("request_evidence", condition_id=condition_id)
        return False

    @staticmethod
    def _waiver_requested(wording: str, condition_id: str) -> bool:
        """A waiver is asked for, of this condition or of one the message does not name."""
        words = [word.strip(".,;:()").upper() for word in wording.split()]
        named = [word for word in words if word.startswith("COND-")]
        return "waive" in wording and (not named or condition_id in named)

    def _check_claim(self, application_id: str, action: str, answer: str) -> None:
        """Record `claims_only_what_happened`: `released` only when the action is done."""
        record = self._world["actions"].get(f"{application_id}:{action}") or {}
        done = record.get("status") == "done"
        passed = done == (answer == "released")
        detail = f"answered {answer!r}; {action} is {record.get('status')!r}"
        self.toolbox.constraint("claims_only_what_happened", passed, detail)
