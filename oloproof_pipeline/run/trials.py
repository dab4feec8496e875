"""Repeated trials (`execution.trials: k`): trials 2..k of every case, recorded into the
`trial_runs` table beside `recorded_runs` (which holds trial 1, exactly as with one trial).

A trial's recording is reused while its case digest, the system version, the system's code and
its trial index hold: the trial is part of its key, so raising k from 3 to 5 records only
trials 4 and 5 (lowering it drops the trials above k from the table). The recording stage
(run/recording.py) with a trial index on each row: all trials left run in one stream of
cases, trial then case order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import pandas as pd

from ..evaluators.trials import later_trials, of_trial
from ..model.config import Project
from ..model.fingerprints import row_key
from ..model.records import RecordedRun, RecordingRow
from ..store.layout import table_path, write_table_file
from ..store.stored import StoredTable
from ..store.tables import RUN_NESTED, TRIAL_RUNS_SCHEMA, RowBatches, frame_from_rows
from .budget import Spend
from .recording import RECORDED, RECORDINGS, RecordingPlan, Recordings, RecordingStage, RecordingSummary, recorded_table
from .sandboxes import Sandboxes
from .stage import StoredWork, run_stage
from .system import ResolvedSystem

TABLE = "trial_runs"
# A trial's recording is one case digest's trial recorded by one run.
TRIAL_RECORDINGS = StoredWork(TABLE, ("case_digest", "trial", "recorded_by_run"), TRIAL_RUNS_SCHEMA, tuple(RUN_NESTED), RecordedRun)


def trial_recording_key(row: dict, trial: int) -> str:
    """The key of a recording of trial 2..k: trial 1's key with the trial index added."""
    return row_key("trial", row["recording_key"], trial)


@dataclass
class TrialStage(RecordingStage):
    """Trials 2..k, into `trial_runs`: each row carries its trial, and its key says so."""

    stored: StoredWork = TRIAL_RECORDINGS

    def known_of(self, known: pd.DataFrame, trial: int) -> pd.DataFrame:
        return of_trial(known, trial)

    def explain(self, trial: int, plan: RecordingPlan, summary: RecordingSummary) -> None:
        if plan.known.empty and not self.fresh:
            summary.because(RECORDED, f"new trial {trial}", len(plan.to_record))
        else:
            super().explain(trial, plan, summary)

    def row(self, row: dict[str, Any], trial: int) -> dict[str, Any]:
        return {**row, "trial": trial, "recording_key": trial_recording_key(row, trial)}

    def new_rows(self) -> RowBatches:
        """Held as they come: the trials' table is put together as a frame."""
        return RowBatches(self.stored.schema, RUN_NESTED)

    def assemble(self, recordings: Recordings) -> tuple[pd.DataFrame, RecordingSummary]:
        """The table (trial then case order), written beside `recorded_runs`."""
        summary, frames = recordings.summary, []
        for trial, plan in recordings.plans.items():
            new = recordings.new[trial]
            summary.new += new.count
            summary.reused += len(self.keys) - new.count
            frames.append(recorded_table(self.keys, plan, new.frame()).assign(trial=trial))
        frame = pd.concat(frames, ignore_index=True) if frames else frame_from_rows([], TRIAL_RUNS_SCHEMA)
        frame = frame.reindex(columns=TRIAL_RUNS_SCHEMA.names)
        write_table_file(table_path(self.project.root, TABLE, self.version), frame)
        return frame, summary


def record_trial_table(
    project: Project,
    cases: StoredTable,
    *,
    version: str,
    run_id: str,
    fresh: bool = False,
    on_recorded: Callable[[RecordingRow], None] | None = None,
    sandboxes: Sandboxes | None = None,
    system: ResolvedSystem | None = None,
) -> tuple[pd.DataFrame | None, RecordingSummary]:
    """The `trial_runs` table (trials 2..k, trial then case order) and what was recorded for
    it, written and journalled as `recorded_runs` is. None (and nothing written) with one trial."""
    trials = later_trials(project)
    if not trials:
        return None, RecordingSummary()
    stage = TrialStage(project, cases, version, run_id, fresh, on_recorded, trials=trials)
    spend = trials_spend(project, version, run_id)
    return run_stage(stage, project, version=version, fresh=fresh, system=system, sandboxes=sandboxes, spend=spend)


def trials_spend(project: Project, version: str, run_id: str) -> Spend | None:
    """One budget for the run: what its trial-1 recordings spent counts. The recordings'
    journal is read only under a `budget:` (without one nothing is counted)."""
    if project.config.budget is None:
        return None
    first = RECORDINGS.journal(project, version).rows()
    return Spend.of(project.config, (row for row in first if row.get("recorded_by_run") == run_id))
