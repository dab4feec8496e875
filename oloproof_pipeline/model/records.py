"""What the runner stores for one case: the output, the trajectory and the state left behind."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic_core import from_json

from .digests import canonical_json
from .trajectory import MODEL_STEP, USER_STEP, Trajectory

# `ok` is the only status whose recording is judged; every other status makes each verdict MISSING.
# `system_crashed`: the system's process ended mid-case (an exit, a signal); `error` says how.
RunStatus = Literal["ok", "error", "timeout", "reset_not_clean", "not_json", "not_replayable", "system_crashed"]


class EnvironmentState(BaseModel):
    """An environment_state/v1 record: the digest of the starting state and the state after."""

    model_config = ConfigDict(extra="forbid")

    record: Literal["environment_state/v1"] = "environment_state/v1"
    initial: str
    state: Any


class RunResult(BaseModel):
    """What one run of the system left: its status, output, trajectory and the state after.
    A recording and each replay of it are both this, the recording with its case's ids."""

    model_config = ConfigDict(extra="forbid")

    status: RunStatus
    error: str | None = None
    output: Any = None
    trajectory: Trajectory | None = None
    environment_state: EnvironmentState | None = None
    duration_s: float = 0.0

    @property
    def state_after(self) -> Any:
        return None if self.environment_state is None else self.environment_state.state

    def stored_json(self) -> dict[str, Any]:
        """What the system recorded (RUN_TEXT) as its JSON reads back, what a model made again
        from that JSON dumps (JSON mode serializes as the JSON text would: tuples as lists,
        keys as text, an infinity as null). A ValueError when it is not JSON."""
        return self.model_dump(mode="json", include=_RUN_TEXT_FIELDS)


# What a run holds as JSON text in its row (`recorded_runs`; `fault_replays` with a prefix).
RUN_TEXT = ("output", "trajectory", "environment_state")
_RUN_TEXT_FIELDS = set(RUN_TEXT)


def as_text(values: dict[str, Any]) -> dict[str, str | None]:
    """RUN_TEXT's values as the canonical JSON text the tables store."""
    return {name: None if values[name] is None else canonical_json(values[name]) for name in RUN_TEXT}


class RunText(BaseModel):
    """A run's result as its worker sends it back (run/worker.py): what the system recorded
    as the canonical JSON text the tables store, which the evaluating process writes through
    rather than make it a model only to encode it again."""

    model_config = ConfigDict(extra="forbid")

    status: RunStatus
    error: str | None = None
    output: str | None = None
    trajectory: str | None = None
    environment_state: str | None = None
    duration_s: float = 0.0

    def as_result(self) -> "ReplayResult":
        """The run as a model (to judge a replay by: its trajectory, output and state)."""
        return ReplayResult(
            status=self.status, error=self.error, duration_s=self.duration_s,
            output=None if self.output is None else from_json(self.output),
            trajectory=None if self.trajectory is None else Trajectory.model_validate_json(self.trajectory),
            environment_state=None if self.environment_state is None else EnvironmentState.model_validate_json(self.environment_state),
        )


class RecordedRun(RunResult):
    case_id: str
    case_digest: str
    system_version: str
    recorded_by_run: str | None = None
    # The modules the worker found the system had imported from outside the installed packages
    # (name -> digest, model/fingerprints.py's `imported_file_digests`): stored in the row's
    # `code_files` with the declared code, never a column of their own.
    found_files: dict[str, str] | None = None

    def as_row(self) -> "RecordingRow":
        """This recording as its worker sends it back (`RecordingRow`). A ValueError when what
        the system recorded is not JSON."""
        nested = self.stored_json()
        scalars = {name: getattr(self, name) for name in _SHARED_SCALARS}
        return RecordingRow(**scalars, **as_text(nested), **stored_usage(nested["trajectory"]))


def stored_usage(trajectory: dict[str, Any] | None) -> dict[str, Any]:
    """The model and simulated user usage of a trajectory as stored JSON reads back (None each
    without a model or user turn: it becomes a model only when it has one)."""
    steps = trajectory["steps"] if trajectory is not None else ()
    if not any(step["kind"] in (MODEL_STEP, USER_STEP) for step in steps):
        return dict(_NO_USAGE)
    counted = Trajectory.model_validate(trajectory)
    return {**counted.model_usage(), **counted.user_usage()}


_NO_USAGE = {**Trajectory().model_usage(), **Trajectory().user_usage()}


class RecordingRow(RunText):
    """A recording as its worker sends it back: the columns of its `recorded_runs` row the
    worker can make (RunText's, its case's ids, its model usage counted), and the modules
    found imported with it. The evaluating process adds the run, the code and the cost
    (run/recording.py) and writes the rest through: no trajectory becomes a model there."""

    case_id: str
    case_digest: str
    system_version: str
    model_calls: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    model_latency_s: float | None = None
    user_calls: int | None = None
    user_prompt_tokens: int | None = None
    user_completion_tokens: int | None = None
    found_files: dict[str, str] | None = None

    def as_run(self) -> RecordedRun:
        """The recording as a model (for scripts, tests and certification's reference runs)."""
        nested = {name: from_json(getattr(self, name)) for name in RUN_TEXT if getattr(self, name) is not None}
        scalars = {name: getattr(self, name) for name in _SHARED_SCALARS}
        return RecordedRun.model_validate({**scalars, **nested})


# The fields a recording and its row share beyond RUN_TEXT (named once: a model's
# `model_fields` is a property, slow to ask per case).
_SHARED_SCALARS = tuple(name for name in RecordingRow.model_fields if name in RecordedRun.model_fields and name not in RUN_TEXT)


class ReplayResult(RunResult):
    """What the runner stores for one replay of a recorded case (a control or a faulted one):
    the whole trajectory, the output (none from a hand-written `replay`) and the state after."""

    @classmethod
    def from_run(cls, run: RecordedRun) -> "ReplayResult":
        return cls(**run.model_dump(include={"status", "error", "output", "trajectory", "environment_state"}))

    def as_text(self) -> RunText:
        """This replay as its worker sends it back (`RunText`). A ValueError when what the
        system recorded is not JSON."""
        return RunText(status=self.status, error=self.error, duration_s=self.duration_s, **as_text(self.stored_json()))
