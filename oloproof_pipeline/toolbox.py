"""The project's tool box: a system that dispatches its tools through it gets its steps,
checkpoints and constraints recorded without any bookkeeping of its own."""

from __future__ import annotations

import copy
from typing import Any, Callable

from .trajectory import Checkpoint, RecordedConstraint, Step, TerminalStatus, Trajectory

Tool = Callable[..., Any]


class StepLimitReached(Exception):
    """The system made more tool calls than the tool box allows; the case ends `truncated`."""


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

    def register(self, name: str, tool: Tool) -> None:
        self._tools[name] = tool

    @property
    def tool_names(self) -> list[str]:
        return sorted(self._tools)

    # -- used by the runner ------------------------------------------------------------

    def begin(self, *, role: str | None = None) -> None:
        """Start recording a new case."""
        self._trajectory = Trajectory()
        self.role = role

    def trajectory(self) -> Trajectory:
        return self._trajectory.model_copy(deep=True)

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
        steps.append(Step(kind="tool_call", tool=name, arguments=copy.deepcopy(arguments), role=self.role))
        result = self._run(name, arguments)
        steps.append(Step(kind="tool_result", tool=name, result=copy.deepcopy(result)))
        return result

    def constraint(self, name: str, passed: bool, detail: str | None = None) -> None:
        """Record a rule the system checked about what it did (e.g. `claims_only_what_happened`)."""
        self._trajectory.constraints.append(
            RecordedConstraint(name=name, passed=bool(passed), detail=detail, step=len(self._trajectory.steps))
        )

    def message(self, text: str) -> None:
        self._trajectory.steps.append(Step(kind="message", text=text))

    def finish(self, status: TerminalStatus) -> None:
        self._trajectory.terminal_status = status

    def _run(self, name: str, arguments: dict[str, Any]) -> Any:
        try:
            return self._tools[name](**arguments)
        except Exception as error:  # a failing tool is a result the agent must handle
            return {"error": str(error) or type(error).__name__}
