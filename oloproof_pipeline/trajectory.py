"""What a system did during one case: ordered steps, checkpoints, terminal status, constraints."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

TerminalStatus = Literal["success", "failure", "truncated"]


class Step(BaseModel):
    """One thing that happened. `kind` is `tool_call`, `tool_result`, `event` or `message`."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    tool: str | None = None
    arguments: dict[str, Any] | None = None
    result: Any = None
    role: str | None = None
    event: dict[str, Any] | None = None
    text: str | None = None


class Checkpoint(BaseModel):
    """A place a replay may resume from: before step `step`, after `calls_before` tool calls."""

    model_config = ConfigDict(extra="forbid")

    step: int
    calls_before: int
    label: str | None = None


class RecordedConstraint(BaseModel):
    """A rule the system checked about its own behaviour while it ran."""

    model_config = ConfigDict(extra="forbid")

    name: str
    passed: bool
    detail: str | None = None
    step: int | None = None


class Trajectory(BaseModel):
    model_config = ConfigDict(extra="forbid")

    steps: list[Step] = Field(default_factory=list)
    checkpoints: list[Checkpoint] = Field(default_factory=list)
    terminal_status: TerminalStatus = "success"
    constraints: list[RecordedConstraint] = Field(default_factory=list)

    def tool_calls(self) -> list[Step]:
        return [step for step in self.steps if step.kind == "tool_call"]

    def tool_call_signatures(self) -> list[tuple[str | None, dict[str, Any] | None]]:
        """The ordered (tool, arguments) pairs: what two runs must share to count as the same actions."""
        return [(step.tool, step.arguments) for step in self.tool_calls()]

    def failed_constraints(self) -> list[RecordedConstraint]:
        return [constraint for constraint in self.constraints if not constraint.passed]
