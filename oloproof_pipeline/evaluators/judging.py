"""The judging step: every case on every criterion, from stored recordings and replays only
(so a version re-grades without its system), as the rows of the `verdicts` table."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..model.cases import CaseRecord
from ..model.config import Project
from ..model.faults import FaultReplay
from ..model.outcomes import Verdict
from ..model.records import RecordedRun
from ..store.tables import VERDICT_NESTED, VERDICTS_SCHEMA, frame_from_rows, replays_from_table
from .base import Evaluator, JudgingContext


def judge_all(evaluators: list[Evaluator], cases: list[CaseRecord], context: JudgingContext) -> list[Verdict]:
    """One verdict per case and criterion, in case order."""
    return [evaluator.judge_case(case, context) for case in cases for evaluator in evaluators]


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
