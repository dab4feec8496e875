"""Repeated trials (`execution.trials: k`): trials 2..k of every case, recorded into the
`trial_runs` table beside `recorded_runs` (which holds trial 1, exactly as with one trial).

A trial's recording is reused while its case digest, the system version, the system's code and
its trial index hold: the trial is part of its key, so raising k from 3 to 5 records only
trials 4 and 5 (lowering it drops the trials above k from the table).
"""

from __future__ import annotations

from typing import Callable

import pandas as pd

from ..model.config import Project
from ..model.fingerprints import CodeFingerprint, row_key, system_code_fingerprint
from ..model.records import RecordedRun
from ..model.trials import FIRST_TRIAL
from ..store.journal import Journal, sandbox_lock
from ..store.layout import table_path, write_table_file
from ..store.stored import StoredTable
from ..store.tables import RUN_NESTED, TRIAL_RUNS_SCHEMA, RowBatches, frame_from_rows
from .recording import (
    OK,
    RECORDED,
    RecordingPlan,
    RecordingSummary,
    case_records,
    check_partition_is_current_version,
    plan_recordings,
    recorded_table,
    recording_row,
    why_recorded,
)
from .reuse import journal_state, known_work
from .sandboxes import Sandboxes, record_each
from .system import system_spec

TABLE = "trial_runs"
# A trial's recording is one case digest's trial recorded by one run.
KEY_COLUMNS = ["case_digest", "trial", "recorded_by_run"]


def trial_recording_key(row: dict, trial: int) -> str:
    """The key of a recording of trial 2..k: trial 1's key with the trial index added."""
    return row_key("trial", row["recording_key"], trial)


def later_trials(project: Project) -> range:
    """The trials recorded beside `recorded_runs`: 2..k (none with one trial)."""
    return range(FIRST_TRIAL + 1, project.config.execution.trials + 1)


def record_trial_table(
    project: Project,
    cases: StoredTable,
    *,
    version: str,
    run_id: str,
    fresh: bool = False,
    on_recorded: Callable[[RecordedRun], None] | None = None,
    sandboxes: Sandboxes | None = None,
    system: object | None = None,  # the launch's ResolvedSystem (accepted, not used yet)
) -> tuple[pd.DataFrame | None, RecordingSummary]:
    """The `trial_runs` table (trials 2..k, trial then case order) and what was recorded for
    it, written and journalled as `recorded_runs` is. None (and nothing written) with one trial."""
    summary = RecordingSummary()
    trials = later_trials(project)
    if not trials:
        return None, summary
    code = system_code_fingerprint(project)
    journal = Journal.for_partition(project.root, TABLE, version)
    if fresh:
        journal.clear()
    keys = cases.columns("case_id", "case_digest")
    state, plans = plan_trials(project, keys, journal, trials, version=version, code=code, fresh=fresh)
    new_by_trial = {trial: RowBatches(TRIAL_RUNS_SCHEMA, RUN_NESTED) for trial in trials}
    if any(plan.to_record for plan in plans.values()):
        check_partition_is_current_version(project, version)
        with sandbox_lock(project.root):
            if not fresh and journal_state(journal) != state:
                # A run that held the sandbox before us recorded some already.
                state, plans = plan_trials(project, keys, journal, trials, version=version, code=code, fresh=fresh)
            with journal.appending() as journal_line:
                for trial, plan in plans.items():
                    if plan.known.empty and not fresh:
                        summary.because(RECORDED, f"new trial {trial}", len(plan.to_record))
                    else:
                        why_recorded(keys, plan, code, fresh, summary)
                    record_trial(project, cases, plan.to_record, trial, code, version=version, run_id=run_id,
                                 rows=new_by_trial[trial], journal_line=journal_line, summary=summary,
                                 on_recorded=on_recorded, sandboxes=sandboxes)
    frames = []
    for trial, plan in plans.items():
        new = new_by_trial[trial]
        summary.new += new.count
        summary.reused += len(keys) - new.count
        frames.append(recorded_table(keys, plan, new.frame()).assign(trial=trial))
    frame = pd.concat(frames, ignore_index=True) if frames else frame_from_rows([], TRIAL_RUNS_SCHEMA)
    frame = frame.reindex(columns=TRIAL_RUNS_SCHEMA.names)
    write_table_file(table_path(project.root, TABLE, version), frame)
    return frame, summary


def plan_trials(
    project: Project, keys: pd.DataFrame, journal: Journal, trials: range, *, version: str, code: CodeFingerprint, fresh: bool
) -> tuple[tuple[int, int] | None, dict[int, RecordingPlan]]:
    """Per later trial, what it reuses and what is left to record; and the journal's state
    when it was read. A table that cannot be read is set aside for its journal, as in recording.py."""
    table = StoredTable() if fresh else StoredTable.at(project.root, TABLE, partition=version).readable(
        f"using the journal {journal.path} instead"
    )
    known = known_work(table, journal, RecordedRun, TRIAL_RUNS_SCHEMA, RUN_NESTED, KEY_COLUMNS)
    plans = {trial: plan_recordings(keys, known_of_trial(known.frame, trial), version, code, fresh) for trial in trials}
    return known.journal_state, plans


def known_of_trial(known: pd.DataFrame, trial: int) -> pd.DataFrame:
    """The known recordings of one trial, numbered from 0 (as a plan refers to its rows)."""
    trials = pd.to_numeric(known["trial"], errors="coerce")
    return known[(trials == trial).to_numpy(dtype=bool)].reset_index(drop=True)


def record_trial(
    project: Project,
    cases: StoredTable,
    positions: list[int],
    trial: int,
    code: CodeFingerprint,
    *,
    version: str,
    run_id: str,
    rows: RowBatches,
    journal_line: Callable[[dict], None],
    summary: RecordingSummary,
    on_recorded: Callable[[RecordedRun], None] | None,
    sandboxes: Sandboxes | None,
) -> None:
    """One trial of the cases at `positions`, each row journalled as it finishes."""
    if not positions:
        return
    recordings = record_each(
        system_spec(project), case_records(cases, positions), version=version,
        timeout_s=project.config.execution.timeout_s, sandboxes=sandboxes,
    )
    for run in recordings:
        run.recorded_by_run = run_id
        row = recording_row(run, code)
        row = {**row, "trial": trial, "recording_key": trial_recording_key(row, trial)}
        journal_line(row)
        rows.add(row)
        summary.failed += run.status != OK
        if on_recorded is not None:
            on_recorded(run)
