"""What the runner stores for one case: the output, the trajectory and the state left behind."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .trajectory import Trajectory

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


class RecordedRun(RunResult):
    case_id: str
    case_digest: str
    system_version: str
    recorded_by_run: str | None = None
    # The modules the worker found the system had imported from outside the installed packages
    # (name -> digest, model/fingerprints.py's `imported_file_digests`): stored in the row's
    # `code_files` with the declared code, never a column of their own.
    found_files: dict[str, str] | None = None


class ReplayResult(RunResult):
    """What the runner stores for one replay of a recorded case (a control or a faulted one):
    the whole trajectory, the output (none from a hand-written `replay`) and the state after."""

    @classmethod
    def from_run(cls, run: RecordedRun) -> "ReplayResult":
        return cls(**run.model_dump(include={"status", "error", "output", "trajectory", "environment_state"}))
