"""Judging repeated trials: trials 2..k of every case on every criterion judged from its own
recording, into the `trial_verdicts` table beside `verdicts` (trial 1).

Each trial is judged as `verdicts` is, by `judge_verdict_table`, so a trial's verdict is
reused while its evaluator and its trial's recording (and a copy's source recording of the
same trial) hold. Fault recovery is not repeated: its replays are made from trial 1's
recording, so its criteria have one trial.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from ..model.config import Project
from ..model.trials import FIRST_TRIAL
from ..store.layout import table_path, write_table_file
from ..store.stored import StoredTable
from ..store.tables import TRIAL_VERDICTS_SCHEMA, frame_from_rows
from .judging import VerdictSummary, judge_verdict_table

TABLE = "trial_verdicts"


def later_trials(project: Project) -> range:
    """The trials kept beside trial 1's tables (`recorded_runs`, `verdicts`): 2..k, none with one trial."""
    return range(FIRST_TRIAL + 1, project.config.execution.trials + 1)


def _repeated(project: Project) -> Project:
    return replace(project, evaluators=[each for each in project.evaluators if not each.replay_driven])


def of_trial(frame: pd.DataFrame, trial: int) -> pd.DataFrame:
    """The rows of one trial, numbered from 0 (as a plan refers to its rows)."""
    trials = pd.to_numeric(frame["trial"], errors="coerce")
    return frame[(trials == trial).to_numpy(dtype=bool)].reset_index(drop=True)


def judge_trial_table(
    project: Project,
    cases: StoredTable,
    trial_runs: StoredTable,
    stored: StoredTable,
    *,
    version: str,
    judged_by_run: str,
) -> tuple[pd.DataFrame | None, VerdictSummary]:
    """The `trial_verdicts` table (trials 2..k, trial then case then evaluator order): each
    stored verdict whose key holds reused, the rest judged now; written beside `verdicts`.
    None (and nothing written) with one trial."""
    summary = VerdictSummary()
    trials = later_trials(project)
    if not trials:
        return None, summary
    repeated = _repeated(project)
    runs = trial_runs.whole() if trial_runs.exists else None
    previous = stored.whole(TRIAL_VERDICTS_SCHEMA) if stored.exists else None
    frames = []
    for trial in trials:
        runs_of_trial = StoredTable.of(of_trial(runs, trial)) if runs is not None else StoredTable()
        stored_of_trial = StoredTable.of(of_trial(previous, trial)) if previous is not None else StoredTable()
        frame, judged = judge_verdict_table(
            repeated, cases, runs_of_trial, StoredTable(), stored_of_trial, version=version, judged_by_run=judged_by_run
        )
        frames.append(frame.assign(trial=trial))
        summary.judged += judged.judged
        summary.reused += judged.reused
        summary.judged_by_criterion.update(judged.judged_by_criterion)
        summary.judge_spent.update(judged.judge_spent)
        summary.why.update({(criterion, done, f"trial {trial}: {reason}"): count for (criterion, done, reason), count in judged.why.items()})
    frame = pd.concat(frames, ignore_index=True) if frames else frame_from_rows([], TRIAL_VERDICTS_SCHEMA)
    frame = frame.reindex(columns=TRIAL_VERDICTS_SCHEMA.names)
    write_table_file(table_path(project.root, TABLE, version), frame)
    return frame, summary
