"""Recording: each case run once on the system under test, journalled as it finishes, and
reused while its case digest, the system version and the system's code are unchanged.

The stored recordings are compared by their key columns only (no trajectory is read or
parsed to find out that nothing changed), and only the cases left to record become models.
Only what is left to record needs the system: a version whose system is gone still re-grades
from its stored recordings. A use of the incremental stage (run/stage.py); later trials
(run/trials.py) are another.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa

from ..model.cases import CaseRecord
from ..model.config import Project, ProjectConfig
from ..model.fingerprints import CodeFingerprint, row_key, system_code_fingerprint
from ..model.records import RecordedRun, RecordingRow
from ..model.trials import FIRST_TRIAL
from ..store.assembly import AssembledTable
from ..store.decoding import MODELS_AT_ONCE
from ..store.spill import SpilledRowBatches
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
from .budget import Spend, cost_usd
from .simulated_user import simulator_digest
from .reuse import KnownWork, WorkCounts
from .sandboxes import RECORD, Sandboxes, lost_recording
from .stage import Left, StoredWork, run_stage
from .channel import StoredCase
from .system import ResolvedSystem

TABLE = "recorded_runs"
# What recordings are planned from: whether a stored one is reused is decided by these alone
# (no trajectory is read); the rest stays in the stored file until the table is written.
PLAN_COLUMNS = ("case_id", "case_digest", "recorded_by_run", "system_version", "status", "code_fingerprint", "code_files", "simulator_digest")
# A recording is one case digest recorded by one run: its identity in the table and journal.
RECORDINGS = StoredWork(
    TABLE, ("case_digest", "recorded_by_run"), RECORDED_RUNS_SCHEMA, tuple(RUN_NESTED), RecordedRun, plan_columns=PLAN_COLUMNS
)
# The columns of the table held whole as it is assembled (its metadata reads them); the other
# text, trajectories and states among it, is taken a row group at a time as it is written.
WHOLE_COLUMNS = ("case_id", "status", *(field.name for field in RECORDED_RUNS_SCHEMA if not pa.types.is_string(field.type)))
OK = "ok"
RECORDED, RERECORDED = "recorded", "re-recorded"


@dataclass
class RecordingSummary(WorkCounts):
    """Cases recorded now, reused, failed, and dropped (stored, but no longer in the case set)."""

    dropped: int = 0

    def as_metadata(self, prefix: str = "cases") -> dict[str, int]:
        return {**super().as_metadata(prefix), f"{prefix}_dropped": self.dropped}

    def reasons(self, noun: str = "case") -> list[str]:
        return super().reasons(noun)


def recording_key(
    case_digest: str, version: str, code_fingerprint: str | None, run_id: str | None, status: str, simulator: str | None = None
) -> str:
    """What verdicts and replays of a recording are keyed by: a new recording is a new key."""
    parts = (case_digest, version, code_fingerprint, run_id, status) + ((simulator,) if simulator is not None else ())
    return row_key("recording", *parts)


def recording_row(
    run: RecordingRow, run_id: str | None, code: CodeFingerprint, code_files: str, config: ProjectConfig, simulator: str | None
) -> dict[str, Any]:
    """A finished recording as a table (and journal) row, its nested values the JSON text its
    worker sent: with the run, the code (`code_files`: with the modules found imported with it)
    and the simulated user that made it, and what its model usage cost by `pricing`."""
    columns = run.__dict__  # the model's fields, read as they are (no copy per case)
    added = {
        "recorded_by_run": run_id,
        "code_fingerprint": code.digest,
        "code_files": code_files,
        "recording_key": recording_key(run.case_digest, run.system_version, code.digest, run_id, run.status, simulator),
        "cost_usd": cost_usd(config, columns),
        "simulator_digest": simulator,
    }
    return {name: added[name] if name in added else columns[name] for name in RECORDED_RUNS_SCHEMA.names}


class CodeFilesText:
    """The `code_files` of a stage's recordings: the same for nearly every case a worker
    records, so each distinct text is made once (per set of modules found imported) rather
    than sorted and encoded per case."""

    def __init__(self, code: CodeFingerprint):
        self.code = code
        self._texts: dict[tuple[tuple[str, str], ...], str] = {}

    def __call__(self, found: dict[str, str] | None) -> str:
        key = tuple(found.items()) if found else ()
        text = self._texts.get(key)
        if text is None:
            text = self._texts[key] = self.code.with_found(found).files_text
        return text


def same_simulator(known: pd.DataFrame, simulator: str | None) -> pd.Series:
    """Per known recording, whether it was played with this simulated user (or both none);
    a table stored before the column existed played with none."""
    stored = known["simulator_digest"] if "simulator_digest" in known.columns else pd.Series(None, index=known.index)
    return stored.fillna("").astype(str) == (simulator or "")


# -- what is left to record --------------------------------------------------------------------


@dataclass
class RecordingPlan:
    """Per case (by position in the case table): the known recording it reuses, if any; and
    the cases left to record."""

    reuse: pd.Series  # case position -> row of `known` (NaN: record it)
    known: pd.DataFrame
    to_record: list[int]


def plan_recordings(
    cases: pd.DataFrame, known: pd.DataFrame, version: str, code: CodeFingerprint, fresh: bool, root: Path,
    simulator: str | None = None,
) -> RecordingPlan:
    """Reuse a known clean recording of the same case digest, version, code (the modules found
    imported with it unchanged too) and simulated user; else record."""
    usable = (known["status"] == OK) & (known["system_version"] == version) & (known["code_fingerprint"] == code.digest)
    usable &= same_simulator(known, simulator)
    usable = usable.fillna(False).astype(bool)
    if usable.any():
        usable[usable] = holds_for_each(code, known.loc[usable, "code_files"], root)
    digests = known.loc[usable.to_numpy(dtype=bool), "case_digest"]
    latest = digests[~digests.duplicated(keep="last")]
    reuse = cases["case_digest"].map(pd.Series(latest.index, index=latest.to_numpy()))
    if fresh:
        reuse[:] = float("nan")
    to_record = [int(position) for position in reuse.index[reuse.isna()]]
    return RecordingPlan(reuse=reuse, known=known, to_record=to_record)


def holds_for_each(code: CodeFingerprint, files: pd.Series, root: Path) -> np.ndarray:
    """Per stored `code_files` text, whether the code it names still holds: each distinct text
    (nearly every recording carries the same few KiB) checked, and turned into text, once."""
    codes, distinct = pd.factorize(files, use_na_sentinel=False)
    return np.asarray(code.holds_for(null_to_none(pd.Series(distinct, dtype=object)), root), dtype=bool)[codes]


def why_recorded(
    cases: pd.DataFrame, plan: RecordingPlan, code: CodeFingerprint, fresh: bool, summary: RecordingSummary, root: Path,
    simulator: str | None = None,
) -> None:
    """Name, per case recorded now, why no stored recording of it could be reused."""
    if fresh:
        summary.because(RERECORDED, "--fresh asked for every case", len(plan.to_record))
        return
    columns = plan.known[["case_digest", "status", "code_fingerprint", "code_files"]].assign(
        same_simulator=same_simulator(plan.known, simulator)
    )
    last = columns[~columns["case_digest"].duplicated(keep="last")]
    todo = cases.iloc[plan.to_record].merge(last, on="case_digest", how="left", indicator="found")
    known_ids = set(plan.known["case_id"])
    changes: dict[Any, str] = {}
    holds: dict[str | None, bool] = {}

    def changed_found(files: str | None) -> bool:
        """A module found imported with the recording has changed since (each text checked once)."""
        if files not in holds:
            holds[files] = code.holds_for([files], root)[0]
        return not holds[files]

    for case in rows_of(todo, ["case_id", "found", "status", "code_fingerprint", "code_files", "same_simulator"]):
        if case.found == "left_only":
            summary.because(RECORDED, "case changed" if case.case_id in known_ids else "new case")
        elif case.status != OK:
            summary.because(RERECORDED, f"the last recording was not clean ({case.status})")
        elif case.code_fingerprint != code.digest or changed_found(case.code_files):
            if case.code_files not in changes:
                changes[case.code_files] = code_change(code, case.code_files, root)
            summary.because(RERECORDED, changes[case.code_files])
        elif not case.same_simulator:
            summary.because(RERECORDED, "simulated user changed")
        else:
            summary.because(RERECORDED, "recorded under another version")


def code_change(code: CodeFingerprint, stored_files: str | None, root: Path) -> str:
    """`system code changed (app.py)`: the files whose content differs from the recording's."""
    if stored_files is None:
        return "system code changed (no code fingerprint stored with the recording)"
    changed = code.changes_since(json.loads(stored_files), root)
    shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
    return f"system code changed ({shown})" if changed else "system code changed"


# -- recording ----------------------------------------------------------------------------------


@dataclass
class Recordings:
    """A recording stage's plan: per trial, what it reuses and what is left to record; the
    rows recorded now; and the counts."""

    known: KnownWork
    plans: dict[int, RecordingPlan]
    new: dict[int, RowBatches]
    summary: RecordingSummary = field(default_factory=RecordingSummary)


@dataclass
class RecordingStage:
    """Trial 1 of every case, into `recorded_runs`: the cases not already recorded for this
    version and code are recorded now (all of them when `fresh`). Later trials
    (run/trials.py) are this stage with a trial index on each row."""

    project: Project
    cases: StoredTable
    version: str
    run_id: str
    fresh: bool = False
    on_recorded: Callable[[RecordingRow], None] | None = None
    stored: StoredWork = RECORDINGS
    trials: range = range(FIRST_TRIAL, FIRST_TRIAL + 1)

    def __post_init__(self) -> None:
        self.code = system_code_fingerprint(self.project)
        self.code_files = CodeFilesText(self.code)
        self.simulator = simulator_digest(self.project.config.system.simulated_user)
        self.keys = self.cases.columns("case_id", "case_digest")

    def action(self, left: int) -> str:
        return "record"

    def plan(self, known: KnownWork) -> Recordings:
        plans = {
            trial: plan_recordings(
                self.keys, self.known_of(known.frame, trial), self.version, self.code, self.fresh, self.project.root, self.simulator
            )
            for trial in self.trials
        }
        recordings = Recordings(known, plans, {trial: self.new_rows() for trial in self.trials})
        for trial, plan in plans.items():
            self.explain(trial, plan, recordings.summary)
        return recordings

    def new_rows(self) -> RowBatches:
        """Where the rows recorded now go: written to a file of their own as they come (a
        recording carries its trajectory and state, a few KiB), read back as the table is."""
        return SpilledRowBatches(self.stored.schema, RUN_NESTED)

    def known_of(self, known: pd.DataFrame, trial: int) -> pd.DataFrame:
        """The known recordings of one trial (the whole table holds trial 1)."""
        return known

    def explain(self, trial: int, plan: RecordingPlan, summary: RecordingSummary) -> None:
        why_recorded(self.keys, plan, self.code, self.fresh, summary, self.project.root, self.simulator)

    def left(self, recordings: Recordings) -> int:
        return sum(len(plan.to_record) for plan in recordings.plans.values())

    def work(self, recordings: Recordings, system: ResolvedSystem) -> Left:
        """Each case left, tagged with its trial, in trial then case order."""
        items = (
            (trial, case) for trial, plan in recordings.plans.items() for case in stored_cases(self.cases, plan.to_record)
        )
        return Left(items, RECORD)

    def finished(self, recordings: Recordings, item: tuple[int, StoredCase], result: Any) -> dict[str, Any]:
        trial, case = item
        run = lost_recording(case, result, self.version)
        columns = recording_row(run, self.run_id, self.code, self.code_files(run.found_files), self.project.config, self.simulator)
        row = self.row(columns, trial)
        recordings.new[trial].add_encoded(row)
        recordings.summary.failed += run.status != OK
        if self.on_recorded is not None:
            self.on_recorded(run)
        return row

    def row(self, row: dict[str, Any], trial: int) -> dict[str, Any]:
        """A recording's row as this stage's table stores it."""
        return row

    def assemble(self, recordings: Recordings) -> tuple[AssembledTable, RecordingSummary]:
        self.cases.forget()  # the columns the cases recorded were made from (the keys are kept apart)
        summary = recordings.summary
        new = recordings.new[FIRST_TRIAL]
        frame = recorded_rows(self.keys, recordings.plans[FIRST_TRIAL], recordings.known, new.rows())
        summary.new = new.count
        summary.reused = len(self.keys) - new.count
        stored = recordings.known.stored
        dropped = set(null_to_none(stored["case_id"])) - set(null_to_none(self.keys["case_id"])) if stored is not None else set()
        summary.dropped = len(dropped)
        return frame, summary


def stored_cases(cases: StoredTable, positions: list[int]) -> Iterator[StoredCase]:
    """The cases at `positions`, in that order, as their worker reads them, read a slice at
    a time: each stored row as one JSON object, its nested columns the JSON text they are
    stored as. No case becomes a model here; the worker validates each."""
    for start in range(0, len(positions), MODELS_AT_ONCE):
        for row in cases.rows(positions[start : start + MODELS_AT_ONCE], CASES_SCHEMA.names):
            yield StoredCase(row["case_id"], row["case_digest"], case_text(row))


def case_text(row: dict[str, Any]) -> str:
    """A stored case row as the JSON object of its CaseRecord (nested columns are JSON text)."""
    return "{" + ",".join(f"{_MEMBER_NAMES[name]}{_member_text(name, value)}" for name, value in row.items()) + "}"


_MEMBER_NAMES = {name: json.dumps(name) + ":" for name in CASES_SCHEMA.names}


def _member_text(name: str, value: Any) -> str:
    if value is None:
        return "null"
    if name in CASE_NESTED:
        return value
    return encode_basestring_ascii(value) if isinstance(value, str) else json.dumps(value)


def record_case_rows(
    project: Project,
    cases: StoredTable,
    *,
    version: str,
    run_id: str,
    fresh: bool = False,
    on_recorded: Callable[[RecordingRow], None] | None = None,
    sandboxes: Sandboxes | None = None,
    system: ResolvedSystem | None = None,
) -> tuple[AssembledTable, RecordingSummary]:
    """The `recorded_runs` table for `cases` (sources then copies), to write: every case not
    already recorded for this version and code is recorded now (all of them when `fresh`).

    Each recording is journalled as it finishes, so a run killed part-way loses nothing.
    With distributed `sandboxes` the cases spread over Dask workers (see sandboxes.py).
    `system` is the launch's (run/system.py); only when something is left to record must it
    be this partition's version (resolved now when not given)."""
    stage = RecordingStage(project, cases, version, run_id, fresh, on_recorded)
    spend = Spend.of(project.config)
    return run_stage(stage, project, version=version, fresh=fresh, system=system, sandboxes=sandboxes, spend=spend)


def record_case_table(project: Project, cases: StoredTable, **run: Any) -> tuple[pd.DataFrame, RecordingSummary]:
    """`record_case_rows`, the table as a frame (for scripts and tests)."""
    table, summary = record_case_rows(project, cases, **run)
    return table.frame(), summary


def recorded_rows(keys: pd.DataFrame, plan: RecordingPlan, known: KnownWork, new: pa.Table | StoredTable) -> AssembledTable:
    """`recorded_table`, with the reused rows left in the stored file (and the journal's
    rows) until the table is written: planned from `known`'s few columns."""
    reused = plan.reuse.dropna().astype(int)
    from_file = reused[reused < known.stored_rows]
    from_journal = reused[reused >= known.stored_rows]
    by_id = dict(zip(null_to_none(keys["case_id"]), keys.index))
    new_case_ids = new.column("case_id").to_pylist() if isinstance(new, pa.Table) else null_to_none(new.columns("case_id")["case_id"])
    parts = [
        (known.table, from_file.to_numpy(), from_file.index),
        (known.journaled, from_journal.to_numpy() - known.stored_rows, from_journal.index),
        (new, range(len(new)), [by_id[case_id] for case_id in new_case_ids]),
    ]
    return AssembledTable(RECORDED_RUNS_SCHEMA, parts, WHOLE_COLUMNS, column_values={"case_id": null_to_none(keys["case_id"])})


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
    on_recorded: Callable[[RecordingRow], None] | None = None,
    sandboxes: Sandboxes | None = None,
    system: ResolvedSystem | None = None,
) -> tuple[list[RecordedRun], RecordingSummary]:
    """`record_case_table` for cases in hand, as models (for scripts and tests)."""
    frame, summary = record_case_table(
        project, StoredTable.of(case_table(cases)), version=version, run_id=run_id, fresh=fresh,
        on_recorded=on_recorded, sandboxes=sandboxes, system=system,
    )
    return runs_from_table(frame), summary
