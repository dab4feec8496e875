"""Fault replays: a recorded case re-run with one tool call's result replaced by a fixed fault.

A fault plan (one `fault_recovery` evaluator) names the call to fault: the `occurrence`-th
call of `tool` in the recording. Each case is replayed twice from the latest checkpoint before
that call: a control replay with no change, which must reproduce the recording before anything
is believed, and the faulted replay. Judging a replay is a pure function of the recording, the
plan and the two stored replays (`evaluators/fault_recovery.py`), so `verdicts` (or a re-grade
without the system) recomputes it. Planning, running and journalling mirror `recording.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pandas as pd

from ..evaluators.fault_recovery import FaultRecovery, judge_fault_replay
from ..model.cases import CaseRecord
from ..model.config import PROJECT_FILE, Project
from ..model.errors import ProjectError
from ..model.faults import FaultPlan, FaultReplay, checkpoint_before
from ..model.outcomes import MISSING
from ..model.records import RecordedRun
from ..model.trajectory import Checkpoint
from ..store.journal import Journal, sandbox_lock, stored_work
from ..store.tables import fault_replays_table, replays_from_table
from .recording import check_partition_is_current_version
from .reuse import WorkCounts, reusable
from .sandboxes import Sandboxes, in_sandboxes
from .supervisor import SupervisedSandbox
from .system import system_facts, system_spec

TABLE = "fault_replays"


def fault_plans(project: Project) -> list[tuple[int, FaultPlan]]:
    """(index in `evaluators:`, plan) for each `fault_recovery` evaluator."""
    return [(index, evaluator.fault_plan) for index, evaluator in project.evaluators_of(FaultRecovery)]


def cache_key(case_digest: str, plan: FaultPlan, recorded_by_run: str | None) -> tuple[str, str, str | None]:
    return case_digest, plan.digest, recorded_by_run


@dataclass
class ReplaySummary(WorkCounts):
    """Replays run now, reused, failed, and not needed."""

    # Cases whose recording never made the faulted call, or has no checkpoint before it.
    skipped: int = 0

    def as_metadata(self, prefix: str = "replays") -> dict[str, int]:
        return super().as_metadata(prefix)


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
    return reusable(
        replays_from_table(stored_work(project.root, TABLE, version)),
        journal_for(project, version),
        FaultReplay,
        key=lambda replay: (replay.case_digest, replay.plan_digest, replay.recorded_by_run),
        keep=lambda replay: replay.completed and replay.system_version == version,
    )


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
                placeholder = FaultReplay(**row, outcome=MISSING, reason="not_replayed", faulted_call_index=call_index)
                work.done[key] = judged(placeholder, recording, plan)
                work.summary.skipped += 1
            else:
                work.pending.append(PendingReplay(case, recording, plan_index, plan, call_index, checkpoint))
    return work


def refuse_unreplayable(project: Project, replayable: bool, pending: list[PendingReplay]) -> None:
    """Before any replay: a system that cannot be replayed is a configuration error."""
    if replayable:
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


def replay_one(runner: SupervisedSandbox, item: PendingReplay, version: str, run_id: str) -> FaultReplay:
    """The control replay, then the faulted one, stored whole and judged."""
    trajectory = item.recording.trajectory
    control = runner.replay(item.case, trajectory, item.checkpoint, None)
    faulted = runner.replay(item.case, trajectory, item.checkpoint, item.plan.change_at(trajectory, item.call_index))
    replay = FaultReplay(
        **base_row(item.case, item.recording, item.plan, version),
        outcome=MISSING,
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
        refuse_unreplayable(project, system_facts(project).replayable, work.pending)
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
        outcome=MISSING,
        reason="not_judged",
        faulted_call_index=item.call_index,
        checkpoint=item.checkpoint,
        control_status="error",
        control_error=message,
        replayed_by_run=run_id,
    )
    return judged(replay, item.recording, item.plan)


def replay_faults(
    project: Project,
    cases: list[CaseRecord],
    runs: list[RecordedRun],
    *,
    version: str,
    run_id: str,
    sandboxes: Sandboxes | None = None,
) -> tuple[pd.DataFrame, ReplaySummary]:
    """Each clean source recording under each fault plan (see `replay.py`). Stored replays of
    the same version, recording and plan are reused; the system is needed, and must be this
    partition's version, only when something is left to replay."""
    work = plan_replays(project, cases, runs, version)
    if not work.pending:
        return fault_replays_table(run_replays(project, work, version=version, run_id=run_id)), work.summary
    check_partition_is_current_version(project, version, action=f"replay {len(work.pending)} case(s) of")
    with sandbox_lock(project.root):
        work = plan_replays(project, cases, runs, version)  # again: a run before us may have replayed some
        replays = run_replays(project, work, version=version, run_id=run_id, sandboxes=sandboxes)
    return fault_replays_table(replays), work.summary
