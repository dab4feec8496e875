"""Fault plans: which recorded tool call a replay fails, and how; and the stored row of one
case replayed under one plan (both replays whole, and the outcome judged from them).

To add a fault kind, add it to `FaultKind` and its injected result to `INJECTED_RESULTS`.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .digests import digest
from .records import EnvironmentState, RecordedRun, ReplayResult
from .trajectory import Checkpoint, ToolChange, Trajectory

FaultKind = Literal["error", "timeout", "malformed"]
# What the agent gets instead of the tool's result; fixed, so every system faces the same fault.
INJECTED_RESULTS: dict[str, Any] = {
    "error": {"error": "internal error"},
    "timeout": {"error": "timeout"},
    "malformed": {"raw": '{"status": '},
}
FAULT_PLAN_TAG = "fault_plan/v1"


class FaultPlan(BaseModel):
    """Which call to fault and how, and which tools count as escalating to a person."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    criterion: str
    tool: str
    fault: FaultKind
    occurrence: int = 1
    escalate_tools: tuple[str, ...] = ()

    @property
    def injected_result(self) -> Any:
        return copy.deepcopy(INJECTED_RESULTS[self.fault])

    @property
    def digest(self) -> str:
        """What decides the replay itself (not how it is judged): the cache key's plan part."""
        body = {"tool": self.tool, "fault": self.fault, "occurrence": self.occurrence, "result": self.injected_result}
        return digest(FAULT_PLAN_TAG, body)

    def faulted_call_index(self, trajectory: Trajectory | None) -> int | None:
        """The index among all tool calls of the `occurrence`-th call of `tool`, if made."""
        calls = trajectory.tool_calls() if trajectory is not None else []
        of_tool = [index for index, call in enumerate(calls) if call.tool == self.tool]
        return of_tool[self.occurrence - 1] if len(of_tool) >= self.occurrence else None

    def change_at(self, trajectory: Trajectory, call_index: int) -> ToolChange:
        call = trajectory.calls()[call_index]
        return ToolChange(call_index=call_index, tool=self.tool, arguments=call.arguments, result=self.injected_result)


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
