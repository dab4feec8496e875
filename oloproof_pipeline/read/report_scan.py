"""The report's tables, and one pass over each a row group at a time (`streamed.StreamedTable`)
that keeps per case only what the page needs of every case: where its rows are, digests of
the stored values its panel shows (its panel's key) and its worst outcome; and for the page's
head only counts, the failing verdicts it lists and the runs each verdict links to (as
numbers). A panel's rows are read again (`HeldCases`) only for the panels rendered now, a
batch at a time."""

from __future__ import annotations

import sys
from array import array
from dataclasses import dataclass
from itertools import chain
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
from ..store.arrow_bytes import DIGEST_BYTES, TableBytes, as_text, one_array
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

    def add_runs(self, numbers: np.ndarray, firsts: np.ndarray, counts: np.ndarray) -> None:
        """`add_run` of each (number, first, count), in order: those of cases met for the first
        time (each once here) at once, the others one at a time."""
        new = self.count[numbers] == 0
        if new.all() and len(np.unique(numbers)) == len(numbers):
            self.first[numbers], self.count[numbers] = firsts, counts
            return
        for number, first, count in zip(numbers.tolist(), firsts.tolist(), counts.tolist()):
            self.add_run(number, first, count)

    def positions(self, number: int | None) -> range | list[int]:
        if number is None:
            return range(0)
        if number in self.apart:
            return self.apart[number]
        first = int(self.first[number])
        return range(first, first + int(self.count[number]))


# A case's digests, one slot per table whose rows its panel shows (all zero: no row).
DIGESTED = ("cases", "runs", "verdicts", "replays")
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
            found = TableBytes(table).digests([(row, row + 1) for row in range(table.num_rows)])
            for offset, (case_id, source_id) in enumerate(zip(table.column("case_id").to_pylist(), table.column("source_id").to_pylist())):
                case_id = sys.intern(case_id)
                number = self.number.get(case_id)
                if number is None:
                    number = self.number[case_id] = len(self.order)
                    self.order.append(case_id)
                    positions.append(0)
                    sources.append(None)
                    digests += bytes(DIGEST_BYTES * len(DIGESTED))
                positions[number], sources[number] = start + offset, source_id or None
                at = (number * len(DIGESTED) + CASES) * DIGEST_BYTES
                digests[at : at + DIGEST_BYTES] = found[offset]
        self._case_at = np.array(positions, dtype=np.int64)
        self._source = np.array([-1 if source is None else self.number.get(source, -1) for source in sources], dtype=np.int64)
        self._digests = digests
        # The same bytes by (case number, table): a slice's digests are put in at once.
        self._by_case = np.frombuffer(digests, dtype=np.uint8).reshape(len(self.order), len(DIGESTED), DIGEST_BYTES)

    def _digest(self, number: int, table: int) -> bytes | None:
        at = (number * len(DIGESTED) + table) * DIGEST_BYTES
        digest = bytes(self._digests[at : at + DIGEST_BYTES])
        return None if digest == NO_DIGEST else digest

    def _put_digests(self, table: int, shown: TableBytes, numbers: np.ndarray, bounds: list[tuple[int, int]], *, go_on: bool) -> None:
        """Each run's digest (`bounds` in `shown`) as its case's (`numbers`) for `table`; with
        `go_on`, from the digest the case's rows met before had (a case whose rows are apart)."""
        if not len(numbers):
            return
        if len(np.unique(numbers)) != len(numbers):  # a case twice here: one run at a time, in order
            for number, run in zip(numbers.tolist(), bounds):
                before = self._digest(number, table) if go_on else None
                self._by_case[number, table] = np.frombuffer(shown.digests([run], [before])[0], dtype=np.uint8)
            return
        befores = None
        if go_on:
            met = self._by_case[numbers, table].any(axis=1)
            if met.any():
                befores = [bytes(self._by_case[number, table]) if was else None for number, was in zip(numbers.tolist(), met.tolist())]
        found = shown.digests(bounds, befores)
        self._by_case[numbers, table] = np.frombuffer(b"".join(found), dtype=np.uint8).reshape(len(found), DIGEST_BYTES)

    def _numbers(self, case_ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Each case id's number, -1 for a case the report does not show."""
        get = self.number.get
        return np.array([get(case_id, -1) for case_id in case_ids.to_pylist()], dtype=np.int64)

    def _scan_runs(self, runs: StreamedTable) -> None:
        for start, table in runs.slices(["case_id", "recorded_by_run", *PANEL_RUN_FIELDS]):
            count_runs(self.recorded_by, table.column("recorded_by_run"))
            numbers = self._numbers(table.column("case_id"))
            shown = np.flatnonzero(numbers >= 0)  # a recording of no case the report shows is passed over
            numbers = numbers[shown]
            if len(np.unique(numbers)) != len(numbers):  # a case recorded twice: its last row counts
                last = len(numbers) - 1 - np.unique(numbers[::-1], return_index=True)[1]
                shown, numbers = shown[np.sort(last)], numbers[np.sort(last)]
            self._run_at[numbers] = start + shown
            rows = shown.tolist()
            self._put_digests(RUNS, TableBytes(table.select(list(PANEL_RUN_FIELDS))), numbers, [(row, row + 1) for row in rows], go_on=False)
            failed = pc.fill_null(pc.not_equal(table.column("status"), "ok"), True).to_numpy(zero_copy_only=False)
            np.minimum.at(self._worst, numbers[failed[shown]], RANK[MISSING])

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
            outcome = as_text(table.column("outcome"))  # as text even where the table lacks it (nulls)
            outcomes = pc.dictionary_encode(outcome, null_encoding="encode")
            failing = pc.is_in(outcome, pa.array(FAILING, outcome.type))
            if pc.any(failing).as_py():
                shown_rows = table.select(list(PANEL_VERDICT_SHOWN)).filter(failing).to_pylist()
                self.failing.extend(map(failing_row, shown_rows))
            ranks = np.array([RANK.get(outcome, UNRANKED) for outcome in outcomes.dictionary.to_pylist()], dtype=np.int8)
            ranks = ranks[outcomes.indices.to_numpy(zero_copy_only=False)]
            kept = self._runs_of_cases(table, runs)
            if kept is None:
                continue
            numbers, firsts, ends, shown = kept
            self._put_digests(VERDICTS, TableBytes(table.select(list(PANEL_VERDICT_SHOWN))), numbers, list(zip(firsts.tolist(), ends.tolist())), go_on=True)
            self._verdicts.add_runs(numbers, start + firsts, ends - firsts)
            worst = np.minimum.reduceat(ranks, np.array([first for first, _ in runs], dtype=np.int64))  # of every run
            np.minimum.at(self._worst, numbers, worst[shown])
        self._linked = list(linked)

    def _runs_of_cases(self, table: pa.Table, runs: list[tuple[int, int]]) -> tuple[np.ndarray, ...] | None:
        """(case number, first, end) of each run of one case's rows in `table` whose case the
        report shows, and which of `runs` those are; None when there is none."""
        bounds = np.array(runs, dtype=np.int64).reshape(-1, 2)
        numbers = self._numbers(table.column("case_id").take(pa.array(bounds[:, 0])))
        shown = numbers >= 0
        if not shown.any():
            return None
        return numbers[shown], bounds[shown, 0], bounds[shown, 1], shown

    def _scan_replays(self, replays: StreamedTable) -> None:
        shown_names = [name for name in REPORT_REPLAY_FIELDS if name != "replayed_by_run"]
        for start, table, runs in replays.case_slices([*shown_names, "replayed_by_run"]):
            count_runs(self.replayed_by, table.column("replayed_by_run"))
            kept = self._runs_of_cases(table, runs)
            if kept is None:
                continue
            numbers, firsts, ends, _ = kept
            self._put_digests(REPLAYS, TableBytes(table.select(shown_names)), numbers, list(zip(firsts.tolist(), ends.tolist())), go_on=True)
            self._replays.add_runs(numbers, start + firsts, ends - firsts)

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
            source_runs = source * width + RUNS * DIGEST_BYTES
            found.append(keys.key(
                digests[number * width : (number + 1) * width]
                + (digests[source_runs : source_runs + DIGEST_BYTES] if source >= 0 else NO_DIGEST)
            ))
        return found

    def run_ids(self, case_ids: list[str]) -> list[tuple[str | None, ...]]:
        """The runs each case's panel links to, each verdict's `PANEL_RUN_LINK_FIELDS` in turn."""
        positions = [self.verdict_positions(case_id) for case_id in case_ids]
        flat = np.fromiter(chain.from_iterable(positions), dtype=np.int64)
        numbers = np.stack([np.frombuffer(links, dtype=np.int32)[flat] for links in self._links], axis=1).ravel().tolist()
        linked = self._linked
        run_ids = [linked[number] for number in numbers]
        found, at, width = [], 0, len(self._links)
        for case_positions in positions:
            end = at + len(case_positions) * width
            found.append(tuple(run_ids[at:end]))
            at = end
        return found


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
