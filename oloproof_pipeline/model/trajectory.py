"""What a system did during one case: ordered steps, checkpoints, terminal status, constraints."""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence, TypeVar

from pydantic import BaseModel, ConfigDict, Field

TerminalStatus = Literal["success", "failure", "truncated"]
# A chat agent's model turn (run/chat_agent.py): `result` holds the request's digest, the
# response, its token usage and latency, and whether it was served from the recording.
MODEL_STEP = "model"
# A simulated user's request (run/simulated_user.py): `text` holds the user's message (None for
# the question whether its goal was met, `result["purpose"] == "goal_check"`); `result` holds
# the request's digest and the response as a model turn's does, kept apart from the system's.
USER_STEP = "user"
USER_MESSAGE, GOAL_CHECK = "message", "goal_check"
Item = TypeVar("Item")


# One encoder for every call: `json.dumps` with an option builds one each time.
_AS_STORED = json.JSONEncoder(default=repr)


def plain_json(value: Any) -> Any:
    """`value` as stored JSON reads back (tuples as lists), so a live call compares equal to
    its stored recording; anything not JSON compares by its text."""
    if value is None or type(value) in (str, int, bool):  # reads back as it is
        return value
    return json.loads(_AS_STORED.encode(value))


def first_difference(
    first: Sequence[Item], second: Sequence[Item], same: Callable[[Item, Item], bool] = operator.eq
) -> int | None:
    """The index where two sequences first differ (or where the shorter one stops), else None."""
    for index, (mine, theirs) in enumerate(zip(first, second)):
        if not same(mine, theirs):
            return index
    if len(first) != len(second):
        return min(len(first), len(second))
    return None


@dataclass(frozen=True)
class ToolCall:
    """A tool call with the result the agent got (None when no result step follows it)."""

    number: int  # counted from 1, as events' `at_step` counts
    tool: str | None
    arguments: dict[str, Any] | None
    role: str | None
    result: Any

    @property
    def signature(self) -> tuple[str | None, Any]:
        """(tool, arguments) as stored JSON reads back, so live and stored runs compare."""
        return self.tool, plain_json(self.arguments)


@dataclass(frozen=True)
class EventAt:
    """A scripted event with the number of tool calls made before it."""

    after_calls: int
    event: dict[str, Any]

    @property
    def name(self) -> Any:
        return self.event.get("event")


class Step(BaseModel):
    """One thing that happened. `kind` is `tool_call`, `tool_result`, `event`, `message`,
    `model` (a chat agent's model turn) or `user` (a simulated user's request)."""

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

    def calls(self) -> list[ToolCall]:
        """Each tool call with the result in the step right after it."""
        steps, calls = self.steps, []
        for position, step in enumerate(steps):
            if step.kind != "tool_call":
                continue
            following = steps[position + 1] if position + 1 < len(steps) else None
            result = following.result if following is not None and following.kind == "tool_result" else None
            calls.append(ToolCall(len(calls) + 1, step.tool, step.arguments, step.role, result))
        return calls

    def events(self) -> list[EventAt]:
        """The scripted events applied, each with the number of tool calls made before it."""
        events, calls = [], 0
        for step in self.steps:
            calls += step.kind == "tool_call"
            if step.kind == "event" and step.event is not None:
                events.append(EventAt(calls, step.event))
        return events

    def call_signatures(self) -> list[tuple[str | None, Any]]:
        """(tool, arguments) per call as stored JSON reads back."""
        return [call.signature for call in self.calls()]

    def tool_call_signatures(self) -> list[tuple[str | None, dict[str, Any] | None]]:
        """The ordered (tool, arguments) pairs: what two runs must share to count as the same actions."""
        return [(step.tool, step.arguments) for step in self.tool_calls()]

    def model_turns(self) -> list[dict[str, Any]]:
        return [step.result for step in self.steps if step.kind == MODEL_STEP and isinstance(step.result, dict)]

    def model_usage(self) -> dict[str, Any]:
        """The model calls made live (not served from a recording), their tokens and latency;
        None each for a trajectory with no model turn at all (a scripted agent's)."""
        turns = self.model_turns()
        if not turns:
            return dict.fromkeys(("model_calls", "prompt_tokens", "completion_tokens", "model_latency_s"))
        live = [turn for turn in turns if not turn.get("served")]
        usage = [turn.get("usage") or {} for turn in live]
        return {
            "model_calls": len(live),
            "prompt_tokens": sum(int(each.get("prompt_tokens") or 0) for each in usage),
            "completion_tokens": sum(int(each.get("completion_tokens") or 0) for each in usage),
            "model_latency_s": round(sum(float(turn.get("latency_s") or 0.0) for turn in live), 6),
        }

    def user_requests(self) -> list[dict[str, Any]]:
        """Every request to the simulated user's model (its messages and its goal checks)."""
        return [step.result for step in self.steps if step.kind == USER_STEP and isinstance(step.result, dict)]

    def user_turns(self) -> list[str]:
        """The simulated user's messages, in order (the persona's opening among them)."""
        return [step.text for step in self.steps if step.kind == USER_STEP and step.text is not None]

    def conversation(self) -> list[tuple[str, str]]:
        """(`user` | `assistant`, text) per message: each simulated user's message, and each
        answer of the system's model that called no tool (what the user was told)."""
        said = []
        for step in self.steps:
            if step.kind == USER_STEP and step.text is not None:
                said.append(("user", step.text))
            elif step.kind == MODEL_STEP and isinstance(step.result, dict):
                message = step.result.get("message") or {}
                if not message.get("tool_calls"):
                    said.append(("assistant", str(message.get("content") or "")))
        return said

    def user_usage(self) -> dict[str, Any]:
        """The simulated user's requests made live, and their tokens: kept apart from the
        system's model usage (None each for a trajectory with no simulated user)."""
        requests = self.user_requests()
        if not requests:
            return dict.fromkeys(("user_calls", "user_prompt_tokens", "user_completion_tokens"))
        usage = [request.get("usage") or {} for request in requests if not request.get("served") and "usage" in request]
        return {
            "user_calls": len(usage),
            "user_prompt_tokens": sum(int(each.get("prompt_tokens") or 0) for each in usage),
            "user_completion_tokens": sum(int(each.get("completion_tokens") or 0) for each in usage),
        }

    def failed_constraints(self) -> list[RecordedConstraint]:
        return [constraint for constraint in self.constraints if not constraint.passed]


class ToolChange(BaseModel):
    """A replay's change: at tool call `call_index` (0-based, counting every tool call), the
    call of `tool` with `arguments` gets `result` instead of running (the tool failed before
    it acted), or, with `live`, after running (its real result changed). This is the `change` a hand-written `replay` method receives (None: no change)."""

    model_config = ConfigDict(extra="forbid")

    call_index: int = Field(ge=0)
    tool: str
    arguments: dict[str, Any] | None = None
    result: Any = None
    # The call still runs (its effects on the world happen); only what the agent gets is
    # `result` (a fault that changes the real result, model/faults.py ResultTemplate).
    live: bool = False
