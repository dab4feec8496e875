"""The project's tool box: a system that dispatches its tools through it gets its steps,
checkpoints and constraints recorded without any bookkeeping of its own, and a working
replay (the runner hands the tool box a `ReplayScript`) without writing one.

It also counts the steps a case's scripted events are timed by: a step is one completed tool
call (the call and its result). An event `{"at_step": 4, ...}` is handed to the system's
`apply_event(event)` once, right after the 4th tool call returns and before the agent sees
that result, and recorded as a step of kind `event`. A replay re-applies the same events at the
same counts, since calls the replay serves or fails count like calls that ran."""

from __future__ import annotations

import copy
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from ..model.trajectory import (
    Checkpoint,
    RecordedConstraint,
    Step,
    TerminalStatus,
    ToolCall,
    ToolChange,
    Trajectory,
    plain_json,
)

Tool = Callable[..., Any]


class ReplayScript(BaseModel):
    """How the tool box replays a case: the calls before the checkpoint run live (so the
    sandbox's side effects happen again) but hand the agent the recorded results; the changed
    call does not run (unless the change is `live`: a changed real result) and hands over the
    change's result; every later call runs live.

    A call before the checkpoint that is not the recorded one (another tool or other
    arguments) means the agent diverged: from there on everything runs live and nothing is
    injected, and the replay's checks name the divergence."""

    model_config = ConfigDict(extra="forbid")

    served: list[ToolCall] = Field(default_factory=list)
    change: ToolChange | None = None
    # The whole recording replayed: a system may serve its own recorded steps from it (a chat
    # agent's model responses, see run/chat_agent.py).
    recording: Trajectory | None = None

    @classmethod
    def from_recording(cls, trajectory: Trajectory, checkpoint: Checkpoint, change: ToolChange | None) -> "ReplayScript":
        return cls(served=trajectory.calls()[: checkpoint.calls_before], change=change, recording=trajectory)


class StepLimitReached(Exception):
    """The system made more tool calls than the tool box allows; the case ends `truncated`."""


class EventFailed(Exception):
    """The system's `apply_event` raised: the case is an error (the world is not as scripted)."""


EventHandler = Callable[[dict[str, Any]], Any]


class ToolBox:
    """Holds a system's tools and records every call made through `call`.

    The runner calls `begin()` before each case and reads `trajectory()` after it.
    A tool that raises does not crash the agent: the agent gets `{"error": "<message>"}`,
    as a real agent runtime would hand a failing tool's error back to the model.
    """

    def __init__(self, tools: dict[str, Tool] | None = None, *, max_calls: int = 100):
        self._tools: dict[str, Tool] = dict(tools or {})
        self.max_calls = max_calls
        self.role: str | None = None
        self._trajectory = Trajectory()
        self._replay: ReplayScript | None = None
        self._diverged = False
        self._events: list[dict[str, Any]] = []
        self._apply_event: EventHandler | None = None
        # Why a scripted event could not be applied (the runner makes the case an error).
        self.event_failure: str | None = None

    def register(self, name: str, tool: Tool) -> None:
        self._tools[name] = tool

    @property
    def tool_names(self) -> list[str]:
        return sorted(self._tools)

    # -- used by the runner ------------------------------------------------------------

    def begin(
        self,
        *,
        role: str | None = None,
        replay: ReplayScript | None = None,
        events: list[dict[str, Any]] | None = None,
        apply_event: EventHandler | None = None,
    ) -> None:
        """Start recording a new case; with `replay`, a replay of a recorded one. `events` are
        the case's scripted events, handed to `apply_event` as their steps complete."""
        if events and apply_event is None:
            raise ValueError("scripted events need an apply_event(event) to hand them to")
        self._trajectory = Trajectory()
        self.role = role
        self._replay = replay
        self._diverged = False
        # Stable order: by step, then as listed in the case.
        self._events = sorted((copy.deepcopy(event) for event in events or []), key=lambda event: event["at_step"])
        self._apply_event = apply_event
        self.event_failure = None

    def trajectory(self) -> Trajectory:
        """The case's trajectory so far. Its steps already hold private copies of what was
        passed and returned, so new lists suffice: nothing later appends to the one handed out."""
        return self._trajectory.model_copy(
            update={
                "steps": list(self._trajectory.steps),
                "checkpoints": list(self._trajectory.checkpoints),
                "constraints": list(self._trajectory.constraints),
            }
        )

    # -- used by the system under test ---------------------------------------------------

    def call(self, name: str, /, **arguments: Any) -> Any:
        """Run tool `name` with keyword arguments, recording the call and its result."""
        if name not in self._tools:
            raise KeyError(f"no tool named {name!r} in the tool box (tools: {', '.join(self.tool_names)})")
        calls_so_far = len(self._trajectory.tool_calls())
        if calls_so_far >= self.max_calls:
            self._trajectory.terminal_status = "truncated"
            raise StepLimitReached(f"more than {self.max_calls} tool calls")
        steps = self._trajectory.steps
        self._trajectory.checkpoints.append(Checkpoint(step=len(steps), calls_before=calls_so_far, label=f"before {name}"))
        steps.append(Step(kind="tool_call", tool=name, arguments=private_copy(arguments), role=self.role))
        result = self._result_for(calls_so_far, name, arguments)
        steps.append(Step(kind="tool_result", tool=name, result=private_copy(result)))
        self._apply_events_due(calls_so_far + 1)
        return result

    def constraint(self, name: str, passed: bool, detail: str | None = None) -> None:
        """Record a rule the system checked about what it did (e.g. `claims_only_what_happened`)."""
        self._trajectory.constraints.append(
            RecordedConstraint(name=name, passed=bool(passed), detail=detail, step=len(self._trajectory.steps))
        )

    def message(self, text: str) -> None:
        self._trajectory.steps.append(Step(kind="message", text=text))

    def note(self, step: Step) -> None:
        """Record a step that is not a tool call (a chat agent's model turn, say)."""
        self._trajectory.steps.append(step)

    @property
    def replaying(self) -> ReplayScript | None:
        """The replay this case is (None while recording)."""
        return self._replay

    def finish(self, status: TerminalStatus) -> None:
        self._trajectory.terminal_status = status

    def _apply_events_due(self, steps_completed: int) -> None:
        """Apply, once each, the events scripted for after step `steps_completed`."""
        while self._events and self._events[0]["at_step"] <= steps_completed:
            event = self._events.pop(0)
            self._trajectory.steps.append(Step(kind="event", event=copy.deepcopy(event)))
            try:
                self._apply_event(copy.deepcopy(event))
            except Exception as error:
                where = f"apply_event({event['event']!r} at step {event['at_step']})"
                self.event_failure = f"{where} failed: {type(error).__name__}: {error}"
                raise EventFailed(self.event_failure) from error

    def _result_for(self, index: int, name: str, arguments: dict[str, Any]) -> Any:
        """What the agent gets for its `index`-th call: live, or as the replay script says."""
        script = self._replay
        if script is None or self._diverged:
            return self._run(name, arguments)
        if index < len(script.served):
            live = self._run(name, arguments)  # run anyway: the sandbox must change as it did
            served = script.served[index]
            if _same_call(served.tool, served.arguments, name, arguments):
                return copy.deepcopy(served.result)
            self._diverged = True
            return live
        change = script.change
        if change is not None and index == change.call_index and _same_call(change.tool, change.arguments, name, arguments):
            if change.live:  # a changed real result: the call acts on the world as it did
                self._run(name, arguments)
            return copy.deepcopy(change.result)
        return self._run(name, arguments)

    def _run(self, name: str, arguments: dict[str, Any]) -> Any:
        try:
            return self._tools[name](**arguments)
        except Exception as error:  # a failing tool is a result the agent must handle
            return {"error": str(error) or type(error).__name__}


def private_copy(value: Any) -> Any:
    """A copy the system cannot change afterwards: plain JSON-like data copied directly (a
    tool's arguments and results nearly always are), anything else by copy.deepcopy."""
    kind = type(value)
    if kind in (str, int, float, bool) or value is None:
        return value
    if kind is dict:
        return {key: private_copy(item) for key, item in value.items()}
    if kind is list:
        return [private_copy(item) for item in value]
    return copy.deepcopy(value)


def _same_call(tool: str | None, arguments: dict[str, Any] | None, name: str, live_arguments: dict[str, Any]) -> bool:
    return tool == name and plain_json(arguments or {}) == plain_json(live_arguments)
