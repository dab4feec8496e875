"""The report's tables, and one pass over each a row group at a time (`streamed.StreamedTable`)
that keeps per case only what the page needs of every case: where its rows are, digests of
the stored values its panel shows (its panel's key) and its worst outcome; and for the page's
head only counts, the failing verdicts it lists and the runs each verdict links to (as
numbers). A panel's rows are read again (`HeldCases`) only for the panels rendered now, a
batch at a time."""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import pandas as pd

from ..model.outcomes import MISSING, PASS
from ..store.stored import StoredTable
from ..store.tables import CASE_NESTED, FAULT_REPLAY_NESTED, RUN_NESTED, VERDICT_NESTED, from_json_text
from .report_view import (
    FAILING,
    PANEL_CASE_FIELDS,
    PANEL_RUN_FIELDS,
    PANEL_RUN_LINK_FIELDS,
    PANEL_VERDICT_SHOWN,
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


class RowSpans:
    """Each case's rows in one table (by case number): where they start and how many, while
    they follow one another (as stored, they do); a case whose rows are apart keeps a list."""

    def __init__(self, cases: int):
        self.first = np.full(cases, -1, dtype=np.int64)
        self.count = np.zeros(cases, dtype=np.int64)
        self.apart: dict[int, list[int]] = {}

    def add(self, number: int, position: int) -> None:
        if number in self.apart:
            self.apart[number].append(position)
        elif self.count[number] == 0:
            self.first[number], self.count[number] = position, 1
        elif self.first[number] + self.count[number] == position:
            self.count[number] += 1
        else:
            first = int(self.first[number])
            self.apart[number] = [*range(first, first + int(self.count[number])), position]

    def add_run(self, number: int, first: int, count: int) -> None:
        if number not in self.apart and self.count[number] == 0:
            self.first[number], self.count[number] = first, count
        else:
            for position in range(first, first + count):
                self.add(number, position)

    def positions(self, number: int | None) -> range | list[int]:
        if number is None:
            return range(0)
        if number in self.apart:
            return self.apart[number]
        first = int(self.first[number])
        return range(first, first + int(self.count[number]))


# A case's digests, one slot per table whose rows its panel shows (all zero: no row).
DIGESTED = ("cases", "runs", "verdicts", "replays")
DIGEST_BYTES = 16


class ReportScan:
    """Per case what the page needs of every case (see the module's words), from one pass
    over each table, held by case number in arrays (a few dozen bytes a case, plus its id)."""

    def __init__(self) -> None:
        self.order: list[str] = []  # the case ids, sources then copies
        self.number: dict[str, int] = {}  # case id -> its number (its place in `order`)
        self.failing: list[dict[str, Any]] = []  # failing verdicts, in table order, as the head lists them
        self.criteria: set[str] = set()
        self.recorded_by: dict[str, int] = {}  # run -> rows it made, in order of appearance
        self.replayed_by: dict[str, int] = {}
        self.judged_by: dict[str, int] = {}
        # The runs each verdict row links to (`PANEL_RUN_LINK_FIELDS`), by row position (the
        # pass reads every row in order): the number of each in `_linked`, four bytes a link,
        # so a kept panel's links are not read again.
        self._links = [array("i") for _ in PANEL_RUN_LINK_FIELDS]
        self._linked: list[str | None] = []

    @classmethod
    def of(cls, tables: ReportTables) -> "ReportScan":
        scan = cls()
        scan._scan_cases(tables.cases)
        cases = len(scan.order)
        scan._run_at = np.full(cases, -1, dtype=np.int64)
        scan._worst = np.full(cases, UNRANKED, dtype=np.int8)
        scan._verdicts, scan._replays = RowSpans(cases), RowSpans(cases)
        scan._scan_runs(tables.runs)
        scan._scan_verdicts(tables.verdicts)
        scan._scan_replays(tables.replays)
        return scan

    def _scan_cases(self, cases: StreamedTable) -> None:
        positions, sources, digests = [], [], bytearray()
        for start, (case_ids, source_ids, *shown) in cases.column_groups(PANEL_CASE_FIELDS):
            for offset, row in enumerate(zip(case_ids, source_ids, *shown)):
                case_id = sys.intern(row[0])
                number = self.number.get(case_id)
                if number is None:
                    number = self.number[case_id] = len(self.order)
                    self.order.append(case_id)
                    positions.append(0)
                    sources.append(None)
                    digests += bytes(DIGEST_BYTES * len(DIGESTED))
                positions[number], sources[number] = start + offset, row[1] or None
                self._put_digest(digests, number, "cases", short_digest(repr(row)))
        self._case_at = np.array(positions, dtype=np.int64)
        self._source = np.array([-1 if source is None else self.number.get(source, -1) for source in sources], dtype=np.int64)
        self._digests = digests

    @staticmethod
    def _put_digest(digests: bytearray, number: int, table: str, digest: bytes) -> None:
        at = (number * len(DIGESTED) + DIGESTED.index(table)) * DIGEST_BYTES
        digests[at : at + DIGEST_BYTES] = digest

    def _digest(self, number: int, table: str) -> bytes | None:
        at = (number * len(DIGESTED) + DIGESTED.index(table)) * DIGEST_BYTES
        digest = bytes(self._digests[at : at + DIGEST_BYTES])
        return None if digest == bytes(DIGEST_BYTES) else digest

    def _scan_runs(self, runs: StreamedTable) -> None:
        at_status = PANEL_RUN_FIELDS.index("status")
        for start, (case_ids, recorded_by, *shown) in runs.column_groups(["case_id", "recorded_by_run", *PANEL_RUN_FIELDS]):
            for offset, (case_id, run_id, row) in enumerate(zip(case_ids, recorded_by, zip(*shown))):
                if run_id:
                    self.recorded_by[run_id] = self.recorded_by.get(run_id, 0) + 1
                number = self.number.get(case_id)
                if number is None:  # a recording of no case the report shows
                    continue
                self._run_at[number] = start + offset
                self._put_digest(self._digests, number, "runs", short_digest(repr(row)))
                if row[at_status] != "ok":
                    self._worst[number] = min(self._worst[number], RANK[MISSING])

    def _scan_verdicts(self, verdicts: StreamedTable) -> None:
        """A slice of rows at a time: what is counted, by the column; what is per case, by each
        run of one case's rows (a case's verdicts follow one another)."""
        shown_names = PANEL_VERDICT_SHOWN
        at_outcome, at_judged = shown_names.index("outcome"), PANEL_RUN_LINK_FIELDS.index("judged_by_run")
        rows = RowDigests(self, "verdicts")
        linked: dict[str | None, int] = {}
        for start, columns in verdicts.column_groups([*shown_names, *PANEL_RUN_LINK_FIELDS]):
            shown, links = columns[: len(shown_names)], columns[len(shown_names) :]
            case_ids, outcomes = shown[0], shown[at_outcome]
            self.criteria.update(shown[1])
            for run_id, count in Counter(links[at_judged]).items():
                if run_id:
                    self.judged_by[run_id] = self.judged_by.get(run_id, 0) + count
            for numbers, run_ids in zip(self._links, links):
                for run_id in dict.fromkeys(run_ids).keys() - linked.keys():
                    linked[run_id] = len(linked)
                numbers.extend(map(linked.__getitem__, run_ids))
            for at, outcome in enumerate(outcomes):
                if outcome in FAILING:
                    self.failing.append(failing_row({name: values[at] for name, values in zip(shown_names, shown)}))
            texts = list(map(repr, zip(*shown)))  # each row as its case's digest takes it
            ranks = [RANK.get(outcome, UNRANKED) for outcome in outcomes]
            for first, end in case_runs(case_ids):
                number = rows.add_text(case_ids[first], "".join(texts[first:end]))
                if number is not None:
                    self._verdicts.add_run(number, start + first, end - first)
                    self._worst[number] = min(self._worst[number], min(ranks[first:end]))
        rows.close()
        self._linked = list(linked)

    def _scan_replays(self, replays: StreamedTable) -> None:
        shown_names = [name for name in REPORT_REPLAY_FIELDS if name != "replayed_by_run"]
        rows = RowDigests(self, "replays")
        for start, (*shown, replayed_by) in replays.column_groups([*shown_names, "replayed_by_run"]):
            for offset, (row, run_id) in enumerate(zip(zip(*shown), replayed_by)):
                if run_id:
                    self.replayed_by[run_id] = self.replayed_by.get(run_id, 0) + 1
                number = rows.add(row[0], row)
                if number is not None:
                    self._replays.add(number, start + offset)
        rows.close()

    def failing_first(self) -> tuple[list[str], int]:
        """The case ids as the report shows them: each case whose worst outcome is FAIL, then
        MISSING (or whose recording failed), then the rest, each in the case set's order; and
        how many fail."""
        rank = np.minimum(self._worst, RANK[PASS])
        ordered = np.argsort(rank, kind="stable").tolist()
        return [self.order[number] for number in ordered], int((self._worst < RANK[PASS]).sum())

    def case_position(self, case_id: str) -> int | None:
        number = self.number.get(case_id)
        return None if number is None else int(self._case_at[number])

    def run_position(self, case_id: str | None) -> int | None:
        number = self.number.get(case_id) if case_id is not None else None
        return None if number is None or self._run_at[number] < 0 else int(self._run_at[number])

    def source_of(self, case_id: str) -> str | None:
        number = self.number.get(case_id)
        source = -1 if number is None else int(self._source[number])
        return None if source < 0 else self.order[source]

    def verdict_positions(self, case_id: str) -> range | list[int]:
        return self._verdicts.positions(self.number.get(case_id))

    def replay_positions(self, case_id: str) -> range | list[int]:
        return self._replays.positions(self.number.get(case_id))

    def panel_key(self, case_id: str) -> str:
        """The key a case's panel is kept under: the stored values it shows and the code that
        renders it (not the runs it links to: filled in as it is written)."""
        number = self.number[case_id]
        source = int(self._source[number])
        shown = (
            *(self._digest(number, table) for table in DIGESTED),
            self._digest(source, "runs") if source >= 0 else None,  # a copy's pair shows its source's calls
        )
        return panel_key(*(None if digest is None else digest.hex() for digest in shown))

    def run_ids(self, case_id: str) -> tuple[str | None, ...]:
        """The runs the case's panel links to, each verdict's `PANEL_RUN_LINK_FIELDS` in turn."""
        linked = self._linked
        return tuple([linked[numbers[position]] for position in self.verdict_positions(case_id) for numbers in self._links])


class RowDigests:
    """A digest of each case's rows in one table, in order: rows of one case follow one
    another (as stored), so one digest is open at a time; a case met again later goes on from
    the digest it had."""

    def __init__(self, scan: ReportScan, table: str):
        self.scan, self.table = scan, table
        self.number: int | None = None
        self.hashed: Any = None

    def add(self, case_id: str, row: tuple[Any, ...]) -> int | None:
        return self.add_text(case_id, repr(row))

    def add_text(self, case_id: str, text: str) -> int | None:
        """Rows of one case, in order, as the `repr` of each joined (digested as if one at a
        time: however they are split)."""
        number = self.scan.number.get(case_id)
        if number is None:  # a row of no case the report shows
            return None
        if number != self.number:
            self.close()
            self.number, self.hashed = number, hashlib.sha256(self.scan._digest(number, self.table) or b"")
        self.hashed.update(text.encode("utf-8"))
        return number

    def close(self) -> None:
        if self.number is not None:
            self.scan._put_digest(self.scan._digests, self.number, self.table, self.hashed.digest()[:DIGEST_BYTES])
        self.number = None


def case_runs(case_ids: list[str | None]) -> Iterator[tuple[int, int]]:
    """(first, end) of each run of rows of one case."""
    if not case_ids:
        return
    ids = np.array(case_ids, dtype=object)
    bounds = [0, *(np.flatnonzero(ids[1:] != ids[:-1]) + 1).tolist(), len(case_ids)]
    yield from zip(bounds, bounds[1:])


def short_digest(text: str) -> bytes:
    """128 bits of a row's SHA-256 (as `row_key`), kept as bytes: half the memory of its hex."""
    return hashlib.sha256(text.encode("utf-8")).digest()[:16]


def failing_row(verdict: dict[str, Any]) -> dict[str, Any]:
    """What the page's head shows of a failing verdict (its details only as the line saying
    what it found)."""
    verdict = {**verdict, "details": from_json_text(verdict["details"])}
    return {
        "case_id": verdict["case_id"], "criterion": verdict["criterion"], "outcome": verdict["outcome"],
        "reason": verdict["reason"], "summary": verdict_summary(verdict),
    }


class HeldCases:
    """The rows a batch of panels shows (a verdict's runs aside: `ReportScan.run_ids`), read
    from the tables' row groups, as `case_panel` asks for them (`VersionResults`' `case`,
    `recording`, `verdicts_of`), and their fault replays by (case, criterion), the last row of
    each counting."""

    def __init__(self, tables: ReportTables, scan: ReportScan, case_ids: Iterable[str]):
        self.version = tables.version
        case_ids = [case_id for case_id in case_ids if case_id in scan.number]
        self._scan = scan
        self._cases = tables.cases.rows((scan.case_position(case_id) for case_id in case_ids), PANEL_CASE_FIELDS, CASE_NESTED)
        recorded = [*case_ids, *filter(None, map(scan.source_of, case_ids))]
        self._runs = tables.runs.rows(
            (position for position in map(scan.run_position, recorded) if position is not None), PANEL_RUN_FIELDS, RUN_NESTED
        )
        self._verdicts = tables.verdicts.rows(
            (position for case_id in case_ids for position in scan.verdict_positions(case_id)), PANEL_VERDICT_SHOWN, VERDICT_NESTED
        )
        replays = tables.replays.rows(
            (position for case_id in case_ids for position in scan.replay_positions(case_id)), REPORT_REPLAY_FIELDS, FAULT_REPLAY_NESTED
        )
        self.replays = {(row["case_id"], row["criterion"]): row for _, row in sorted(replays.items())}

    def case(self, case_id: str, names: Iterable[str] | None = None) -> dict[str, Any] | None:
        position = self._scan.case_position(case_id)
        return None if position is None else self._cases.get(position)

    def recording(self, case_id: str, names: Iterable[str] | None = None) -> dict[str, Any] | None:
        position = self._scan.run_position(case_id)
        return None if position is None else self._runs.get(position)

    def verdicts_of(self, case_id: str, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
        return [self._verdicts[position] for position in self._scan.verdict_positions(case_id)]
