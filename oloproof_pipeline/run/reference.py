"""A case's reference run: the tool calls a correct agent makes (`expected.actions`), played
through the system's own tool box against its reset sandbox, so the world they leave can be
judged by the case's own criteria. A case whose reference fails them is broken, not the agent.
Cases without actions may be played by the project's `reference` instead: a correct agent,
`func(input, toolbox)`, calling the same tools and returning the output. A case's actions
answer nothing unless it gives the output a correct agent returns after them, as
`expected.output` (then criteria that read the answer judge the reference too).

The player wraps the built system in its worker process (`SystemSpec.plays_references`): the
runner resets, records and snapshots it exactly as it does the agent, and only the call is
different, so a reference run is a recording like any other.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..model.config import PROJECT_FILE
from ..model.modules import load_callable
from .spec import SystemSpec
from .system import system_toolbox

# The key of a reference run's input under which the player finds the actions to play.
REFERENCE_ACTIONS = "reference_actions"
# ... and the output it returns after them (`expected.output`), when the case gives one.
REFERENCE_OUTPUT = "reference_output"
CASE_INPUT = "input"


class ReferenceAction(BaseModel):
    """One line of `expected.actions`: a tool call with its arguments."""

    model_config = ConfigDict(extra="forbid")

    tool: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


def reference_actions(expected: dict[str, Any] | None) -> list[ReferenceAction] | None:
    """The case's reference actions, or None when it has none. ValueError names what is wrong."""
    if not expected or "actions" not in expected:
        return None
    actions = expected["actions"]
    if not isinstance(actions, list):
        raise ValueError("expected.actions must be a list of {tool, arguments}")
    parsed = []
    for index, action in enumerate(actions):
        try:
            parsed.append(ReferenceAction.model_validate(action))
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise ValueError(f"expected.actions[{index}]{'.' + where if where else ''}: {first['msg']}") from None
    return parsed


def answers_after_actions(expected: dict[str, Any] | None) -> bool:
    """Whether the case gives the output its reference actions end with (`expected.output`)."""
    return bool(expected) and "output" in expected


def reference_input(case_input: Any, actions: list[ReferenceAction] | None, expected: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the player is called with: the actions (None: play the project's `reference`)
    with the output they end with if the case gives one, and the case's own input (for its
    role, and for the reference callable)."""
    played: dict[str, Any] = {CASE_INPUT: case_input}
    if actions is not None:
        played[REFERENCE_ACTIONS] = [action.model_dump() for action in actions]
        if answers_after_actions(expected):
            played[REFERENCE_OUTPUT] = (expected or {})["output"]
    return played


Reference = Callable[[Any, Any], Any]


def load_reference(spec: SystemSpec) -> Reference | None:
    """oloproof.yaml's `reference` callable, imported in the worker process (None: none)."""
    if spec.reference is None:
        return None
    root = Path(spec.project_root)
    return load_callable(root, spec.reference, where=f"{root / PROJECT_FILE}: reference")


class ReferencePlayer:
    """The system with its agent replaced by the case's reference: its actions, or the
    project's `reference` callable. Everything else (reset, snapshot, the tool box, scripted
    events) is the system's own."""

    def __init__(self, system: Any, reference: Reference | None = None):
        self._system = system
        self._reference = reference

    def __getattr__(self, name: str) -> Any:
        if name == "replay":  # a reference is played, never replayed
            raise AttributeError(name)
        return getattr(self._system, name)

    def __call__(self, played: dict[str, Any]) -> Any:
        toolbox = system_toolbox(self._system)
        if toolbox is None:
            raise TypeError("the system does not dispatch its tools through a ToolBox, so no reference can be played")
        case_input = played.get(CASE_INPUT)
        # The runner took the role from the wrapper; calls are made as the case's role.
        toolbox.role = case_input.get("role") if isinstance(case_input, dict) and isinstance(case_input.get("role"), str) else None
        if REFERENCE_ACTIONS not in played:
            if self._reference is None:
                raise TypeError("the case has no expected.actions and the project names no reference")
            return self._reference(copy.deepcopy(case_input), toolbox)
        results = [toolbox.call(action["tool"], **action["arguments"]) for action in played[REFERENCE_ACTIONS]]
        toolbox.finish("success")
        if REFERENCE_OUTPUT in played:
            return copy.deepcopy(played[REFERENCE_OUTPUT])
        return {"reference_results": results}
