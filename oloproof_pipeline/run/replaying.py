"""Fault replays: a recorded case re-run with one tool call's result replaced by a fixed fault,
or changed (a template over the recorded result: the call runs, the agent reads the change).

A fault plan (one `fault_recovery` evaluator) names the call to fault: the `occurrence`-th
call of `tool` in the recording. Each case is replayed twice from the latest checkpoint before
that call: a control replay with no change, which must reproduce the recording before anything
is believed, and the faulted replay. Judging a replay is a pure function of the recording, the
plan and the two stored replays (`evaluators/fault_recovery.py`), so `verdicts` (or a re-grade
without the system) recomputes it. A use of the incremental stage (run/stage.py), as
recording is: stored rows are matched by their key columns (case digest, plan, recording),
and only the cases left to replay (or to judge anew) become models.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from itertools import tee
from typing import Any, Iterable, Iterator

import pandas as pd

from ..evaluators.fault_recovery import FaultRecovery, judge_fault_replay, judging_digest
from ..model.cases import CaseRecord
from ..model.config import PROJECT_FILE, Project
from ..model.errors import ProjectError
from ..model.faults import FaultPlan, FaultReplay, NoTextToChange, checkpoint_before
from ..model.outcomes import MISSING
from ..model.records import RecordedRun, RunText
from ..model.trajectory import Checkpoint, Trajectory
from ..store.assembly import AssembledTable
from ..store.decoding import MODELS_AT_ONCE, replay_models
from ..store.spill import SpilledRowBatches
from ..store.stored import StoredTable
from ..store.tables import (
    FAULT_REPLAY_NESTED,
    FAULT_REPLAYS_SCHEMA,
    RowBatches,
    case_table,
    null_to_none,
    recorded_runs_table,
    rows_of,
)
from .reuse import KnownWork, WorkCounts
from .sandboxes import Sandboxes, SandboxTask
from .stage import Left, StoredWork, run_stage
from .recording import stored_cases
from .channel import EncodedTask, StoredCase, SystemFacts
from .supervisor import SupervisedSandbox, replay_result
from .system import ResolvedSystem, cases_at_once

TABLE = "fault_replays"
# A replay is one case digest, under one plan, of one recording: the cache key.
CACHE_COLUMNS = ["case_digest", "plan_digest", "recorded_by_run"]
# A row of the table (or journal): that replay, run by one run (none: decided without one).
REPLAYS = StoredWork(
    TABLE, (*CACHE_COLUMNS, "replayed_by_run"), FAULT_REPLAYS_SCHEMA, tuple(FAULT_REPLAY_NESTED), FaultReplay
)
REPLAYED, REPLAYED_AGAIN = "replayed", "replayed again"
# What a replay recorded (trajectories, state, output, the judgement's details): left in the
# stored file and the spilled new rows until the table is written; the rest is assembled whole.
STREAMED_COLUMNS = (
    "details", "checkpoint", "control_error", "control_trajectory", "faulted_error", "faulted_trajectory",
    "faulted_output", "faulted_environment_state",
)
WHOLE_COLUMNS = tuple(name for name in FAULT_REPLAYS_SCHEMA.names if name not in STREAMED_COLUMNS)


def fault_plans(project: Project) -> list[tuple[int, FaultPlan]]:
    """(index in `evaluators:`, plan) for each `fault_recovery` evaluator."""
    return [(index, evaluator.fault_plan) for index, evaluator in project.evaluators_of(FaultRecovery)]


@dataclass
class ReplaySummary(WorkCounts):
    """Replays run now, reused, failed, and not needed."""

    # Cases whose recording never made the faulted call, or has no checkpoint before it.
    skipped: int = 0

    def as_metadata(self, prefix: str = "replays") -> dict[str, int]:
        return {**super().as_metadata(prefix), f"{prefix}_skipped": self.skipped}

    def reasons(self, noun: str = "replay") -> list[str]:
        return super().reasons(noun)


@dataclass
class PendingReplay:
    """A replay a sandbox takes: its case and its recording's trajectory as stored (sent to
    the worker as they are), the trajectory also as a model (to make the change and judge)."""

    case: StoredCase
    recording: "StoredRecording"
    plan_index: int
    plan: FaultPlan
    call_index: int
    checkpoint: Checkpoint
    # The row of the plan's candidates (source case and plan) this replay fills.
    position: int = -1


@dataclass(frozen=True)
class LeftToReplay:
    """A replay still to run, by where its case and recording are stored: they become models
    only when a sandbox takes it (`pending_replays`), a slice at a time."""

    position: int
    case_position: int
    run_position: int
    plan_index: int
    plan: FaultPlan
    call_index: int
    checkpoint: Checkpoint


@dataclass
class ReplayWork:
    """What one materialization finds, per candidate (a clean source recording under a plan,
    in case and plan order): a known row it reuses, a row decided now (judged anew, nothing to
    replay, or replayed: kept as table rows, `decided_at` naming each one's candidate), or a
    replay still to run."""

    candidates: pd.DataFrame = field(default_factory=pd.DataFrame)
    known: pd.DataFrame = field(default_factory=pd.DataFrame)
    reuse: pd.Series = field(default_factory=lambda: pd.Series(dtype=float))
    decided: RowBatches = field(default_factory=lambda: RowBatches(FAULT_REPLAYS_SCHEMA, FAULT_REPLAY_NESTED))
    decided_at: list[int] = field(default_factory=list)
    pending: list[LeftToReplay] = field(default_factory=list)
    summary: ReplaySummary = field(default_factory=ReplaySummary)
    # Per candidate, its judging digest: looked up per row decided (a DataFrame's `.at` costs
    # a fifth of a millisecond, the driver's time on every replay).
    _digests: dict[int, str] | None = field(default=None, repr=False)

    def _judging_digests(self) -> dict[int, str]:
        if self._digests is None:
            self._digests = dict(zip(self.candidates.index, self.candidates["judging_digest"]))
        return self._digests

    def decide(self, position: int, replay: FaultReplay, texts: dict[str, str | None] | None = None) -> dict[str, Any]:
        """The candidate's row, decided now, as the table holds it (also what its journal line
        is); `texts`: columns whose JSON text came from the worker, written as they are."""
        texts = texts or {}
        row = self.decided.encoded({**replay.model_dump(mode="json", exclude=set(texts)), "judging_digest": self._judging_digests()[position]})
        row.update(texts)
        self.decided.add_encoded(row)
        self.decided_at.append(position)
        return row


@dataclass(frozen=True)
class StoredRecording:
    """What a replay needs of a stored recording: the run that recorded it, and its trajectory
    as stored (JSON text) and as a model."""

    recorded_by_run: str | None
    trajectory_text: str | None
    trajectory: Trajectory | None


@dataclass(frozen=True)
class ReplayedCase:
    """A candidate's replays, judged (`replay`, their trajectories models to judge them by),
    and what they recorded as the JSON text the worker sent (`texts`: the row's columns of
    it, written through)."""

    replay: FaultReplay
    texts: dict[str, str | None]

    @property
    def duration_s(self) -> float:
        return self.replay.duration_s


def stored_recordings(runs: StoredTable, positions: Iterable[int]) -> dict[int, StoredRecording]:
    """Position -> the recording there (only the columns a replay needs are read)."""
    unique = sorted({int(position) for position in positions})
    rows = runs.rows(unique, ["recorded_by_run", "trajectory"])
    return {
        position: StoredRecording(
            row["recorded_by_run"], row["trajectory"],
            None if row["trajectory"] is None else Trajectory.model_validate_json(row["trajectory"]),
        )
        for position, row in zip(unique, rows)
    }


def base_row(case_id: str, case_digest: str, recorded_by_run: str | None, plan: FaultPlan, version: str) -> dict[str, Any]:
    """A replay row's keys (the plan's digest is made once per plan: `FaultPlan.digest`)."""
    return {
        "case_id": case_id, "case_digest": case_digest, "system_version": version, "criterion": plan.criterion, "tool": plan.tool,
        "fault": plan.fault, "occurrence": plan.occurrence, "plan_digest": plan.digest, "recorded_by_run": recorded_by_run,
    }


def has_text_to_change(plan: FaultPlan, trajectory: Trajectory, call_index: int) -> bool:
    """A template fault needs text in the recorded result to change (else nothing to replay)."""
    try:
        plan.result_at(trajectory, call_index)
    except NoTextToChange:
        return False
    return True


def judged(replay: FaultReplay, trajectory: Trajectory | None, plan: FaultPlan) -> FaultReplay:
    judgement = judge_fault_replay(trajectory, plan, replay)
    return replay.model_copy(update=judgement.model_dump())


# -- what is left to replay ---------------------------------------------------------------------


def replay_candidates(cases: StoredTable, runs: StoredTable, plans: list[tuple[int, FaultPlan]]) -> pd.DataFrame:
    """One row per clean source recording and plan, in case and plan order, with its keys."""
    keys = cases.columns("case_id", "source_id")
    recordings = runs.columns("case_id", "case_digest", "status", "recorded_by_run")
    recordings["run_position"] = recordings.index
    sources = keys[keys["source_id"].isna()].reset_index().rename(columns={"index": "case_position"})
    clean = sources.merge(recordings[recordings["status"] == "ok"], on="case_id", how="inner")
    frames = [
        clean.assign(plan_position=position, plan_index=index, criterion=plan.criterion, plan_digest=plan.digest,
                     judging_digest=judging_digest(plan))
        for position, (index, plan) in enumerate(plans)
    ]
    if not frames or clean.empty:
        return pd.DataFrame(columns=[*clean.columns, "plan_position", "plan_index", "criterion", "plan_digest", "judging_digest"])
    return pd.concat(frames, ignore_index=True).sort_values(["case_position", "plan_position"], kind="stable").reset_index(drop=True)


def reusable_rows(candidates: pd.DataFrame, known: pd.DataFrame, version: str) -> pd.Series:
    """Per candidate, the known row it reuses (NaN: none): the same case digest, plan and
    recording, replayed to the end (or decided with no replay at all)."""
    finished = (known["control_status"] == "ok") & (known["faulted_status"] == "ok")
    usable = (known["system_version"] == version) & (finished | known["replayed_by_run"].isna())
    keys = known.loc[usable.fillna(False).to_numpy(dtype=bool), CACHE_COLUMNS]
    latest = keys[~keys.duplicated(keep="last")]
    index = pd.Series(latest.index, index=pd.MultiIndex.from_frame(latest))
    wanted = pd.MultiIndex.from_frame(candidates[CACHE_COLUMNS])
    return pd.Series(index.reindex(wanted).to_numpy(), index=candidates.index, dtype=float)


def plan_replays(
    project: Project, cases: StoredTable, runs: StoredTable, version: str, found: KnownWork, decided: RowBatches | None = None,
) -> ReplayWork:
    """Clean source recordings, under each fault plan: reuse what is known, judge anew what
    was judged under another plan, decide what needs no replay, and list the rest. The rows
    decided go to `decided` (held in memory when None)."""
    plans = fault_plans(project)
    candidates = replay_candidates(cases, runs, plans)
    decided = decided if decided is not None else RowBatches(FAULT_REPLAYS_SCHEMA, FAULT_REPLAY_NESTED)
    if candidates.empty:
        return ReplayWork(candidates=candidates, decided=decided)
    known = found.frame
    work = ReplayWork(candidates=candidates, known=known, reuse=reusable_rows(candidates, known, version), decided=decided)
    stale_judging = work.reuse.notna() & (
        known["judging_digest"].reindex(work.reuse.fillna(-1).astype(int)).to_numpy() != candidates["judging_digest"].to_numpy()
    )
    untried = work.reuse.isna()
    to_model = candidates.index[untried | stale_judging]
    placeholders = 0
    # The cases and recordings become models a slice at a time, and only while this plans.
    for start in range(0, len(to_model), MODELS_AT_ONCE):
        chosen = candidates.loc[to_model[start : start + MODELS_AT_ONCE]]
        chosen = chosen.assign(position=chosen.index, stale=stale_judging[chosen.index].to_numpy())
        placeholders += plan_slice(work, chosen, cases, runs, dict(plans), version)
    reused = work.reuse.dropna().astype(int)
    without_replay = known.loc[reused.to_numpy(), "replayed_by_run"].isna().to_numpy()
    work.summary.skipped = int(without_replay.sum()) + placeholders
    work.summary.reused = int((~without_replay).sum())
    why_replayed(work)
    return work


def plan_slice(
    work: ReplayWork, chosen: pd.DataFrame, cases: StoredTable, runs: StoredTable, plan_of: dict[int, FaultPlan], version: str,
) -> int:
    """Plan the `chosen` candidates: judge anew those judged under another plan, decide those
    with nothing to replay, list the rest as left. Returns how many had nothing to replay."""
    recordings = stored_recordings(runs, chosen["run_position"])
    stale_replays = replay_models(StoredTable.of(work.known), work.reuse[chosen.index[chosen["stale"].to_numpy(dtype=bool)]].astype(int))
    placeholders = 0
    columns = ["position", "case_position", "run_position", "plan_index", "stale", "case_id", "case_digest"]
    for row in rows_of(chosen, columns):
        position = row.position
        recording, plan = recordings[row.run_position], plan_of[row.plan_index]
        trajectory = recording.trajectory
        keys = base_row(row.case_id, row.case_digest, recording.recorded_by_run, plan, version)
        if row.stale:
            stored = stale_replays[int(work.reuse[position])]
            work.decide(position, judged(stored.model_copy(update=keys), trajectory, plan))
            continue
        call_index = plan.faulted_call_index(trajectory)
        checkpoint = checkpoint_before(trajectory, call_index) if call_index is not None else None
        if checkpoint is None or not has_text_to_change(plan, trajectory, call_index):
            # Nothing to replay: the judgement alone says EXCLUDED or MISSING.
            placeholder = FaultReplay(**keys, outcome=MISSING, reason="not_replayed", faulted_call_index=call_index)
            work.decide(position, judged(placeholder, trajectory, plan))
            placeholders += 1
        else:
            work.pending.append(LeftToReplay(position, row.case_position, row.run_position, row.plan_index, plan, call_index, checkpoint))
    return placeholders


def pending_replays(cases: StoredTable, runs: StoredTable, left: list[LeftToReplay]) -> Iterator[PendingReplay]:
    """The replays left, in order, their cases and recordings read a slice at a time as the
    sandboxes take them, so a large suite is never held all at once."""
    for start in range(0, len(left), MODELS_AT_ONCE):
        chunk = left[start : start + MODELS_AT_ONCE]
        positions = sorted({item.case_position for item in chunk})
        chosen_cases = dict(zip(positions, stored_cases(cases, positions)))
        recordings = stored_recordings(runs, [item.run_position for item in chunk])
        for item in chunk:
            yield PendingReplay(
                chosen_cases[item.case_position], recordings[item.run_position], item.plan_index, item.plan,
                item.call_index, item.checkpoint, item.position,
            )


def why_replayed(work: ReplayWork) -> None:
    """Name, per replay still to run, why no stored replay of it could be reused: from the
    stored replays of the same cases alone (one case added to 100,000 reads no other)."""
    if not work.pending:
        return
    known, summary = work.known, work.summary
    pending = work.candidates.loc[[item.position for item in work.pending]]
    criteria = set(known["criterion"].dropna().unique().tolist())
    related = known[known["case_digest"].isin(pending["case_digest"]) | known["case_id"].isin(pending["case_id"])]
    columns = ["case_digest", "plan_digest", "recorded_by_run", "control_status", "faulted_status"]
    last = {(digest, plan): rest for digest, plan, *rest in zip(*(null_to_none(related[column]) for column in columns))}
    same_case = set(zip(null_to_none(related["case_id"]), null_to_none(related["criterion"])))
    for row in rows_of(pending, ["case_id", "criterion", "case_digest", "plan_digest", "recorded_by_run"]):
        prior = last.get((row.case_digest, row.plan_digest))
        if prior is not None:
            recorded_by_run, control, faulted = prior
            if recorded_by_run != row.recorded_by_run:
                summary.because(REPLAYED_AGAIN, "recording changed")
            else:
                summary.because(REPLAYED_AGAIN, f"the last replay did not finish (control {control}, faulted {faulted})")
        elif (row.case_id, row.criterion) in same_case:
            summary.because(REPLAYED_AGAIN, "fault plan or case changed")
        else:
            summary.because(REPLAYED, "new case" if row.criterion in criteria or not criteria else "new fault plan")


# -- replaying ----------------------------------------------------------------------------------


def unreplayable(project: Project, pending: list[LeftToReplay]) -> list[str]:
    """What a system that cannot be replayed is told: a configuration error per fault plan."""
    callable_name = project.config.system.callable
    indexes = sorted({(item.plan_index, item.plan.criterion) for item in pending})
    return [
        f"{project.root / PROJECT_FILE}: evaluators[{index}] (fault_recovery {criterion}): the system "
        f"{callable_name} neither uses the tool box nor has a replay(trajectory, *, checkpoint, change) "
        "method, so its cases cannot be replayed"
        for index, criterion in indexes
    ]


def replay_one(
    runner: SupervisedSandbox, item: PendingReplay, version: str, run_id: str, refusal: list[str] | None = None
) -> ReplayedCase:
    """The control replay, then the faulted one, stored whole and judged. With `refusal`,
    the launch did not know whether the system can be replayed: its worker says, and one
    that cannot be is refused before anything is replayed."""
    refuse_unreplayable(runner.facts(), refusal)
    # Sent together: the worker starts the faulted replay as the control one ends.
    control, faulted = runner.replay_each(replay_tasks(item), together=True)
    return fault_replay(item, control, faulted, version, run_id)


def refuse_unreplayable(facts: SystemFacts, refusal: list[str] | None) -> None:
    """With `refusal` (the launch did not know), a system its worker says cannot be replayed is refused."""
    if refusal is not None and not facts.replayable:
        raise ProjectError(refusal)


def replayed(
    runner: SupervisedSandbox, item: PendingReplay, answers: list[tuple[EncodedTask, Any]], version: str, run_id: str
) -> ReplayedCase:
    """`replay_one`'s result from its two tasks' answers (run/local_sandboxes.py sends and reads them)."""
    (_, control), (_, faulted) = answers
    return fault_replay(item, replay_result(control), replay_result(faulted), version, run_id)


def replay_side_by_side(
    runner: SupervisedSandbox, items: Iterable[PendingReplay], version: str, run_id: str, refusal: list[str] | None = None
) -> Iterator[tuple[PendingReplay, ReplayedCase]]:
    """`replay_one` for a stream of items on a sandbox that runs cases side by side (a chat
    agent's `concurrency.system`): every control and faulted replay is one task among them."""
    refuse_unreplayable(runner.facts(), refusal)
    asked, answered = tee(items)
    results = runner.replay_each(task for item in asked for task in replay_tasks(item))
    for item in answered:
        control, faulted = next(results), next(results)
        yield item, fault_replay(item, control, faulted, version, run_id)


def replay_tasks(item: PendingReplay) -> list[EncodedTask]:
    """The control replay and the faulted one, the case and trajectory sent as stored."""
    change = item.plan.change_at(item.recording.trajectory, item.call_index)
    members = (("trajectory", item.recording.trajectory_text), ("checkpoint", item.checkpoint.model_dump_json()))
    return [
        EncodedTask("replay", item.case, (*members, ("change", "null"))),
        EncodedTask("replay", item.case, (*members, ("change", change.model_dump_json()))),
    ]


def fault_replay(item: PendingReplay, control_text: RunText, faulted_text: RunText, version: str, run_id: str) -> ReplayedCase:
    """One candidate's replays as its stored row, judged (their trajectories made models to
    judge them by; the row takes what they recorded as the text the worker sent)."""
    control, faulted = control_text.as_result(), faulted_text.as_result()
    replay = FaultReplay(
        **item_row(item, version),
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
    texts = {
        "control_trajectory": control_text.trajectory, "faulted_trajectory": faulted_text.trajectory,
        "faulted_output": faulted_text.output, "faulted_environment_state": faulted_text.environment_state,
    }
    return ReplayedCase(judged(replay, item.recording.trajectory, item.plan), texts)


def item_row(item: PendingReplay, version: str) -> dict[str, Any]:
    return base_row(item.case.case_id, item.case.case_digest, item.recording.recorded_by_run, item.plan, version)


@dataclass
class ReplayStage:
    """Each clean source recording under each fault plan, replayed where no stored replay of
    the same version, recording and plan can be reused."""

    project: Project
    cases: StoredTable
    runs: StoredTable
    version: str
    run_id: str
    stored: StoredWork = REPLAYS

    def action(self, left: int) -> str:
        return f"replay {left} case(s) of"

    def plan(self, known: KnownWork) -> ReplayWork:
        # The rows decided (replayed: two trajectories and a state each) go to a file of their own as they come.
        return plan_replays(self.project, self.cases, self.runs, self.version, known, SpilledRowBatches(FAULT_REPLAYS_SCHEMA, FAULT_REPLAY_NESTED))

    def left(self, work: ReplayWork) -> int:
        return len(work.pending)

    def work(self, work: ReplayWork, system: ResolvedSystem) -> Left:
        """The pending replays; a system known to be unreplayable is refused before any."""
        refusal = unreplayable(self.project, work.pending)
        if system.replayable is False:
            raise ProjectError(refusal)
        settings = dict(version=self.version, run_id=self.run_id, refusal=None if system.replayable else refusal)
        # Side by side only where cases run so (a chat agent); elsewhere one replay at a time, as ever.
        each = partial(replay_side_by_side, **settings) if cases_at_once(self.project) > 1 else None
        items = pending_replays(self.cases, self.runs, work.pending)
        task = SandboxTask(
            one=partial(replay_one, **settings), each=each, tasks=replay_tasks,
            result=partial(replayed, version=self.version, run_id=self.run_id),
            check=partial(refuse_unreplayable, refusal=settings["refusal"]),
        )
        return Left(items, task)

    def finished(self, work: ReplayWork, item: PendingReplay, result: Any) -> dict[str, Any]:
        done = ReplayedCase(worker_failed(item, result, self.version, self.run_id), {}) if isinstance(result, Exception) else result
        work.summary.new += 1
        work.summary.failed += not done.replay.completed
        return work.decide(item.position, done.replay, done.texts)

    def assemble(self, work: ReplayWork) -> tuple[AssembledTable, ReplaySummary]:
        for decoded in (self.cases, self.runs):  # the columns the replays' models were made from
            decoded.forget()
        return replay_rows(work), work.summary


def replay_rows(work: ReplayWork) -> AssembledTable:
    """One row per candidate, in order: the known row it reuses (filed under this candidate's
    case and criterion), or the row decided now; what they recorded left in the stored rows
    and the spilled new ones until the table is written."""
    decided_at = set(work.decided_at)
    reused = work.reuse.dropna().astype(int)
    reused = reused[[position not in decided_at for position in reused.index]]
    parts = [(work.known, reused.to_numpy(), reused.index), (work.decided.rows(), range(work.decided.count), work.decided_at)]
    values = {column: null_to_none(work.candidates[column]) for column in ("case_id", "criterion")} if len(work.candidates) else None
    return AssembledTable(FAULT_REPLAYS_SCHEMA, parts, WHOLE_COLUMNS, column_values=values)


def worker_failed(item: PendingReplay, error: Exception, version: str, run_id: str) -> FaultReplay:
    """A Dask worker died mid-replay: that case is MISSING, never a pass."""
    message = f"the Dask worker replaying this case failed: {type(error).__name__}: {error}"
    replay = FaultReplay(
        **item_row(item, version),
        outcome=MISSING,
        reason="not_judged",
        faulted_call_index=item.call_index,
        checkpoint=item.checkpoint,
        control_status="error",
        control_error=message,
        replayed_by_run=run_id,
    )
    return judged(replay, item.recording.trajectory, item.plan)


def replay_fault_rows(
    project: Project,
    cases: StoredTable,
    runs: StoredTable,
    *,
    version: str,
    run_id: str,
    sandboxes: Sandboxes | None = None,
    system: ResolvedSystem | None = None,
) -> tuple[AssembledTable, ReplaySummary]:
    """Each clean source recording under each fault plan. Stored replays of the same version,
    recording and plan are reused; the system (`system`, the launch's) is needed, and must
    be this partition's version, only when something is left to replay."""
    stage = ReplayStage(project, cases, runs, version, run_id)
    return run_stage(stage, project, version=version, system=system, sandboxes=sandboxes)


def replay_fault_table(project: Project, cases: StoredTable, runs: StoredTable, **run: Any) -> tuple[pd.DataFrame, ReplaySummary]:
    """`replay_fault_rows`, the table as a frame (for scripts and tests)."""
    table, summary = replay_fault_rows(project, cases, runs, **run)
    return table.frame(), summary


def replay_faults(
    project: Project,
    cases: list[CaseRecord],
    runs: list[RecordedRun],
    *,
    version: str,
    run_id: str,
    sandboxes: Sandboxes | None = None,
    system: ResolvedSystem | None = None,
) -> tuple[pd.DataFrame, ReplaySummary]:
    """`replay_fault_table` for cases and recordings in hand, as models (for scripts and tests)."""
    return replay_fault_table(
        project, StoredTable.of(case_table(cases)), StoredTable.of(recorded_runs_table(runs)),
        version=version, run_id=run_id, sandboxes=sandboxes, system=system,
    )
