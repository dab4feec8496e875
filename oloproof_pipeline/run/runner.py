"""The sandbox runner: reset the world to a case's starting state, run the system once,
record what it returned, what it did and the world it left behind. It also replays a
recorded case from a checkpoint under a change (the same reset, lock and timeout).

A system that raises, hangs or returns something that is not JSON costs that case only.
"""

from __future__ import annotations

import copy
import json
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import ValidationError

from ..model.digests import state_digest
from ..model.cases import CaseRecord
from ..model.records import EnvironmentState, RecordedRun, ReplayResult
from .system import Replayable, Stateful, system_toolbox
from ..model.trajectory import ToolChange
from .toolbox import ReplayScript, StepLimitReached
from ..model.trajectory import Checkpoint, Trajectory


class CaseTimedOut(Exception):
    pass


@dataclass
class CallResult:
    value: Any = None
    error: BaseException | None = None
    error_text: str | None = None


def call_with_timeout(function: Callable[[], Any], timeout_s: float) -> CallResult:
    """Run `function` in a daemon thread. A thread cannot be killed, so a hung call is left
    behind and the caller must stop using whatever object it holds."""
    result = CallResult()

    def target() -> None:
        try:
            result.value = function()
        except BaseException as error:  # noqa: BLE001 - any failure of the system is data
            result.error = error
            result.error_text = _describe_exception(error)

    thread = threading.Thread(target=target, name="oloproof-case", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        result.error = CaseTimedOut(f"no answer within {timeout_s:g} s")
        result.error_text = str(result.error)
    return result


def _describe_exception(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(error).__name__}: {error}{where}"


def as_json(value: Any) -> Any:
    """A JSON round trip: plain data out, or ValueError/TypeError naming what is not JSON."""
    return json.loads(json.dumps(value, allow_nan=False))


def state_difference(expected: Any, actual: Any) -> list[str]:
    """The top-level record tables that differ (what a failed reset check names)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        return sorted(key for key in set(expected) | set(actual) if expected.get(key) != actual.get(key))
    return ["<whole state>"]


class SandboxRunner:
    """Records cases against one system instance, one case at a time.

    `system_factory` builds a fresh instance; a new one replaces an instance left behind
    by a hung case.
    """

    def __init__(self, system_factory: Callable[[], Any], *, system_version: str, timeout_s: float):
        self._system_factory = system_factory
        self._system = system_factory()
        self._lock = threading.Lock()  # cases sharing one system run one at a time
        self.system_version = system_version
        self.timeout_s = timeout_s

    @property
    def system(self) -> Any:
        return self._system

    def record(self, case: CaseRecord) -> RecordedRun:
        with self._lock:
            started = time.perf_counter()
            run = self._record_unlocked(case)
            run.duration_s = round(time.perf_counter() - started, 6)
            return run

    def replay(
        self, case: CaseRecord, trajectory: Trajectory, checkpoint: Checkpoint, change: ToolChange | None
    ) -> ReplayResult:
        """Re-run a recorded case from `checkpoint` under `change` (None: a control replay),
        after resetting the sandbox to the case's starting state, under the recording lock."""
        with self._lock:
            started = time.perf_counter()
            if has_own_replay(self._system):
                result = self._replay_by_system(case, trajectory, checkpoint, change)
            elif system_toolbox(self._system) is not None:
                script = ReplayScript.from_recording(trajectory, checkpoint, change)
                result = ReplayResult.from_run(self._record_unlocked(case, replay=script))
            else:
                result = ReplayResult(status="not_replayable", error=NOT_REPLAYABLE)
            result.duration_s = round(time.perf_counter() - started, 6)
            return result

    # -- one case ------------------------------------------------------------------------

    def _new_run(self, case: CaseRecord, status: str, **fields: Any) -> RecordedRun:
        return RecordedRun(
            case_id=case.case_id, case_digest=case.case_digest, system_version=self.system_version, status=status, **fields
        )

    def _record_unlocked(self, case: CaseRecord, replay: ReplayScript | None = None) -> RecordedRun:
        system = self._system
        stateful = isinstance(system, Stateful)
        starting_state = starting_state_of(case)
        toolbox = system_toolbox(system)
        events_problem = scripted_events_problem(system, case)
        if events_problem is not None:
            return self._new_run(case, "error", error=events_problem)
        if stateful:
            problem = self._reset(system, starting_state, case.snapshot)
            if problem is not None:
                return self._new_run(case, "reset_not_clean", error=problem)
        if toolbox is not None:
            apply_event = getattr(system, "apply_event", None)
            toolbox.begin(role=_role_of(case.input), replay=replay, events=case.events, apply_event=apply_event)

        call = call_with_timeout(lambda: system(copy.deepcopy(case.input)), self.timeout_s)
        if isinstance(call.error, CaseTimedOut):
            self._system = self._system_factory()  # the hung thread still holds the old one
            return self._new_run(case, "timeout", error=call.error_text, trajectory=_trajectory_of(system))
        trajectory = _trajectory_of(system)
        if toolbox is not None and toolbox.event_failure is not None:
            # Checked before the agent's own error: the agent may have swallowed EventFailed.
            return self._new_run(case, "error", error=toolbox.event_failure, trajectory=trajectory)
        if isinstance(call.error, StepLimitReached):
            trajectory = trajectory or Trajectory()
            trajectory.terminal_status = "truncated"
        elif call.error is not None:
            return self._new_run(case, "error", error=call.error_text, trajectory=trajectory)

        try:
            output = as_json(call.value)
        except (TypeError, ValueError) as error:
            return self._new_run(case, "not_json", error=f"the output is not JSON: {error}", trajectory=trajectory)
        environment_state = None
        if stateful:
            environment_state, status, problem = self._state_after(system, starting_state)
            if problem is not None:
                return self._new_run(case, status, error=problem, output=output)
        return self._new_run(
            case, "ok", output=output, trajectory=trajectory, environment_state=environment_state
        )

    def _state_after(self, system: Any, starting_state: Any) -> tuple[EnvironmentState | None, str, str | None]:
        """The environment_state/v1 record after a run, or the status and problem that kept it."""
        snapshot = call_with_timeout(system.snapshot, self.timeout_s)
        if snapshot.error is not None:
            return None, "error", f"snapshot() failed: {snapshot.error_text}"
        try:
            state_after = as_json(snapshot.value)
        except (TypeError, ValueError) as error:
            return None, "not_json", f"the state after is not JSON: {error}"
        return EnvironmentState(initial=state_digest(starting_state), state=state_after), "ok", None

    def _replay_by_system(
        self, case: CaseRecord, trajectory: Trajectory, checkpoint: Checkpoint, change: ToolChange | None
    ) -> ReplayResult:
        """A hand-written `replay`: it returns the continuation after the checkpoint, which is
        joined to the recorded steps before it into the whole trajectory that is stored."""
        system = self._system
        stateful = isinstance(system, Stateful)
        starting_state = starting_state_of(case)
        if stateful:
            problem = self._reset(system, starting_state, case.snapshot)
            if problem is not None:
                return ReplayResult(status="reset_not_clean", error=problem)
        arguments = (trajectory.model_copy(deep=True), checkpoint.model_copy(), change and change.model_copy(deep=True))
        call = call_with_timeout(
            lambda: system.replay(arguments[0], checkpoint=arguments[1], change=arguments[2]), self.timeout_s
        )
        if isinstance(call.error, CaseTimedOut):
            self._system = self._system_factory()  # the hung thread still holds the old one
            return ReplayResult(status="timeout", error=call.error_text)
        if call.error is not None:
            return ReplayResult(status="error", error=call.error_text)
        try:
            continuation = as_trajectory(call.value)
        except (TypeError, ValueError) as error:
            return ReplayResult(status="error", error=f"replay() did not return a trajectory: {error}")
        whole = join_continuation(trajectory, checkpoint, continuation)
        environment_state = None
        if stateful:
            environment_state, status, problem = self._state_after(system, starting_state)
            if problem is not None:
                return ReplayResult(status=status, error=problem, trajectory=whole)
        return ReplayResult(status="ok", trajectory=whole, environment_state=environment_state)

    def _reset(self, system: Any, starting_state: Any, snapshot_name: str | None = None) -> str | None:
        """Reset, then check the world really is the starting state: the state after reset
        must hash (digests.state_digest) to the starting state's hash, so leftover state
        never leaks into a case. A problem as text, naming the tables that differ."""
        reset = call_with_timeout(lambda: system.reset(copy.deepcopy(starting_state)), self.timeout_s)
        if reset.error is not None:
            return f"reset() failed: {reset.error_text}"
        snapshot = call_with_timeout(system.snapshot, self.timeout_s)
        if snapshot.error is not None:
            return f"snapshot() after reset failed: {snapshot.error_text}"
        try:
            observed = as_json(snapshot.value)
        except (TypeError, ValueError) as error:
            return f"snapshot() after reset is not JSON: {error}"
        expected_hash, observed_hash = state_digest(as_json(starting_state)), state_digest(observed)
        if observed_hash != expected_hash:
            tables = ", ".join(state_difference(starting_state, observed))
            what = f"snapshot {snapshot_name!r}" if snapshot_name else "the starting state"
            return (
                f"the state after reset hashes to {observed_hash}, not to {what}'s {expected_hash}; "
                f"tables that differ: {tables}"
            )
        return None


NOT_REPLAYABLE = "the system neither uses the tool box nor has a replay(trajectory, *, checkpoint, change) method"


def scripted_events_problem(system: Any, case: CaseRecord) -> str | None:
    """Why a case's scripted events cannot be applied to this system, or None."""
    if not case.events:
        return None
    if system_toolbox(system) is None:
        return (
            "the case has scripted events, but the system does not use the tool box, "
            "which counts the steps they are timed by"
        )
    if not callable(getattr(system, "apply_event", None)):
        return "the case has scripted events, but the system has no apply_event(event) method to hand them to"
    return None


def has_own_replay(system: Any) -> bool:
    """A hand-written `replay` is honoured even on a tool-box system: the author chose it."""
    return isinstance(system, Replayable) and callable(system.replay)


def can_replay(system: Any) -> bool:
    return has_own_replay(system) or system_toolbox(system) is not None


def starting_state_of(case: CaseRecord) -> Any:
    return copy.deepcopy(case.initial_state) if case.initial_state is not None else {}


def as_trajectory(value: Any) -> Trajectory:
    """A Trajectory or a dict of one, as plain JSON (so stored and live values compare alike)."""
    if isinstance(value, Trajectory):
        value = value.model_dump(mode="json")
    if not isinstance(value, dict):
        raise TypeError(f"got {type(value).__name__}, expected a Trajectory or a dict")
    try:
        return Trajectory.model_validate(as_json(value))
    except ValidationError as error:
        raise ValueError(str(error)) from None


def join_continuation(recorded: Trajectory, checkpoint: Checkpoint, continuation: Trajectory) -> Trajectory:
    """The recorded steps before the checkpoint, then the continuation. The continuation's own
    checkpoints and constraints count from the checkpoint, so they are shifted to match."""
    offset_steps, offset_calls = checkpoint.step, checkpoint.calls_before
    return Trajectory(
        steps=recorded.steps[:offset_steps] + continuation.steps,
        checkpoints=[kept for kept in recorded.checkpoints if kept.step < offset_steps]
        + [
            moved.model_copy(update={"step": moved.step + offset_steps, "calls_before": moved.calls_before + offset_calls})
            for moved in continuation.checkpoints
        ],
        terminal_status=continuation.terminal_status,
        constraints=[kept for kept in recorded.constraints if kept.step is not None and kept.step < offset_steps]
        + [
            moved.model_copy(update={"step": None if moved.step is None else moved.step + offset_steps})
            for moved in continuation.constraints
        ],
    )


def _trajectory_of(system: Any) -> Trajectory | None:
    toolbox = system_toolbox(system)
    if toolbox is not None:
        return toolbox.trajectory()
    reader = getattr(system, "trajectory", None)
    if callable(reader):
        try:
            return Trajectory.model_validate(reader())
        except Exception:  # a system's own trajectory that does not parse is simply absent
            return None
    return None


def _role_of(case_input: Any) -> str | None:
    """The acting role, when the case's input names one."""
    if isinstance(case_input, dict) and isinstance(case_input.get("role"), str):
        return case_input["role"]
    return None
