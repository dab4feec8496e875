"""Recording: each case run once on the system under test, journalled as it finishes, and
reused while its case digest, the system version and the system's code are unchanged.

The stored recordings are compared by their key columns only (no trajectory is read or
parsed to find out that nothing changed), and only the cases left to record become models.
Only what is left to record needs the system: a version whose system is gone still re-grades
from its stored recordings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import pandas as pd

from ..model.cases import CaseRecord
from ..model.config import Project
from ..model.errors import SystemVersionMismatch
from ..model.fingerprints import CodeFingerprint, row_key, system_code_fingerprint
from ..model.records import RecordedRun
from ..model.trajectory import Trajectory
from ..store.journal import Journal, sandbox_lock
from ..store.stored import StoredTable
from ..store.tables import (
    CASE_NESTED,
    CASES_SCHEMA,
    RECORDED_RUNS_SCHEMA,
    RUN_NESTED,
    RowBatches,
    case_table,
    null_to_none,
    rows_in_order,
    rows_of,
    with_values,
    runs_from_table,
)
from .reuse import KnownWork, WorkCounts, journal_state, known_work
from .sandboxes import Sandboxes, record_each
from .system import current_system_version, system_spec

TABLE = "recorded_runs"
# A recording is one case digest recorded by one run: its identity in the table and journal.
KEY_COLUMNS = ["case_digest", "recorded_by_run"]
OK = "ok"
RECORDED, RERECORDED = "recorded", "re-recorded"
# Cases turned into models at a time, as they are handed to the sandboxes.
MODELS_AT_ONCE = 500


@dataclass
class RecordingSummary(WorkCounts):
    """Cases recorded now, reused, failed, and dropped (stored, but no longer in the case set)."""

    dropped: int = 0

    def as_metadata(self, prefix: str = "cases") -> dict[str, int]:
        return {**super().as_metadata(prefix), f"{prefix}_dropped": self.dropped}

    def reasons(self, noun: str = "case") -> list[str]:
        return super().reasons(noun)


def check_partition_is_current_version(project: Project, partition_version: str, action: str = "record") -> None:
    """Refuse to record under a version the loaded system is not: that would mislabel runs."""
    loaded = current_system_version(project)
    if partition_version != loaded:
        raise SystemVersionMismatch(
            f"refusing to {action} partition {partition_version!r}: the loaded system "
            f"{project.config.system.callable} is version {loaded!r}. Record {loaded!r} instead, "
            f"or re-grade {partition_version!r} from its stored recordings."
        )


def recording_key(case_digest: str, version: str, code_fingerprint: str | None, run_id: str | None, status: str) -> str:
    """What verdicts and replays of a recording are keyed by: a new recording is a new key."""
    return row_key("recording", case_digest, version, code_fingerprint, run_id, status)


def recording_row(run: RecordedRun, code: CodeFingerprint) -> dict[str, Any]:
    """A finished recording as a table (and journal) row, with the code that made it."""
    return {
        **run.model_dump(mode="json"),
        "code_fingerprint": code.digest,
        "code_files": code.files_text,
        "recording_key": recording_key(run.case_digest, run.system_version, code.digest, run.recorded_by_run, run.status),
        **(run.trajectory or Trajectory()).model_usage(),
    }


# -- what is left to record --------------------------------------------------------------------


@dataclass
class RecordingPlan:
    """Per case (by position in the case table): the known recording it reuses, if any; and
    the cases left to record."""

    reuse: pd.Series  # case position -> row of `known` (NaN: record it)
    known: pd.DataFrame
    to_record: list[int]


def known_recordings(project: Project, version: str, journal: Journal, *, fresh: bool) -> KnownWork:
    """The stored recordings, then the journal's lines the table does not hold (a run cut
    short). A table that cannot be read is set aside with a warning: its journal holds every
    row it was written from. `fresh` needs nothing stored, so a broken table never stands in
    its way."""
    table = StoredTable() if fresh else StoredTable.at(project.root, TABLE, partition=version).readable(
        f"using the journal {journal.path} instead"
    )
    return known_work(table, journal, RecordedRun, RECORDED_RUNS_SCHEMA, RUN_NESTED, KEY_COLUMNS)


def plan_recordings(cases: pd.DataFrame, known: pd.DataFrame, version: str, code: CodeFingerprint, fresh: bool) -> RecordingPlan:
    """Reuse a known clean recording of the same case digest, version and code; else record."""
    usable = (known["status"] == OK) & (known["system_version"] == version) & (known["code_fingerprint"] == code.digest)
    digests = known.loc[usable.fillna(False).to_numpy(dtype=bool), "case_digest"]
    latest = digests[~digests.duplicated(keep="last")]
    reuse = cases["case_digest"].map(pd.Series(latest.index, index=latest.to_numpy()))
    if fresh:
        reuse[:] = float("nan")
    to_record = [int(position) for position in reuse.index[reuse.isna()]]
    return RecordingPlan(reuse=reuse, known=known, to_record=to_record)


def why_recorded(cases: pd.DataFrame, plan: RecordingPlan, code: CodeFingerprint, fresh: bool, summary: RecordingSummary) -> None:
    """Name, per case recorded now, why no stored recording of it could be reused."""
    if fresh:
        summary.because(RERECORDED, "--fresh asked for every case", len(plan.to_record))
        return
    columns = plan.known[["case_digest", "status", "code_fingerprint", "code_files"]]
    last = columns[~columns["case_digest"].duplicated(keep="last")]
    todo = cases.iloc[plan.to_record].merge(last, on="case_digest", how="left", indicator="found")
    known_ids = set(plan.known["case_id"])
    changes: dict[Any, str] = {}
    for case in rows_of(todo, ["case_id", "found", "status", "code_fingerprint", "code_files"]):
        if case.found == "left_only":
            summary.because(RECORDED, "case changed" if case.case_id in known_ids else "new case")
        elif case.status != OK:
            summary.because(RERECORDED, f"the last recording was not clean ({case.status})")
        elif case.code_fingerprint != code.digest:
            if case.code_files not in changes:
                changes[case.code_files] = code_change(code, case.code_files)
            summary.because(RERECORDED, changes[case.code_files])
        else:
            summary.because(RERECORDED, "recorded under another version")


def code_change(code: CodeFingerprint, stored_files: str | None) -> str:
    """`system code changed (app.py)`: the files whose content differs from the recording's."""
    if stored_files is None:
        return "system code changed (no code fingerprint stored with the recording)"
    changed = code.changes_since(json.loads(stored_files))
    shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
    return f"system code changed ({shown})" if changed else "system code changed"


# -- recording ----------------------------------------------------------------------------------


def record_case_table(
    project: Project,
    cases: StoredTable,
    *,
    version: str,
    run_id: str,
    fresh: bool = False,
    on_recorded: Callable[[RecordedRun], None] | None = None,
    sandboxes: Sandboxes | None = None,
    system: object | None = None,  # the launch's ResolvedSystem (accepted, not used yet)
) -> tuple[pd.DataFrame, RecordingSummary]:
    """The `recorded_runs` table for `cases` (sources then copies): every case not already
    recorded for this version and code is recorded now (all of them when `fresh`).

    Each recording is journalled as it finishes, so a run killed part-way loses nothing.
    With distributed `sandboxes` the cases spread over Dask workers (see sandboxes.py).
    The system is imported, and must be this partition's version, only when something is
    left to record: a version whose system is gone still re-grades from its recordings.
    """
    code = system_code_fingerprint(project)
    journal = Journal.for_partition(project.root, TABLE, version)
    if fresh:
        journal.clear()
    keys = cases.columns("case_id", "case_digest")
    known = known_recordings(project, version, journal, fresh=fresh)
    plan = plan_recordings(keys, known.frame, version, code, fresh)
    summary = RecordingSummary()
    new_rows = RowBatches(RECORDED_RUNS_SCHEMA, RUN_NESTED)
    if plan.to_record:
        check_partition_is_current_version(project, version)
        with sandbox_lock(project.root):
            if not fresh and journal_state(journal) != known.journal_state:
                # A run that held the sandbox before us recorded some already.
                known = known_recordings(project, version, journal, fresh=fresh)
                plan = plan_recordings(keys, known.frame, version, code, fresh)
            why_recorded(keys, plan, code, fresh, summary)
            to_record = case_records(cases, plan.to_record)
            recordings = record_each(
                system_spec(project), to_record, version=version,
                timeout_s=project.config.execution.timeout_s, sandboxes=sandboxes,
            )
            with journal.appending() as journal_line:
                for run in recordings:
                    run.recorded_by_run = run_id
                    row = recording_row(run, code)
                    journal_line(row)
                    new_rows.add(row)
                    summary.failed += run.status != OK
                    if on_recorded is not None:
                        on_recorded(run)
    frame = recorded_table(keys, plan, new_rows.frame())
    summary.new = new_rows.count
    summary.reused = len(keys) - new_rows.count
    stored = known.stored
    summary.dropped = len(set(null_to_none(stored["case_id"])) - set(null_to_none(keys["case_id"]))) if stored is not None else 0
    return frame, summary


def case_records(cases: StoredTable, positions: list[int]) -> Iterator[CaseRecord]:
    """The cases at `positions`, as models (only these are ever parsed), made a slice at a
    time as the sandboxes take them, so a large suite is never held as models all at once."""
    for start in range(0, len(positions), MODELS_AT_ONCE):
        rows = cases.rows(positions[start : start + MODELS_AT_ONCE], CASES_SCHEMA.names, CASE_NESTED)
        yield from (CaseRecord.model_validate(row) for row in rows)


def recorded_table(keys: pd.DataFrame, plan: RecordingPlan, new: pd.DataFrame) -> pd.DataFrame:
    """One row per case, in case order: its new recording, or the stored one it reuses, filed
    under this case's id (two cases may share a digest, e.g. identical rows, and each needs
    its own row)."""
    reused = plan.reuse.dropna()
    by_id = dict(zip(null_to_none(keys["case_id"]), keys.index))
    table = rows_in_order(
        [(plan.known, reused.astype(int), reused.index), (new, range(len(new)), [by_id[case_id] for case_id in null_to_none(new["case_id"])])],
        RECORDED_RUNS_SCHEMA,
    )
    return with_values(table, "case_id", null_to_none(keys["case_id"]))


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
    """`record_case_table` for cases in hand, as models (for scripts and tests)."""
    frame, summary = record_case_table(
        project, StoredTable.of(case_table(cases)), version=version, run_id=run_id, fresh=fresh,
        on_recorded=on_recorded, sandboxes=sandboxes,
    )
    return runs_from_table(frame), summary

