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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

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
from .arrow_bytes import TableBytes, one_array
from .panels import PanelKeys
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
CASES, RUNS, VERDICTS, REPLAYS = range(len(DIGESTED))
NO_DIGEST = bytes(DIGEST_BYTES)


class ReportScan:
    """Per case what the page needs of every case (see the module's words), from one pass
    over each table, held by case number in arrays (a few dozen bytes a case, plus its id).
    A pass works on a slice of rows as Arrow columns: what is counted or looked up, by the
    column; a case's digest, from the bytes of its rows (`arrow_bytes`); only the case ids
    and the failing verdicts are made Python values."""

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
        for start, table in cases.slices(PANEL_CASE_FIELDS):
            shown = TableBytes(table)
            for offset, (case_id, source_id) in enumerate(zip(table.column(0).to_pylist(), table.column(1).to_pylist())):
                case_id = sys.intern(case_id)
                number = self.number.get(case_id)
                if number is None:
                    number = self.number[case_id] = len(self.order)
                    self.order.append(case_id)
                    positions.append(0)
                    sources.append(None)
                    digests += bytes(DIGEST_BYTES * len(DIGESTED))
                positions[number], sources[number] = start + offset, source_id or None
                self._put_digest(digests, number, CASES, rows_digest(shown, offset, offset + 1))
        self._case_at = np.array(positions, dtype=np.int64)
        self._source = np.array([-1 if source is None else self.number.get(source, -1) for source in sources], dtype=np.int64)
        self._digests = digests

    @staticmethod
    def _put_digest(digests: bytearray, number: int, table: int, digest: bytes) -> None:
        at = (number * len(DIGESTED) + table) * DIGEST_BYTES
        digests[at : at + DIGEST_BYTES] = digest

    def _digest(self, number: int, table: int) -> bytes | None:
        at = (number * len(DIGESTED) + table) * DIGEST_BYTES
        digest = bytes(self._digests[at : at + DIGEST_BYTES])
        return None if digest == NO_DIGEST else digest

    def _numbers(self, case_ids: pa.Array) -> list[int | None]:
        return list(map(self.number.get, case_ids.to_pylist()))

    def _scan_runs(self, runs: StreamedTable) -> None:
        missing = RANK[MISSING]
        for start, table in runs.slices(["case_id", "recorded_by_run", *PANEL_RUN_FIELDS]):
            count_runs(self.recorded_by, table.column("recorded_by_run"))
            shown = TableBytes(table.select(list(PANEL_RUN_FIELDS)))
            failed = pc.fill_null(pc.not_equal(table.column("status"), "ok"), True).to_numpy(zero_copy_only=False)
            for offset, number in enumerate(self._numbers(table.column("case_id"))):
                if number is None:  # a recording of no case the report shows
                    continue
                self._run_at[number] = start + offset
                self._put_digest(self._digests, number, RUNS, rows_digest(shown, offset, offset + 1))
                if failed[offset] and self._worst[number] > missing:
                    self._worst[number] = missing

    def _scan_verdicts(self, verdicts: StreamedTable) -> None:
        """A slice of rows at a time: what is counted, by the column; what is per case, by each
        run of one case's rows (a case's verdicts follow one another)."""
        linked: dict[str | None, int] = {}
        for start, table, runs in verdicts.case_slices([*PANEL_VERDICT_SHOWN, *PANEL_RUN_LINK_FIELDS]):
            self.criteria.update(pc.unique(table.column("criterion")).to_pylist())
            count_runs(self.judged_by, table.column("judged_by_run"))
            for numbers, name in zip(self._links, PANEL_RUN_LINK_FIELDS):
                encoded = pc.dictionary_encode(one_array(table.column(name)), null_encoding="encode")
                known = np.array([linked.setdefault(run_id, len(linked)) for run_id in encoded.dictionary.to_pylist()], dtype=np.int32)
                numbers.frombytes(known[encoded.indices.to_numpy(zero_copy_only=False)].astype(np.int32).tobytes())
            outcomes = pc.dictionary_encode(one_array(table.column("outcome")), null_encoding="encode")
            failing = pc.is_in(table.column("outcome"), pa.array(FAILING, table.column("outcome").type))
            if pc.any(failing).as_py():
                shown_rows = table.select(list(PANEL_VERDICT_SHOWN)).filter(failing).to_pylist()
                self.failing.extend(map(failing_row, shown_rows))
            ranks = np.array([RANK.get(outcome, UNRANKED) for outcome in outcomes.dictionary.to_pylist()], dtype=np.int8)
            ranks = ranks[outcomes.indices.to_numpy(zero_copy_only=False)]
            shown = TableBytes(table.select(list(PANEL_VERDICT_SHOWN)))
            firsts = [first for first, _ in runs]
            worst = np.minimum.reduceat(ranks, firsts) if len(ranks) else ranks
            run_cases = self._numbers(table.column("case_id").take(pa.array(firsts, pa.int64())))
            for (first, end), number, rank in zip(runs, run_cases, worst.tolist()):
                if number is None:  # rows of no case the report shows
                    continue
                self._put_digest(self._digests, number, VERDICTS, rows_digest(shown, first, end, self._digest(number, VERDICTS)))
                self._verdicts.add_run(number, start + first, end - first)
                if rank < self._worst[number]:
                    self._worst[number] = rank
        self._linked = list(linked)

    def _scan_replays(self, replays: StreamedTable) -> None:
        shown_names = [name for name in REPORT_REPLAY_FIELDS if name != "replayed_by_run"]
        for start, table, runs in replays.case_slices([*shown_names, "replayed_by_run"]):
            count_runs(self.replayed_by, table.column("replayed_by_run"))
            shown = TableBytes(table.select(shown_names))
            run_cases = self._numbers(table.column("case_id").take(pa.array([first for first, _ in runs], pa.int64())))
            for (first, end), number in zip(runs, run_cases):
                if number is None:
                    continue
                self._put_digest(self._digests, number, REPLAYS, rows_digest(shown, first, end, self._digest(number, REPLAYS)))
                self._replays.add_run(number, start + first, end - first)

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

    def panel_keys(self, case_ids: list[str]) -> list[str]:
        """The keys the cases' panels are kept under: the stored values each shows (its
        digests, and a copy's source's recording's: a copy's pair shows its source's calls)
        and the code that renders it (not the runs it links to: filled in as it is written)."""
        keys = PanelKeys()
        digests, width = self._digests, len(DIGESTED) * DIGEST_BYTES
        found = []
        for case_id in case_ids:
            number = self.number[case_id]
            source = int(self._source[number])
            shown = digests[number * width : (number + 1) * width]
            found.append(keys.key(bytes(shown) + (self._digest(source, RUNS) or NO_DIGEST if source >= 0 else NO_DIGEST)))
        return found

    def run_ids(self, case_id: str) -> tuple[str | None, ...]:
        """The runs the case's panel links to, each verdict's `PANEL_RUN_LINK_FIELDS` in turn."""
        linked = self._linked
        return tuple([linked[numbers[position]] for position in self.verdict_positions(case_id) for numbers in self._links])


def rows_digest(shown: TableBytes, first: int, end: int, before: bytes | None = None) -> bytes:
    """128 bits of the SHA-256 of rows `first` to `end` of `shown` (as `row_key`), going on
    from `before` (the digest of the case's rows met earlier), kept as bytes."""
    hashed = hashlib.sha256(before or b"")
    shown.update(hashed, first, end)
    return hashed.digest()[:DIGEST_BYTES]


def count_runs(counted: dict[str, int], run_ids: pa.Array) -> None:
    """Add each run's rows to `counted` (runs in order of appearance; no run, no count)."""
    for found in pc.value_counts(run_ids).to_pylist():
        if found["values"]:
            counted[found["values"]] = counted.get(found["values"], 0) + found["counts"]


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
