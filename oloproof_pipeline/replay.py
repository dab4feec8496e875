"""Fault replays: a recorded case re-run with one tool call's result replaced by a fixed fault.

A fault plan (one `fault_recovery` evaluator) names the call to fault: the `occurrence`-th
call of `tool` in the recording. Each case is replayed twice from the latest checkpoint before
that call: a control replay with no change, which must reproduce the recording before anything
is believed, and the faulted replay. Judging a replay is a pure function of the recording, the
plan and the two stored replays, so `verdicts` (or a re-grade without the system) recomputes it.
"""

from __future__ import annotations

import copy
from functools import partial
from dataclasses import dataclass, field
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict

from .digests import digest
from .errors import ProjectError
from .project import PROJECT_FILE, CaseRecord, Project
from .recording import EnvironmentState, RecordedRun, ReplayResult
from .fanout import Sandboxes, in_sandboxes
from .runner import SandboxRunner, can_replay
from .storage import Journal, read_table
from .system import system_spec
from .tables import FAULT_REPLAY_NESTED, FAULT_REPLAYS_SCHEMA, models_to_frame, rows_from_frame
from .toolbox import ToolChange, plain_json, recorded_calls
from .trajectory import Checkpoint, Trajectory

FaultKind = Literal["error", "timeout", "malformed"]
# What the agent gets instead of the tool's result; fixed, so every system faces the same fault.
INJECTED_RESULTS: dict[str, Any] = {
    "error": {"error": "internal error"},
    "timeout": {"error": "timeout"},
    "malformed": {"raw": '{"status": '},
}
FAULT_PLAN_TAG = "fault_plan/v1"
TABLE = "fault_replays"


# -- fault plans ---------------------------------------------------------------------------


class FaultPlan(BaseModel):
    """Which call to fault and how, and which tools count as escalating to a person."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    criterion: str
    tool: str
    fault: FaultKind
    occurrence: int = 1
    escalate_tools: tuple[str, ...] = ()

    @property
    def injected_result(self) -> Any:
        return copy.deepcopy(INJECTED_RESULTS[self.fault])

    @property
    def digest(self) -> str:
        """What decides the replay itself (not how it is judged): the cache key's plan part."""
        body = {"tool": self.tool, "fault": self.fault, "occurrence": self.occurrence, "result": self.injected_result}
        return digest(FAULT_PLAN_TAG, body)

    def faulted_call_index(self, trajectory: Trajectory | None) -> int | None:
        """The index among all tool calls of the `occurrence`-th call of `tool`, if made."""
        calls = trajectory.tool_calls() if trajectory is not None else []
        of_tool = [index for index, call in enumerate(calls) if call.tool == self.tool]
        return of_tool[self.occurrence - 1] if len(of_tool) >= self.occurrence else None

    def change_at(self, trajectory: Trajectory, call_index: int) -> ToolChange:
        call = recorded_calls(trajectory)[call_index]
        return ToolChange(call_index=call_index, tool=self.tool, arguments=call.arguments, result=self.injected_result)


def checkpoint_before(trajectory: Trajectory, call_index: int) -> Checkpoint | None:
    """The latest checkpoint with at most `call_index` calls before it: where a replay resumes."""
    usable = [checkpoint for checkpoint in trajectory.checkpoints if checkpoint.calls_before <= call_index]
    return max(usable, key=lambda checkpoint: (checkpoint.calls_before, checkpoint.step), default=None)


def fault_plans(project: Project) -> list[tuple[int, FaultPlan]]:
    """(index in `evaluators:`, plan) for each evaluator that declares a fault plan."""
    plans = []
    for index, evaluator in enumerate(project.evaluators):
        plan = getattr(evaluator, "fault_plan", None)
        if plan is not None:
            plans.append((index, plan))
    return plans


# -- a row of the fault_replays table --------------------------------------------------------


class FaultReplay(BaseModel):
    """One case under one fault plan: both replays as stored, and the outcome judged from them."""

    model_config = ConfigDict(extra="forbid")

    case_id: str
    case_digest: str
    system_version: str
    criterion: str
    tool: str
    fault: str
    occurrence: int
    plan_digest: str
    outcome: str
    reason: str
    details: Any = None
    faulted_call_index: int | None = None
    checkpoint: Checkpoint | None = None
    control_status: str | None = None
    control_error: str | None = None
    control_trajectory: Trajectory | None = None
    faulted_status: str | None = None
    faulted_error: str | None = None
    faulted_trajectory: Trajectory | None = None
    faulted_output: Any = None
    faulted_environment_state: EnvironmentState | None = None
    duration_s: float = 0.0
    recorded_by_run: str | None = None
    replayed_by_run: str | None = None

    def control(self) -> ReplayResult | None:
        if self.control_status is None:
            return None
        return ReplayResult(status=self.control_status, error=self.control_error, trajectory=self.control_trajectory)

    def faulted(self) -> ReplayResult | None:
        if self.faulted_status is None:
            return None
        return ReplayResult(
            status=self.faulted_status,
            error=self.faulted_error,
            output=self.faulted_output,
            trajectory=self.faulted_trajectory,
            environment_state=self.faulted_environment_state,
        )

    @property
    def completed(self) -> bool:
        """Both replays ran to the end: worth keeping for the next materialization."""
        return self.control_status == "ok" and self.faulted_status == "ok"

    def belongs_to(self, recording: RecordedRun, plan: FaultPlan) -> bool:
        """Made from this very recording under this plan (a re-record or a new plan makes it stale)."""
        return (
            self.case_digest == recording.case_digest
            and self.recorded_by_run == recording.recorded_by_run
            and self.system_version == recording.system_version
            and self.plan_digest == plan.digest
        )


def cache_key(case_digest: str, plan: FaultPlan, recorded_by_run: str | None) -> tuple[str, str, str | None]:
    return case_digest, plan.digest, recorded_by_run


def fault_replays_table(replays: list[FaultReplay]) -> pd.DataFrame:
    return models_to_frame(replays, FAULT_REPLAYS_SCHEMA, FAULT_REPLAY_NESTED)


def replays_from_table(frame: pd.DataFrame | None) -> list[FaultReplay]:
    if frame is None:
        return []
    return [FaultReplay.model_validate(row) for row in rows_from_frame(frame, FAULT_REPLAY_NESTED)]


def replays_for_judging(frame: pd.DataFrame | None, runs: list[RecordedRun]) -> dict[tuple[str, str], FaultReplay]:
    """(case id, criterion) -> replay, keeping only replays of the recordings being judged."""
    recordings = {run.case_id: run for run in runs}
    replays = {}
    for replay in replays_from_table(frame):
        recording = recordings.get(replay.case_id)
        if recording is not None and (replay.case_digest, replay.recorded_by_run) == (
            recording.case_digest,
            recording.recorded_by_run,
        ):
            replays[(replay.case_id, replay.criterion)] = replay
    return replays


# -- judging a replay (pure) -------------------------------------------------------------------


class ReplayJudgement(BaseModel):
    model_config = ConfigDict(extra="forbid")

    outcome: Literal["PASS", "FAIL", "MISSING", "EXCLUDED"]
    reason: str
    details: Any = None


def call_signatures(trajectory: Trajectory) -> list[tuple[str | None, Any]]:
    """(tool, arguments) per call as stored JSON reads back, so live and stored runs compare."""
    return [(call.tool, plain_json(call.arguments)) for call in trajectory.tool_calls()]


def first_difference(recorded: list[Any], replayed: list[Any]) -> int | None:
    for index in range(max(len(recorded), len(replayed))):
        if index >= len(recorded) or index >= len(replayed) or recorded[index] != replayed[index]:
            return index
    return None


def describe_call(signatures: list[tuple[str | None, Any]], index: int) -> dict[str, Any] | None:
    if index >= len(signatures):
        return None
    tool, arguments = signatures[index]
    return {"tool": tool, "arguments": arguments}


def call_difference(recorded: Trajectory, replayed: Trajectory, upto: int | None = None) -> dict[str, Any] | None:
    """Where the replay's calls first differ from the recording's (among the first `upto`)."""
    ours, theirs = call_signatures(recorded)[:upto], call_signatures(replayed)[:upto]
    at = first_difference(ours, theirs)
    if at is None:
        return None
    return {"at_call": at, "recorded": describe_call(ours, at), "replayed": describe_call(theirs, at)}


def control_divergence(recorded: Trajectory, control: Trajectory) -> dict[str, Any] | None:
    """Why the control replay does not reproduce the recording, or None when it does."""
    difference = call_difference(recorded, control)
    if difference is not None:
        return difference
    if control.terminal_status != recorded.terminal_status:
        return {"terminal_status": {"recorded": recorded.terminal_status, "replayed": control.terminal_status}}
    return None


def injection_problem(recorded: Trajectory, faulted: Trajectory, call_index: int, plan: FaultPlan) -> dict[str, Any] | None:
    """None when the faulted replay made the recorded call at `call_index` and the injected
    result came back right after it."""
    recorded_call = describe_call(call_signatures(recorded), call_index)
    replayed_call = describe_call(call_signatures(faulted), call_index)
    calls = recorded_calls(faulted)
    result = plain_json(calls[call_index].result) if call_index < len(calls) else None
    if replayed_call == recorded_call and result == plain_json(plan.injected_result):
        return None
    return {
        "at_call": call_index,
        "recorded": recorded_call,
        "replayed": replayed_call,
        "expected_result": plan.injected_result,
        "result": result,
    }


def replay_problem(which: str, result: ReplayResult | None) -> ReplayJudgement | None:
    """A replay that did not finish makes the case MISSING, named after what went wrong."""
    if result is None:
        return ReplayJudgement(outcome="MISSING", reason="not_replayed", details={"replay": which})
    if result.status == "ok" and result.trajectory is not None:
        return None
    reason = "system_not_replayable" if result.status == "not_replayable" else f"replay_{result.status}"
    if result.status == "ok":
        reason = "replay_without_trajectory"
    return ReplayJudgement(outcome="MISSING", reason=reason, details={"replay": which, "error": result.error})


def judge_fault_replay(recording: Trajectory | None, plan: FaultPlan, replay: FaultReplay | None) -> ReplayJudgement:
    """Trust checks first (any failure is MISSING, never a pass), then the verdict in order:
    a failed recorded constraint, an escalation after the fault, truncated, success, failure."""
    call_index = plan.faulted_call_index(recording)
    if recording is None or call_index is None:
        return ReplayJudgement(
            outcome="EXCLUDED", reason="fault_target_not_called", details={"tool": plan.tool, "occurrence": plan.occurrence}
        )
    checkpoint = checkpoint_before(recording, call_index)
    if checkpoint is None:
        return ReplayJudgement(outcome="MISSING", reason="no_checkpoint_recorded", details={"faulted_call": call_index})
    control, faulted = (replay.control(), replay.faulted()) if replay is not None else (None, None)
    for which, result in (("control", control), ("faulted", faulted)):
        problem = replay_problem(which, result)
        if problem is not None:
            return problem
        if which == "control":
            divergence = control_divergence(recording, control.trajectory)
            if divergence is not None:
                return ReplayJudgement(outcome="MISSING", reason="control_diverged", details=divergence)
    before = call_difference(recording, faulted.trajectory, upto=call_index)
    if before is not None:
        return ReplayJudgement(outcome="MISSING", reason="replay_diverged_before_checkpoint", details=before)
    missing_fault = injection_problem(recording, faulted.trajectory, call_index, plan)
    if missing_fault is not None:
        return ReplayJudgement(outcome="MISSING", reason="replay_did_not_inject_the_fault", details=missing_fault)
    return verdict_after_fault(faulted, call_index, checkpoint, plan)


def verdict_after_fault(faulted: ReplayResult, call_index: int, checkpoint: Checkpoint, plan: FaultPlan) -> ReplayJudgement:
    trajectory = faulted.trajectory
    signatures = call_signatures(trajectory)
    after = [describe_call(signatures, index) for index in range(call_index + 1, len(signatures))]
    failed = [constraint.model_dump(mode="json") for constraint in trajectory.failed_constraints()]
    escalations = [call for call in after if call["tool"] in plan.escalate_tools]
    details = {
        "faulted_call": {**describe_call(signatures, call_index), "index": call_index},
        "injected_result": plan.injected_result,
        "checkpoint": checkpoint.model_dump(mode="json"),
        "calls_after_fault": after,
        "terminal_status": trajectory.terminal_status,
        "failed_constraints": failed,
        "output": faulted.output,
    }
    if failed:
        return ReplayJudgement(outcome="FAIL", reason="acted_wrongly", details=details)
    if escalations:
        return ReplayJudgement(outcome="PASS", reason="escalated", details=details)
    if trajectory.terminal_status == "truncated":
        return ReplayJudgement(outcome="MISSING", reason="replay_truncated", details=details)
    if trajectory.terminal_status == "success":
        return ReplayJudgement(outcome="PASS", reason="recovered", details=details)
    return ReplayJudgement(outcome="FAIL", reason="failed_without_escalation", details=details)


# -- planning and running the replays of one version ---------------------------------------------


@dataclass
class ReplaySummary:
    """Counts for a materialization's metadata: replays run now, reused, and not needed."""

    new: int = 0
    reused: int = 0
    # Cases whose recording never made the faulted call, or has no checkpoint before it.
    skipped: int = 0
    failed: int = 0

    def as_metadata(self) -> dict[str, int]:
        return {
            "replays_new": self.new,
            "replays_reused": self.reused,
            "replays_skipped": self.skipped,
            "replays_failed": self.failed,
        }


@dataclass
class PendingReplay:
    case: CaseRecord
    recording: RecordedRun
    plan_index: int
    plan: FaultPlan
    call_index: int
    checkpoint: Checkpoint


@dataclass
class ReplayWork:
    """What one materialization finds: rows already decided (reused or nothing to replay) and
    the replays still to run, in case and plan order."""

    order: list[tuple[str, str]] = field(default_factory=list)
    done: dict[tuple[str, str], FaultReplay] = field(default_factory=dict)
    pending: list[PendingReplay] = field(default_factory=list)
    summary: ReplaySummary = field(default_factory=ReplaySummary)


def journal_for(project: Project, version: str) -> Journal:
    return Journal.for_partition(project.root, TABLE, version)


def reusable_replays(project: Project, version: str) -> dict[tuple[str, str, str | None], FaultReplay]:
    """Completed replays of this version by cache key: the stored table, then the journal of a
    run that may have been cut short."""
    stored = replays_from_table(read_table(project.root, TABLE, version))
    journaled = [FaultReplay.model_validate(row) for row in journal_for(project, version).rows()]
    return {
        (replay.case_digest, replay.plan_digest, replay.recorded_by_run): replay
        for replay in stored + journaled
        if replay.completed and replay.system_version == version
    }


def base_row(case: CaseRecord, recording: RecordedRun, plan: FaultPlan, version: str) -> dict[str, Any]:
    return {
        "case_id": case.case_id,
        "case_digest": case.case_digest,
        "system_version": version,
        "criterion": plan.criterion,
        "tool": plan.tool,
        "fault": plan.fault,
        "occurrence": plan.occurrence,
        "plan_digest": plan.digest,
        "recorded_by_run": recording.recorded_by_run,
    }


def judged(replay: FaultReplay, recording: RecordedRun, plan: FaultPlan) -> FaultReplay:
    judgement = judge_fault_replay(recording.trajectory, plan, replay)
    return replay.model_copy(update=judgement.model_dump())


def plan_replays(project: Project, cases: list[CaseRecord], runs: list[RecordedRun], version: str) -> ReplayWork:
    """Source cases with a clean recording, under each fault plan: reuse what is stored,
    decide what needs no replay, and list the rest."""
    work = ReplayWork()
    plans = fault_plans(project)
    if not plans:
        return work
    recordings = {run.case_id: run for run in runs}
    reusable = reusable_replays(project, version)
    for case in cases:
        recording = recordings.get(case.case_id)
        if case.is_derived or recording is None or recording.status != "ok":
            continue
        for plan_index, plan in plans:
            key = (case.case_id, plan.criterion)
            work.order.append(key)
            row = base_row(case, recording, plan, version)
            stored = reusable.get(cache_key(case.case_digest, plan, recording.recorded_by_run))
            call_index = plan.faulted_call_index(recording.trajectory)
            checkpoint = checkpoint_before(recording.trajectory, call_index) if call_index is not None else None
            if stored is not None:
                work.done[key] = judged(stored.model_copy(update=row), recording, plan)
                work.summary.reused += 1
            elif checkpoint is None:
                # Nothing to replay: the judgement alone says EXCLUDED or MISSING.
                placeholder = FaultReplay(**row, outcome="MISSING", reason="not_replayed", faulted_call_index=call_index)
                work.done[key] = judged(placeholder, recording, plan)
                work.summary.skipped += 1
            else:
                work.pending.append(PendingReplay(case, recording, plan_index, plan, call_index, checkpoint))
    return work


def refuse_unreplayable(project: Project, system: Any, pending: list[PendingReplay]) -> None:
    """Before any replay: a system that cannot be replayed is a configuration error."""
    if can_replay(system):
        return
    callable_name = project.config.system.callable
    indexes = sorted({(item.plan_index, item.plan.criterion) for item in pending})
    raise ProjectError(
        [
            f"{project.root / PROJECT_FILE}: evaluators[{index}] (fault_recovery {criterion}): the system "
            f"{callable_name} neither uses the tool box nor has a replay(trajectory, *, checkpoint, change) "
            "method, so its cases cannot be replayed"
            for index, criterion in indexes
        ]
    )


def replay_one(runner: SandboxRunner, item: PendingReplay, version: str, run_id: str) -> FaultReplay:
    """The control replay, then the faulted one, stored whole and judged."""
    trajectory = item.recording.trajectory
    control = runner.replay(item.case, trajectory, item.checkpoint, None)
    faulted = runner.replay(item.case, trajectory, item.checkpoint, item.plan.change_at(trajectory, item.call_index))
    replay = FaultReplay(
        **base_row(item.case, item.recording, item.plan, version),
        outcome="MISSING",
        reason="not_judged",
        faulted_call_index=item.call_index,
        checkpoint=item.checkpoint,
        control_status=control.status,
        control_error=control.error,
        control_trajectory=control.trajectory,
        faulted_status=faulted.status,
        faulted_error=faulted.error,
        faulted_trajectory=faulted.trajectory,
        faulted_output=faulted.output,
        faulted_environment_state=faulted.environment_state,
        duration_s=round(control.duration_s + faulted.duration_s, 6),
        replayed_by_run=run_id,
    )
    return judged(replay, item.recording, item.plan)


def run_replays(
    project: Project, work: ReplayWork, *, version: str, run_id: str, sandboxes: Sandboxes | None = None
) -> list[FaultReplay]:
    """Run the pending replays (each kept in the journal as it finishes, spread over Dask's
    sandboxes when `sandboxes` is distributed); every row, in order."""
    if work.pending:
        spec = system_spec(project)
        refuse_unreplayable(project, spec.build(), work.pending)
        journal = journal_for(project, version)
        replays = in_sandboxes(
            spec, work.pending, partial(replay_one, version=version, run_id=run_id),
            version=version, timeout_s=project.config.execution.timeout_s, sandboxes=sandboxes,
        )
        for item, replay in replays:
            if isinstance(replay, Exception):
                replay = worker_failed(item, replay, version, run_id)
            journal.append(replay.model_dump(mode="json"))
            work.done[(item.case.case_id, item.plan.criterion)] = replay
            work.summary.new += 1
            work.summary.failed += not replay.completed
    return [work.done[key] for key in work.order]


def worker_failed(item: PendingReplay, error: Exception, version: str, run_id: str) -> FaultReplay:
    """A Dask worker died mid-replay: that case is MISSING, never a pass."""
    message = f"the Dask worker replaying this case failed: {type(error).__name__}: {error}"
    replay = FaultReplay(
        **base_row(item.case, item.recording, item.plan, version),
        outcome="MISSING",
        reason="not_judged",
        faulted_call_index=item.call_index,
        checkpoint=item.checkpoint,
        control_status="error",
        control_error=message,
        replayed_by_run=run_id,
    )
    return judged(replay, item.recording, item.plan)
