"""The pipeline's steps as plain functions: each Dagster asset body calls one of these.

Everything here works from stored tables, so a version can be re-graded without its system.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Callable

import pandas as pd

from .errors import SystemVersionMismatch
from .evaluators import JudgingContext, judge_all
from .gate import GateDecision, decide_gate, decide_rule
from .metamorphic import transform_blocking_reasons
from .project import CaseRecord, Project, load_cases
from .recording import RecordedRun
from .verdicts import STRUCTURAL_EXCLUSIONS
from .replay import ReplaySummary, fault_replays_table, plan_replays, run_replays
from .fanout import Sandboxes, record_each
from .storage import Journal, read_table, sandbox_lock
from .system import current_system_version, system_spec
from .statistics import BlockingReason, rate_from_outcomes
from .tables import (
    CASE_NESTED,
    CASES_SCHEMA,
    GATE_NESTED,
    GATE_SCHEMA,
    RECORDED_RUNS_SCHEMA,
    RUN_NESTED,
    VERDICT_NESTED,
    VERDICTS_SCHEMA,
    frame_from_rows,
    models_to_frame,
    rows_from_frame,
)

# -- cases ---------------------------------------------------------------------------------


def case_table(cases: list[CaseRecord]) -> pd.DataFrame:
    return models_to_frame(cases, CASES_SCHEMA, CASE_NESTED)


def cases_from_table(frame: pd.DataFrame) -> list[CaseRecord]:
    return [CaseRecord.model_validate(row) for row in rows_from_frame(frame, CASE_NESTED)]


def load_case_table(project: Project) -> pd.DataFrame:
    return case_table(load_cases(project))


# -- recording -----------------------------------------------------------------------------


@dataclass
class RecordingSummary:
    """Counts for a materialization's metadata: what was recorded now and what was reused."""

    new: int = 0
    reused: int = 0
    dropped: int = 0
    failed: int = 0

    def as_metadata(self) -> dict[str, int]:
        return {f"cases_{name}": value for name, value in asdict(self).items()}


def check_partition_is_current_version(project: Project, partition_version: str, action: str = "record") -> None:
    """Refuse to record under a version the loaded system is not: that would mislabel runs."""
    loaded = current_system_version(project)
    if partition_version != loaded:
        raise SystemVersionMismatch(
            f"refusing to {action} partition {partition_version!r}: the loaded system "
            f"{project.config.system.callable} is version {loaded!r}. Record {loaded!r} instead, "
            f"or re-grade {partition_version!r} from its stored recordings."
        )


def runs_from_table(frame: pd.DataFrame | None) -> list[RecordedRun]:
    if frame is None:
        return []
    return [RecordedRun.model_validate(row) for row in rows_from_frame(frame, RUN_NESTED)]


def recorded_runs_table(runs: list[RecordedRun]) -> pd.DataFrame:
    return models_to_frame(runs, RECORDED_RUNS_SCHEMA, RUN_NESTED)


def reusable_runs(stored: list[RecordedRun], journal: Journal, version: str) -> dict[str, RecordedRun]:
    """Finished recordings of this version by case digest: the stored table, then the journal
    of a run that may have been cut short. Only clean recordings are reused."""
    reusable: dict[str, RecordedRun] = {}
    journaled = [RecordedRun.model_validate(row) for row in journal.rows()]
    for run in stored + journaled:
        if run.status == "ok" and run.system_version == version:
            reusable[run.case_digest] = run
    return reusable


def record_cases(
    project: Project,
    cases: list[CaseRecord],
    *,
    version: str,
    run_id: str,
    fresh: bool = False,
    on_recorded: Callable[[RecordedRun], None] | None = None,
    sandboxes: Sandboxes | None = None,
) -> tuple[list[RecordedRun], RecordingSummary]:
    """Record every case not already recorded for this version (all of them when `fresh`).

    Each recording is journalled as it finishes, so a run killed part-way loses nothing.
    With distributed `sandboxes` the cases spread over Dask workers (see fanout.py).
    The system is imported, and must be this partition's version, only when something is
    left to record: a version whose system is gone still re-grades from its recordings.
    """
    journal = Journal.for_partition(project.root, "recorded_runs", version)
    if fresh:
        journal.clear()
    stored = runs_from_table(read_table(project.root, "recorded_runs", version))
    reusable = {} if fresh else reusable_runs(stored, journal, version)
    previous_ids = {run.case_id for run in stored}
    to_record = [case for case in cases if case.case_digest not in reusable]

    new_runs: dict[str, RecordedRun] = {}
    if to_record:
        check_partition_is_current_version(project, version)
        with sandbox_lock(project.root):
            if not fresh:  # a run that held the sandbox before us may have recorded some already
                reusable = reusable_runs(stored, journal, version)
                to_record = [case for case in cases if case.case_digest not in reusable]
            recordings = record_each(
                system_spec(project), to_record, version=version,
                timeout_s=project.config.execution.timeout_s, sandboxes=sandboxes,
            )
            for run in recordings:
                run.recorded_by_run = run_id
                journal.append(run.model_dump(mode="json"))
                new_runs[run.case_id] = run
                if on_recorded is not None:
                    on_recorded(run)
    runs = [new_runs.get(case.case_id) or reused_for(case, reusable) for case in cases]
    summary = RecordingSummary(
        new=len(new_runs),
        reused=len(cases) - len(new_runs),
        dropped=len(previous_ids - {case.case_id for case in cases}),
        failed=sum(run.status != "ok" for run in new_runs.values()),
    )
    return runs, summary


def reused_for(case: CaseRecord, reusable: dict[str, RecordedRun]) -> RecordedRun:
    """A stored recording of the same digest, filed under this case's id (two cases may
    share a digest, e.g. identical rows, and each needs its own row)."""
    return reusable[case.case_digest].model_copy(update={"case_id": case.case_id})


# -- fault replays -------------------------------------------------------------------------


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


# -- judging -------------------------------------------------------------------------------


def judge_cases(
    project: Project,
    cases: list[CaseRecord],
    runs: list[RecordedRun],
    *,
    version: str,
    judged_by_run: str,
    replays: dict[tuple[str, str], Any] | None = None,
) -> pd.DataFrame:
    """One verdict row per case and criterion, naming the runs that recorded and judged it."""
    context = JudgingContext(
        cases={case.case_id: case for case in cases},
        recordings={run.case_id: run for run in runs},
        replays=replays or {},
    )
    rows = []
    for verdict in judge_all(project.evaluators, cases, context):
        case, recording = context.cases[verdict.case_id], context.recording_of(verdict.case_id)
        replay = context.replays.get((verdict.case_id, verdict.criterion))
        rows.append(
            {
                **verdict.model_dump(mode="json"),
                "case_digest": case.case_digest,
                "group_id": case.group_id,
                "system_version": version,
                "recorded_by_run": recording.recorded_by_run if recording else None,
                "replayed_by_run": getattr(replay, "replayed_by_run", None),
                "judged_by_run": judged_by_run,
            }
        )
    return frame_from_rows(rows, VERDICTS_SCHEMA, VERDICT_NESTED)


def outcome_counts(verdicts: pd.DataFrame) -> dict[str, dict[str, int]]:
    """criterion -> {PASS, FAIL, MISSING, EXCLUDED} counts, for metadata and reports."""
    counts: dict[str, dict[str, int]] = {}
    for criterion, outcome in zip(verdicts["criterion"], verdicts["outcome"]):
        counts.setdefault(criterion, Counter())[outcome] += 1
    return {
        criterion: {outcome: int(tally.get(outcome, 0)) for outcome in ("PASS", "FAIL", "MISSING", "EXCLUDED")}
        for criterion, tally in counts.items()
    }


# -- the gate ------------------------------------------------------------------------------


def rule_blocking_reasons(
    project: Project, metric: str, derived_cases: pd.DataFrame | None = None
) -> list[BlockingReason]:
    """Reasons from outside the rate that keep a rule from being decided by its interval:
    a metamorphic relation over a transform whose labels do not yet check it adds
    `transform_not_checked` (validity is read from the `derived_cases` table)."""
    return transform_blocking_reasons(project, metric, derived_cases)


def decide_release_gate(
    project: Project, verdicts: pd.DataFrame, derived_cases: pd.DataFrame | None = None
) -> GateDecision:
    """Each rule over its metric's verdicts, then ALLOW or BLOCK."""
    policy = project.release
    decisions = []
    for rule in policy.rules:
        of_metric = verdicts[(verdicts["criterion"] == rule.metric) & ~verdicts["reason"].isin(STRUCTURAL_EXCLUSIONS)]
        evidence = rate_from_outcomes(
            zip(of_metric["group_id"], of_metric["outcome"]),
            confidence=policy.confidence_level,
            allow_approximate=policy.allow_approximate_methods,
            min_clusters=policy.min_clusters,
        )
        blocking = evidence.blocking_reasons + rule_blocking_reasons(project, rule.metric, derived_cases)
        decisions.append(decide_rule(rule, evidence.estimate, blocking, policy.confidence_level))
    return decide_gate(decisions)


def gate_table(gate: GateDecision, *, version: str, judged_by_run: str) -> pd.DataFrame:
    """One row per rule; every row also carries the overall decision and its reasons."""
    extra = {
        "system_version": version,
        "gate_decision": gate.decision,
        "gate_reasons": gate.reasons,
        "judged_by_run": judged_by_run,
    }
    return models_to_frame(gate.rules, GATE_SCHEMA, GATE_NESTED, **extra)


# -- code versions -------------------------------------------------------------------------


def code_versions(project: Project) -> dict[str, str]:
    """Per asset, a digest of the configuration it depends on: when an evaluator or a rule
    changes, the assets it feeds show as stale and a backfill re-grades them."""
    from . import __version__
    from .digests import digest

    config = project.config

    def short(tag: str, value: Any) -> str:
        return f"{__version__}-" + digest(tag, value).removeprefix("sha256:")[:12]

    evaluators = config.evaluators
    return {
        "cases": short("cases", {"dataset": config.dataset}),
        "derived_cases": short("derived_cases", config.metamorphic.model_dump(mode="json")),
        "recorded_runs": short("recorded_runs", {"system": config.system.model_dump(mode="json")}),
        "fault_replays": short(
            "fault_replays", {"evaluators": [each for each in evaluators if each.get("type") == "fault_recovery"]}
        ),
        "verdicts": short("verdicts", {"evaluators": evaluators}),
        "slices": short("slices", {"slices": config.slices, "min_support": config.min_slice_support}),
        "gate": short("gate", project.release.model_dump(mode="json")),
    }
