"""Fault plans: which recorded tool call a replay fails, and how; and the stored row of one
case replayed under one plan (both replays whole, and the outcome judged from them).

To add a fixed fault kind, add it to `FaultKind` and its injected result to `INJECTED_RESULTS`.
A `ResultTemplate` fault (`fault: {kind: template, field, template | replace}`) instead changes
the tool's real result: the recorded result with the text at `field` changed as a transform
changes a case's text, and the call still runs in the replay (its effects on the world happen),
so the agent reads the real output with, say, an injected instruction in it.
"""

from __future__ import annotations

import copy
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from .digests import digest
from .paths import ABSENT, DottedPath, path_keys, read_path, write_keys
from .records import EnvironmentState, RecordedRun, ReplayResult
from .trajectory import Checkpoint, ToolChange, Trajectory
from .transforms import change_text

FaultKind = Literal["error", "timeout", "malformed"]
RESULT_TEMPLATE = "template"
# What the agent gets instead of the tool's result; fixed, so every system faces the same fault.
INJECTED_RESULTS: dict[str, Any] = {
    "error": {"error": "internal error"},
    "timeout": {"error": "timeout"},
    "malformed": {"raw": '{"status": '},
}
FAULT_PLAN_TAG = "fault_plan/v1"


class NoTextToChange(ValueError):
    """The recorded result holds no text where a result template writes (worded for a person)."""


class ResultTemplate(BaseModel):
    """A fault that changes the tool's real result: the text at `field` of the recorded result
    (a dotted path into it; "" is the whole result), changed by `template` (`{value}` is the
    text) or `replace` ([old, new] pairs in order), exactly as a metamorphic transform does."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["template"]
    field: DottedPath = ""
    template: str | None = None
    replace: tuple[tuple[str, str], ...] | None = None

    @model_validator(mode="after")
    def _template_or_replace(self) -> "ResultTemplate":
        if (self.template is None) == (self.replace is None):
            raise ValueError("a template fault needs exactly one of 'template' or 'replace'")
        if self.template is not None and "{value}" not in self.template:
            raise ValueError("a template fault's template has no '{value}' to substitute")
        if self.replace is not None and (not self.replace or any(old == "" for old, _ in self.replace)):
            raise ValueError("a template fault's 'replace' needs [old, new] pairs with non-empty old texts")
        return self

    def changed(self, result: Any) -> Any:
        """The result with its text changed. Raises NoTextToChange."""
        where = f"the result's {self.field!r}" if self.field else "the result"
        text = read_path(result, self.field)
        if not isinstance(text, str):
            raise NoTextToChange(f"{where} is not a string (it is {'absent' if text is ABSENT else type(text).__name__})")
        new_text = change_text(text, template=self.template, replace=None if self.replace is None else list(self.replace))
        if new_text == text:
            raise NoTextToChange(f"{where} is unchanged by the template")
        return write_keys(result, path_keys(self.field), new_text)


class FaultPlan(BaseModel):
    """Which call to fault and how, and which tools count as escalating to a person."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    criterion: str
    tool: str
    fault: FaultKind | Literal["template"]
    occurrence: int = 1
    escalate_tools: tuple[str, ...] = ()
    # With fault "template": how the real result is changed.
    result_template: ResultTemplate | None = None

    @property
    def changes_real_result(self) -> bool:
        return self.result_template is not None

    @property
    def injected_result(self) -> Any:
        """A fixed fault's result (None for a template fault: see `result_at`)."""
        return None if self.changes_real_result else copy.deepcopy(INJECTED_RESULTS[self.fault])

    def result_at(self, trajectory: Trajectory, call_index: int) -> Any:
        """What the agent gets at the faulted call: the fixed fault's result, or the recorded
        result changed by the template. Raises NoTextToChange."""
        if self.result_template is None:
            return self.injected_result
        return self.result_template.changed(copy.deepcopy(trajectory.calls()[call_index].result))

    @cached_property
    def digest(self) -> str:
        """What decides the replay itself (not how it is judged): the cache key's plan part.
        Computed once per plan (the plan is frozen); every kept replay is checked against it."""
        body = {"tool": self.tool, "fault": self.fault, "occurrence": self.occurrence, "result": self.injected_result}
        if self.result_template is not None:
            body["result_template"] = self.result_template.model_dump(mode="json")
        return digest(FAULT_PLAN_TAG, body)

    def faulted_call_index(self, trajectory: Trajectory | None) -> int | None:
        """The index among all tool calls of the `occurrence`-th call of `tool`, if made."""
        calls = trajectory.tool_calls() if trajectory is not None else []
        of_tool = [index for index, call in enumerate(calls) if call.tool == self.tool]
        return of_tool[self.occurrence - 1] if len(of_tool) >= self.occurrence else None

    def change_at(self, trajectory: Trajectory, call_index: int) -> ToolChange:
        """The replay's change; a template fault's call still runs (`live`). Raises NoTextToChange."""
        call = trajectory.calls()[call_index]
        return ToolChange(
            call_index=call_index,
            tool=self.tool,
            arguments=call.arguments,
            result=self.result_at(trajectory, call_index),
            live=self.changes_real_result,
        )


def checkpoint_before(trajectory: Trajectory, call_index: int) -> Checkpoint | None:
    """The latest checkpoint with at most `call_index` calls before it: where a replay resumes."""
    usable = [checkpoint for checkpoint in trajectory.checkpoints if checkpoint.calls_before <= call_index]
    return max(usable, key=lambda checkpoint: (checkpoint.calls_before, checkpoint.step), default=None)


class FaultReplay(BaseModel):
    """One case under one fault plan: both replays as stored, and the outcome judged from them."""

    model_config = ConfigDict(extra="forbid")

    case_id: str
    case_digest: str
    system_version: str
    criterion: str
    tool: str
    fault: str
    occurrence: int
    plan_digest: str
    outcome: str
    reason: str
    details: Any = None
    faulted_call_index: int | None = None
    checkpoint: Checkpoint | None = None
    control_status: str | None = None
    control_error: str | None = None
    control_trajectory: Trajectory | None = None
    faulted_status: str | None = None
    faulted_error: str | None = None
    faulted_trajectory: Trajectory | None = None
    faulted_output: Any = None
    faulted_environment_state: EnvironmentState | None = None
    duration_s: float = 0.0
    recorded_by_run: str | None = None
    replayed_by_run: str | None = None

    def control(self) -> ReplayResult | None:
        if self.control_status is None:
            return None
        return ReplayResult(status=self.control_status, error=self.control_error, trajectory=self.control_trajectory)

    def faulted(self) -> ReplayResult | None:
        if self.faulted_status is None:
            return None
        return ReplayResult(
            status=self.faulted_status,
            error=self.faulted_error,
            output=self.faulted_output,
            trajectory=self.faulted_trajectory,
            environment_state=self.faulted_environment_state,
        )

    @property
    def completed(self) -> bool:
        """Both replays ran to the end: worth keeping for the next materialization."""
        return self.control_status == "ok" and self.faulted_status == "ok"

    def belongs_to(self, recording: RecordedRun, plan: FaultPlan) -> bool:
        """Made from this very recording under this plan (a re-record or a new plan makes it stale)."""
        return (
            self.case_digest == recording.case_digest
            and self.recorded_by_run == recording.recorded_by_run
            and self.system_version == recording.system_version
            and self.plan_digest == plan.digest
        )
