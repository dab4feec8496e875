"""The report's tables, and one pass over each a row group at a time (`streamed.StreamedTable`)
that keeps per case only what the page needs of every case: where its rows are, its panel's
key (a digest of the stored values the panel shows), the runs its panel links to and its
worst outcome; and for the page's head only counts and the failing verdicts it lists. A
panel's rows are read again (`HeldCases`) only for the panels rendered now, a batch at a time."""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from ..model.outcomes import PASS
from ..store.stored import StoredTable
from ..store.tables import CASE_NESTED, FAULT_REPLAY_NESTED, RUN_NESTED, VERDICT_NESTED, from_json_text
from .report_view import (
    FAILING,
    PANEL_CASE_FIELDS,
    PANEL_RUN_FIELDS,
    PANEL_RUN_LINK_FIELDS,
    PANEL_VERDICT_FIELDS,
    REPORT_REPLAY_FIELDS,
    REPORT_VALIDITY_FIELDS,
    WORST_FIRST,
    verdict_summary,
)
from .panels import panel_key
from .results import VersionResults
from .spend import VersionSpend, version_spend
from .streamed import StreamedTable

RANK = {outcome: index for index, outcome in enumerate(WORST_FIRST)}
UNRANKED = len(RANK)


@dataclass
class ReportTables:
    """What a version's report is written from: the cases (sources, then copies), recordings,
    verdicts and fault replays as streamed tables; the gate, slices and the copies' validity
    columns whole (a row per rule, per bucket, a few short columns per copy)."""

    version: str
    cases: StreamedTable
    runs: StreamedTable
    verdicts: StreamedTable
    replays: StreamedTable
    gate: pd.DataFrame | None
    slices: pd.DataFrame | None
    validity: pd.DataFrame | None
    spend: VersionSpend

    @classmethod
    def of_results(cls, results: VersionResults, replays: pd.DataFrame | None) -> "ReportTables":
        """A version's results as read whole (`oloproof report`), each table one group."""
        cases = results.case_table
        copies = None
        if "source_id" in cases.columns and set(REPORT_VALIDITY_FIELDS) <= set(cases.columns):
            copies = cases.loc[cases["source_id"].notna().to_numpy(dtype=bool), list(REPORT_VALIDITY_FIELDS)]
        return cls(
            version=results.version, cases=StreamedTable.of(StoredTable.of(cases)),
            runs=StreamedTable.of(StoredTable.of(results.run_table) if results.run_table is not None else None),
            verdicts=StreamedTable.of(StoredTable.of(results.verdict_table)),
            replays=StreamedTable.of(StoredTable.of(replays) if replays is not None else None),
            gate=results.gate_table, slices=results.slices, validity=copies if copies is not None and len(copies) else None,
            spend=version_spend(results.run_table),
        )

    @classmethod
    def stored(
        cls, project_root: Path, stored: dict[str, StoredTable], version: str, gate: pd.DataFrame | None,
        slices: pd.DataFrame | None,
    ) -> "ReportTables":
        """The stored tables as the gate stage has them (`store.reuse.stored_tables`), each
        read a row group at a time: the sources and the copies as two parts."""
        copies = stored["derived_cases"]
        validity = copies.columns(*REPORT_VALIDITY_FIELDS) if copies.exists else None
        return cls(
            version=version, cases=StreamedTable.of(StoredTable.at(project_root, "cases"), StoredTable.at(project_root, "derived_cases")),
            runs=StreamedTable.of(stored["recorded_runs"]), verdicts=StreamedTable.of(stored["verdicts"]),
            replays=StreamedTable.of(stored["fault_replays"]), gate=gate, slices=slices,
            validity=validity if validity is not None and len(validity) else None,
            spend=version_spend(None),  # the gate stage's report has always shown no model use
        )


@dataclass
class ReportScan:
    """Per case what the page needs of every case (see the module's words), from one pass
    over each table."""

    order: list[str] = field(default_factory=list)  # the case ids, sources then copies
    case_at: dict[str, int] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # copy -> its source
    run_at: dict[str, int] = field(default_factory=dict)
    # case -> its rows' positions: a range while they are contiguous (as stored, they are)
    verdicts_at: dict[str, range | list[int]] = field(default_factory=dict)
    replays_at: dict[str, range | list[int]] = field(default_factory=dict)
    worst: dict[str, int] = field(default_factory=dict)
    failing: list[dict[str, Any]] = field(default_factory=list)  # failing verdicts, in table order, as the head lists them
    criteria: set[str] = field(default_factory=set)
    recorded_by: dict[str, int] = field(default_factory=dict)  # run -> rows it made, in order of appearance
    replayed_by: dict[str, int] = field(default_factory=dict)
    judged_by: dict[str, int] = field(default_factory=dict)
    _digests: dict[str, dict[str, bytes]] = field(default_factory=dict, repr=False)  # table -> case -> digest (16 bytes)

    @classmethod
    def of(cls, tables: ReportTables) -> "ReportScan":
        scan = cls()
        scan._scan_cases(tables.cases)
        scan._scan_runs(tables.runs)
        scan._scan_verdicts(tables.verdicts)
        scan._scan_replays(tables.replays)
        return scan

    def _scan_cases(self, cases: StreamedTable) -> None:
        digests = self._digests["cases"] = {}
        for start, (case_ids, source_ids, *shown) in cases.column_groups(PANEL_CASE_FIELDS):
            case_ids = interned(case_ids)
            for offset, (case_id, source_id, row) in enumerate(zip(case_ids, source_ids, zip(case_ids, source_ids, *shown))):
                if case_id not in self.case_at:
                    self.order.append(case_id)
                self.case_at[case_id] = start + offset
                if source_id:
                    self.sources[case_id] = source_id
                digests[case_id] = short_digest(repr(row))

    def _scan_runs(self, runs: StreamedTable) -> None:
        digests = self._digests["runs"] = {}
        for start, (case_ids, recorded_by, *shown) in runs.column_groups(["case_id", "recorded_by_run", *PANEL_RUN_FIELDS]):
            case_ids = interned(case_ids)
            status = shown[PANEL_RUN_FIELDS.index("status")]
            for offset, (case_id, run_id, row, ended) in enumerate(zip(case_ids, recorded_by, zip(*shown), status)):
                self.run_at[case_id] = start + offset
                digests[case_id] = short_digest(repr(row))
                if ended != "ok":
                    self.worst[case_id] = min(self.worst.get(case_id, UNRANKED), RANK[FAILING[1]])
                if run_id:
                    self.recorded_by[run_id] = self.recorded_by.get(run_id, 0) + 1

    def _scan_verdicts(self, verdicts: StreamedTable) -> None:
        shown_names = [name for name in PANEL_VERDICT_FIELDS if name not in PANEL_RUN_LINK_FIELDS]
        hashed: dict[str, Any] = {}
        at_outcome = shown_names.index("outcome")
        for start, columns in verdicts.column_groups([*shown_names, *PANEL_RUN_LINK_FIELDS]):
            shown, links = columns[: len(shown_names)], columns[len(shown_names) :]
            for offset, (row, linked) in enumerate(zip(zip(*shown), zip(*links))):
                case_id, criterion, outcome = interned([row[0]])[0], row[1], row[at_outcome]
                if case_id not in hashed:
                    hashed[case_id] = hashlib.sha256()
                hashed[case_id].update(repr(row).encode("utf-8"))
                add_position(self.verdicts_at, case_id, start + offset)
                self.worst[case_id] = min(self.worst.get(case_id, UNRANKED), RANK.get(outcome, UNRANKED))
                self.criteria.add(criterion)
                judged_by = linked[PANEL_RUN_LINK_FIELDS.index("judged_by_run")]
                if judged_by:
                    self.judged_by[judged_by] = self.judged_by.get(judged_by, 0) + 1
                if outcome in FAILING:
                    self.failing.append(failing_row(dict(zip(shown_names, row))))
        self._digests["verdicts"] = {case_id: digest.digest()[:16] for case_id, digest in hashed.items()}

    def _scan_replays(self, replays: StreamedTable) -> None:
        shown_names = [name for name in REPORT_REPLAY_FIELDS if name != "replayed_by_run"]
        hashed: dict[str, Any] = {}
        for start, (*shown, replayed_by) in replays.column_groups([*shown_names, "replayed_by_run"]):
            for offset, (row, run_id) in enumerate(zip(zip(*shown), replayed_by)):
                case_id = interned([row[0]])[0]
                if case_id not in hashed:
                    hashed[case_id] = hashlib.sha256()
                hashed[case_id].update(repr(row).encode("utf-8"))
                add_position(self.replays_at, case_id, start + offset)
                if run_id:
                    self.replayed_by[run_id] = self.replayed_by.get(run_id, 0) + 1
        self._digests["replays"] = {case_id: digest.digest()[:16] for case_id, digest in hashed.items()}

    def failing_first(self) -> tuple[list[str], int]:
        """The case ids as the report shows them: each case whose worst outcome is FAIL, then
        MISSING (or whose recording failed), then the rest, each in the case set's order; and
        how many fail."""
        passing = RANK[PASS]
        ordered = sorted(self.order, key=lambda case_id: min(self.worst.get(case_id, UNRANKED), passing))
        return ordered, sum(self.worst.get(case_id, UNRANKED) < passing for case_id in self.order)

    def panel_key(self, case_id: str) -> str:
        """The key a case's panel is kept under: the stored values it shows and the code that
        renders it (not the runs it links to: filled in as it is written)."""
        digests, source_id = self._digests, self.sources.get(case_id)
        shown = (
            digests["cases"][case_id], digests["runs"].get(case_id), digests["verdicts"].get(case_id),
            digests["replays"].get(case_id),
            digests["runs"].get(source_id) if source_id else None,  # a copy's pair shows its source's calls
        )
        return panel_key(*(None if digest is None else digest.hex() for digest in shown))

    def run_ids(self, tables: ReportTables, case_ids: list[str]) -> dict[str, list[str | None]]:
        """The runs each case's panel links to, each verdict's `PANEL_RUN_LINK_FIELDS` in turn:
        read again for a batch (not held per case)."""
        rows = tables.verdicts.rows(
            (position for case_id in case_ids for position in self.verdicts_at.get(case_id, ())), PANEL_RUN_LINK_FIELDS
        )
        return {
            case_id: [rows[position][name] for position in self.verdicts_at.get(case_id, ()) for name in PANEL_RUN_LINK_FIELDS]
            for case_id in case_ids
        }


def interned(case_ids: list[str | None]) -> list[str | None]:
    """Each case id as one string object, however many tables' indexes name it."""
    return [None if case_id is None else sys.intern(case_id) for case_id in case_ids]


def short_digest(text: str) -> bytes:
    """128 bits of a row's SHA-256 (as `row_key`), kept as bytes: half the memory of its hex."""
    return hashlib.sha256(text.encode("utf-8")).digest()[:16]


def add_position(index: dict[str, range | list[int]], case_id: str, position: int) -> None:
    """The case's rows' positions with `position` added: a range while they follow one
    another (48 bytes a case, not a Python int a row), else a list."""
    found = index.get(case_id)
    if found is None:
        index[case_id] = range(position, position + 1)
    elif isinstance(found, range) and found.stop == position:
        index[case_id] = range(found.start, position + 1)
    elif isinstance(found, range):
        index[case_id] = [*found, position]
    else:
        found.append(position)


def failing_row(verdict: dict[str, Any]) -> dict[str, Any]:
    """What the page's head shows of a failing verdict (its details only as the line saying
    what it found)."""
    verdict = {**verdict, "details": from_json_text(verdict["details"])}
    return {
        "case_id": verdict["case_id"], "criterion": verdict["criterion"], "outcome": verdict["outcome"],
        "reason": verdict["reason"], "summary": verdict_summary(verdict),
    }


class HeldCases:
    """The rows a batch of panels shows, read from the tables' row groups, as `case_panel`
    asks for them (`VersionResults`' `case`, `recording`, `verdicts_of`), and their fault
    replays by (case, criterion), the last row of each counting."""

    def __init__(self, tables: ReportTables, scan: ReportScan, case_ids: Iterable[str]):
        self.version = tables.version
        case_ids = [case_id for case_id in case_ids if case_id in scan.case_at]
        self._scan = scan
        self._cases = tables.cases.rows((scan.case_at[case_id] for case_id in case_ids), PANEL_CASE_FIELDS, CASE_NESTED)
        recorded = [*case_ids, *(scan.sources[case_id] for case_id in case_ids if case_id in scan.sources)]
        self._runs = tables.runs.rows((scan.run_at[case_id] for case_id in recorded if case_id in scan.run_at), PANEL_RUN_FIELDS, RUN_NESTED)
        self._verdicts = tables.verdicts.rows(
            (position for case_id in case_ids for position in scan.verdicts_at.get(case_id, ())), PANEL_VERDICT_FIELDS, VERDICT_NESTED
        )
        replays = tables.replays.rows(
            (position for case_id in case_ids for position in scan.replays_at.get(case_id, ())), REPORT_REPLAY_FIELDS, FAULT_REPLAY_NESTED
        )
        self.replays = {(row["case_id"], row["criterion"]): row for _, row in sorted(replays.items())}

    def case(self, case_id: str, names: Iterable[str] | None = None) -> dict[str, Any] | None:
        position = self._scan.case_at.get(case_id)
        return None if position is None else self._cases.get(position)

    def recording(self, case_id: str, names: Iterable[str] | None = None) -> dict[str, Any] | None:
        position = self._scan.run_at.get(case_id)
        return None if position is None else self._runs.get(position)

    def verdicts_of(self, case_id: str, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
        return [self._verdicts[position] for position in self._scan.verdicts_at.get(case_id, ())]
