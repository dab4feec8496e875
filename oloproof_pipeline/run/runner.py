"""The sandbox runner: reset the world to a case's starting state, run the system once,
record what it returned, what it did and the world it left behind. It also replays a
recorded case from a checkpoint under a change (the same reset, lock and deadline).

It runs inside the system's own worker process (run/supervisor.py starts it, run/worker.py
drives it), so whatever the system does to its process cannot reach the evaluation. A system
that raises or returns something that is not JSON costs that case only; one that overruns
`timeout_s` is interrupted by a single deadline per case (a SIGALRM timer on the main
thread: no thread per call), and the supervisor stops a process that ignores it. A system
that calls sys.exit() ends its worker process, which the supervisor records as a crash.
"""

from __future__ import annotations

import json
import threading
import time
import traceback
from functools import cached_property
from typing import Any, Callable

from pydantic import ValidationError

from ..model.digests import state_digest
from ..model.cases import CaseRecord
from ..model.records import EnvironmentState, RecordedRun, ReplayResult
from ..endpoints.deadline import CaseTimedOut, case_deadline
from ..endpoints.ledger import BudgetStop
from .system import Replayable, Stateful, system_toolbox
from ..model.trajectory import ToolChange
from .toolbox import ReplayScript, StepLimitReached, private_copy
from ..model.trajectory import Checkpoint, Trajectory


def attempt(function: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """Call into the system: (value, None), or (None, the failure), since any failure of the
    system is data. Two are not: CaseTimedOut ends the case, and SystemExit ends the worker
    process, as the system asked (the supervisor records it as a crash)."""
    try:
        return function(), None
    except (CaseTimedOut, SystemExit):
        raise
    except BaseException as error:  # noqa: BLE001
        return None, error


def _describe_exception(error: BaseException) -> str:
    if isinstance(error, BudgetStop):  # the run's budget, not the system, stopped the case
        return str(error)
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
    """Records cases against one system instance, one case at a time, each under one
    deadline of `timeout_s`.

    `system_factory` builds a fresh instance; a new one replaces an instance a timed-out
    case was interrupted in (built when next needed).
    """

    def __init__(self, system_factory: Callable[[], Any], *, system_version: str, timeout_s: float):
        self._system_factory = system_factory
        self._system: Any = None
        self._lock = threading.Lock()  # cases sharing one system run one at a time
        self.system_version = system_version
        self.timeout_s = timeout_s
        self.system  # built now: a system that cannot be built fails here, not in a case

    @property
    def system(self) -> Any:
        if self._system is None:
            self._system = self._system_factory()
            # Asked once per instance: a runtime-checkable Protocol's isinstance is slow.
            self._stateful = isinstance(self._system, Stateful)
            self._own_replay = has_own_replay(self._system)
        return self._system

    def record(self, case: CaseRecord) -> RecordedRun:
        with self._lock:
            system = self.system
            started = time.perf_counter()
            try:
                with case_deadline(self.timeout_s):
                    run = self._record_unlocked(system, case)
            except CaseTimedOut as timeout:
                run = self._new_run(case, "timeout", error=str(timeout), trajectory=self._abandon(system))
            run.duration_s = round(time.perf_counter() - started, 6)
            return run

    def replay(
        self, case: CaseRecord, trajectory: Trajectory, checkpoint: Checkpoint, change: ToolChange | None
    ) -> ReplayResult:
        """Re-run a recorded case from `checkpoint` under `change` (None: a control replay),
        after resetting the sandbox to the case's starting state, under the recording lock."""
        with self._lock:
            system = self.system
            started = time.perf_counter()
            try:
                with case_deadline(self.timeout_s):
                    result = self._replay_unlocked(system, case, trajectory, checkpoint, change)
            except CaseTimedOut as timeout:
                result = ReplayResult(status="timeout", error=str(timeout), trajectory=self._abandon(system))
            result.duration_s = round(time.perf_counter() - started, 6)
            return result

    def _replay_unlocked(
        self, system: Any, case: CaseRecord, trajectory: Trajectory, checkpoint: Checkpoint, change: ToolChange | None
    ) -> ReplayResult:
        if self._own_replay:
            return self._replay_by_system(system, case, trajectory, checkpoint, change)
        if system_toolbox(system) is not None:
            script = ReplayScript.from_recording(trajectory, checkpoint, change)
            return ReplayResult.from_run(self._record_unlocked(system, case, replay=script))
        return ReplayResult(status="not_replayable", error=NOT_REPLAYABLE)

    def _abandon(self, system: Any) -> Trajectory | None:
        """After a timeout: what the tool box recorded before the interruption (the system's
        own code is not called again), and a fresh instance for the next case."""
        self._system = None
        toolbox = system_toolbox(system)
        return toolbox.trajectory() if toolbox is not None else None

    # -- one case ------------------------------------------------------------------------

    def _new_run(self, case: CaseRecord, status: str, **fields: Any) -> RecordedRun:
        return RecordedRun(
            case_id=case.case_id, case_digest=case.case_digest, system_version=self.system_version, status=status, **fields
        )

    def _record_unlocked(self, system: Any, case: CaseRecord, replay: ReplayScript | None = None) -> RecordedRun:
        stateful = self._stateful
        starting_state = StartingState(case)
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

        value, error = attempt(lambda: system(private_copy(case.input)))
        trajectory = _trajectory_of(system)
        if toolbox is not None and toolbox.event_failure is not None:
            # Checked before the agent's own error: the agent may have swallowed EventFailed.
            return self._new_run(case, "error", error=toolbox.event_failure, trajectory=trajectory)
        if isinstance(error, StepLimitReached):
            trajectory = trajectory or Trajectory()
            trajectory.terminal_status = "truncated"
        elif error is not None:
            return self._new_run(case, "error", error=_describe_exception(error), trajectory=trajectory)

        try:
            output = as_json(value)
        except (TypeError, ValueError) as problem:
            return self._new_run(case, "not_json", error=f"the output is not JSON: {problem}", trajectory=trajectory)
        environment_state = None
        if stateful:
            environment_state, status, problem = self._state_after(system, starting_state)
            if problem is not None:
                return self._new_run(case, status, error=problem, output=output)
        return self._new_run(
            case, "ok", output=output, trajectory=trajectory, environment_state=environment_state
        )

    def _state_after(self, system: Any, starting_state: StartingState) -> tuple[EnvironmentState | None, str, str | None]:
        """The environment_state/v1 record after a run, or the status and problem that kept it."""
        snapshot, error = attempt(system.snapshot)
        if error is not None:
            return None, "error", f"snapshot() failed: {_describe_exception(error)}"
        try:
            state_after = as_json(snapshot)
        except (TypeError, ValueError) as problem:
            return None, "not_json", f"the state after is not JSON: {problem}"
        return EnvironmentState(initial=starting_state.digest, state=state_after), "ok", None

    def _replay_by_system(
        self, system: Any, case: CaseRecord, trajectory: Trajectory, checkpoint: Checkpoint, change: ToolChange | None
    ) -> ReplayResult:
        """A hand-written `replay`: it returns the continuation after the checkpoint, which is
        joined to the recorded steps before it into the whole trajectory that is stored."""
        stateful = self._stateful
        starting_state = StartingState(case)
        if stateful:
            problem = self._reset(system, starting_state, case.snapshot)
            if problem is not None:
                return ReplayResult(status="reset_not_clean", error=problem)
        arguments = (trajectory.model_copy(deep=True), checkpoint.model_copy(), change and change.model_copy(deep=True))
        value, error = attempt(lambda: system.replay(arguments[0], checkpoint=arguments[1], change=arguments[2]))
        if error is not None:
            return ReplayResult(status="error", error=_describe_exception(error))
        try:
            continuation = as_trajectory(value)
        except (TypeError, ValueError) as problem:
            return ReplayResult(status="error", error=f"replay() did not return a trajectory: {problem}")
        whole = join_continuation(trajectory, checkpoint, continuation)
        environment_state = None
        if stateful:
            environment_state, status, problem = self._state_after(system, starting_state)
            if problem is not None:
                return ReplayResult(status=status, error=problem, trajectory=whole)
        return ReplayResult(status="ok", trajectory=whole, environment_state=environment_state)

    def _reset(self, system: Any, starting_state: StartingState, snapshot_name: str | None = None) -> str | None:
        """Reset, then check the world really is the starting state: the state after reset
        must hash (digests.state_digest) to the starting state's hash, so leftover state
        never leaks into a case. A problem as text, naming the tables that differ."""
        _, error = attempt(lambda: system.reset(private_copy(starting_state.state)))
        if error is not None:
            return f"reset() failed: {_describe_exception(error)}"
        snapshot, error = attempt(system.snapshot)
        if error is not None:
            return f"snapshot() after reset failed: {_describe_exception(error)}"
        try:
            observed_hash = state_digest(snapshot)  # the digest's JSON is the check: no round trip
        except (TypeError, ValueError):
            try:  # a dict with keys of mixed types, say: plain JSON after a round trip, or not JSON at all
                observed_hash = state_digest(as_json(snapshot))
            except (TypeError, ValueError) as error:
                return f"snapshot() after reset is not JSON: {error}"
        expected_hash = starting_state.digest
        if observed_hash != expected_hash:
            tables = ", ".join(state_difference(starting_state.state, as_json(snapshot)))
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


class StartingState:
    """A case's starting state (the system only ever gets a deep copy of it), with its
    digest worked out once."""

    def __init__(self, case: CaseRecord):
        self.state = case.initial_state if case.initial_state is not None else {}

    @cached_property
    def digest(self) -> str:
        return state_digest(self.state)  # read from a case file: plain JSON already


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
