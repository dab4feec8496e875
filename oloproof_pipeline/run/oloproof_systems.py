"""Systems written for Oloproof, run unchanged (the `oloproof` extra: `pip install
'oloproof-pipeline[oloproof]'`, which pins Oloproof 0.1.0a20).

Such a system imports Oloproof's API: it records its trajectory with
`current_case().agent_trajectory(AgentTrajectory(...))` and may implement a sync or `async`
`replay(trajectory, *, checkpoint: AgentCheckpoint, change: ReplayChange)` that returns the
continuation after the checkpoint. `adapt_system` wraps it so the runner sees a system of its
own kind: each call runs inside an Oloproof case recorder, the recorded `AgentTrajectory` is
mapped onto this project's `Trajectory`, and `replay` gets Oloproof's types and is awaited when
it is a coroutine. This is the one module that knows Oloproof; nothing else imports it.

The mapping (Oloproof -> ours): a step keeps its kind, `tool_name` becomes `tool`, a step's
`error` with no result becomes the result `{"error": ...}`; a checkpoint at `step_index` k
(after step k, None at the start) resumes before our step k; a constraint's `step_index` is
our `step`; `truncated` is the terminal status `truncated`, and `unknown` (Oloproof's default,
"not decided") is `failure`, so an undecided run never counts as a success.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from types import ModuleType
from typing import Any

from ..model.faults import INJECTED_RESULTS
from ..model.trajectory import Checkpoint, RecordedConstraint, Step, ToolChange, Trajectory
from .simulated_user import current_simulated_user

try:  # the `oloproof` extra; without it no system can import Oloproof, so none is adapted
    from oloproof import AgentCheckpoint, AgentConstraintCheck, AgentStep, AgentTrajectory, ReplayChange
    from oloproof_core.execution.recorder import CaseRecorder, recording_case
except ModuleNotFoundError:
    pass

OLOPROOF_MODULES = ("oloproof", "oloproof_core")
AGENT_TRAJECTORY_KIND = "agent_trajectory/v1"


def written_for_oloproof(system: Any) -> bool:
    """Whether the system's module imports Oloproof's API (`from oloproof import ...`)."""
    module = sys.modules.get(getattr(system, "__module__", None) or type(system).__module__)
    if module is None:
        return False
    return any(_is_oloproof_name(_module_of(value)) for value in vars(module).values())


def _module_of(value: Any) -> str:
    return value.__name__ if isinstance(value, ModuleType) else str(getattr(value, "__module__", "") or "")


def _is_oloproof_name(module_name: str) -> bool:
    return any(module_name == root or module_name.startswith(root + ".") for root in OLOPROOF_MODULES)


def adapt_system(system: Any) -> Any:
    """The system as the runner takes it: wrapped when written for Oloproof, else as it is."""
    return OloproofSystem(system) if written_for_oloproof(system) else system


class OloproofSystem:
    """An Oloproof system seen through this project's contract. `reset`, `snapshot`, `version`
    and anything else the system has are its own; `replay` exists only when it has one."""

    def __init__(self, system: Any):
        self._system = system
        self._trajectory: Trajectory | None = None

    def __call__(self, case_input: Any) -> Any:
        self._trajectory = None
        recorder = CaseRecorder()
        # `current_case().simulated_user()`: the case's simulated user (run/simulated_user.py),
        # which records the conversation in our trajectory as it takes place.
        recorder.simulation = current_simulated_user()
        try:
            with recording_case(recorder):
                output = self._system(case_input)
        finally:
            self._trajectory = recorded_trajectory(recorder)
        if recorder.contract_error is not None:
            # A malformed record stops Oloproof's run even when the system caught the error;
            # here it costs the case, recorded as an error that names it.
            raise recorder.contract_error
        return output

    def trajectory(self) -> dict[str, Any] | None:
        """The trajectory the last call recorded, as the runner reads a system's own."""
        return None if self._trajectory is None else self._trajectory.model_dump(mode="json")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # not forwarded: the wrapper's own state (copying, pickling)
            raise AttributeError(name)
        if name == "replay":
            own_replay = getattr(self._system, "replay")  # AttributeError when it has none
            return lambda trajectory, *, checkpoint, change: replay_with(own_replay, trajectory, checkpoint, change)
        return getattr(self._system, name)


def recorded_trajectory(recorder: Any) -> Trajectory | None:
    """The last `agent_trajectory/v1` the case recorded, as our Trajectory."""
    payloads = [artifact.payload for artifact in recorder.artifacts if artifact.kind == AGENT_TRAJECTORY_KIND]
    return from_agent_trajectory(AgentTrajectory.model_validate(payloads[-1])) if payloads else None


# -- Oloproof's AgentTrajectory <-> our Trajectory -------------------------------------------


def from_agent_trajectory(agent: Any) -> Trajectory:
    if agent.truncated:
        status = "truncated"
    else:
        status = agent.terminal_status if agent.terminal_status in ("success", "failure") else "failure"
    return Trajectory(
        steps=[_step(step) for step in agent.steps],
        checkpoints=[_checkpoint(checkpoint, agent.steps) for checkpoint in agent.checkpoints],
        terminal_status=status,
        constraints=[
            RecordedConstraint(name=check.name, passed=check.passed, detail=check.detail, step=check.step_index)
            for check in agent.constraints
        ],
    )


def _step(step: Any) -> Step:
    arguments = step.arguments
    if arguments is not None and not isinstance(arguments, dict):
        arguments = {"value": arguments}  # our calls carry keyword arguments
    result = step.result if step.result is not None or step.error is None else {"error": step.error}
    text = step.result if step.kind in ("message", "final") and isinstance(step.result, str) else None
    # Oloproof's `agent` names which agent of several took the step, not the acting role our
    # `role` holds (the case's `input.role`), so it is not carried over.
    return Step(kind=step.kind, tool=step.tool_name, arguments=arguments, result=result, text=text)


def _checkpoint(checkpoint: Any, steps: Any) -> Checkpoint:
    before = checkpoint.step_index or 0
    calls_before = sum(1 for step in steps[:before] if step.kind == "tool_call")
    return Checkpoint(step=before, calls_before=calls_before, label=checkpoint.checkpoint_id)


def to_agent_trajectory(trajectory: Trajectory) -> Any:
    steps = tuple(
        AgentStep(
            index=position + 1,
            kind=step.kind,
            tool_name=step.tool,
            arguments=step.arguments,
            result=step.text if step.text is not None else step.result,
        )
        for position, step in enumerate(trajectory.steps)
    )
    return AgentTrajectory(
        steps=steps,
        terminal_status="failure" if trajectory.terminal_status == "truncated" else trajectory.terminal_status,
        truncated=trajectory.terminal_status == "truncated",
        constraints=tuple(
            AgentConstraintCheck(name=check.name, passed=check.passed, detail=check.detail, step_index=check.step or None)
            for check in trajectory.constraints
        ),
        checkpoints=tuple(to_agent_checkpoint(checkpoint, trajectory) for checkpoint in trajectory.checkpoints),
    )


def to_agent_checkpoint(checkpoint: Checkpoint, trajectory: Trajectory) -> Any:
    at = checkpoint.step or None
    after_result = at is not None and at <= len(trajectory.steps) and trajectory.steps[at - 1].kind == "tool_result"
    return AgentCheckpoint(
        checkpoint_id=checkpoint.label or f"step-{checkpoint.step}",
        kind="tool_result" if after_result else "checkpoint",
        step_index=at,
    )


def to_replay_change(change: ToolChange | None, trajectory: Trajectory) -> Any:
    """Our change as Oloproof's: none is a `resume` (the control); an injected result is an
    `inject_fault` at the step of the changed call, named by the fault whose result it is."""
    if change is None:
        return ReplayChange(kind="resume")
    call_steps = [position + 1 for position, step in enumerate(trajectory.steps) if step.kind == "tool_call"]
    fault = next((name for name, result in INJECTED_RESULTS.items() if result == change.result), None)
    if fault is None or change.call_index >= len(call_steps):
        raise ValueError(f"this change has no Oloproof ReplayChange: {change.model_dump(mode='json')}")
    return ReplayChange(kind="inject_fault", step_index=call_steps[change.call_index], fault=fault)


def replay_with(own_replay: Any, trajectory: Trajectory, checkpoint: Checkpoint, change: ToolChange | None) -> Trajectory:
    """Call an Oloproof `replay` (sync or async) and map the continuation it returns."""
    continuation = own_replay(
        to_agent_trajectory(trajectory),
        checkpoint=to_agent_checkpoint(checkpoint, trajectory),
        change=to_replay_change(change, trajectory),
    )
    if inspect.isawaitable(continuation):
        continuation = asyncio.run(_awaited(continuation))
    return from_agent_trajectory(AgentTrajectory.model_validate(continuation))


async def _awaited(awaitable: Any) -> Any:
    return await awaitable
