"""The report's pass over its tables (`read/report_scan.py`) and its inputs digest: taken from
the tables' Arrow buffers, they still see every value they stand for, whatever the rows'
slicing, and read only the columns they need."""

from __future__ import annotations

import shutil
from collections import Counter
from itertools import groupby
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from oloproof_pipeline.project import load_project
from oloproof_pipeline.read import streamed
from oloproof_pipeline.store.arrow_bytes import TableBytes
from oloproof_pipeline.read.report_scan import ReportScan, ReportTables, count_runs
from oloproof_pipeline.read.results import outcome_counts, stored_outcome_counts
from oloproof_pipeline.read.spend import version_spend
from oloproof_pipeline.read.streamed import StreamedTable
from oloproof_pipeline.read.report_view import PANEL_CASE_FIELDS, PANEL_RUN_FIELDS, PANEL_RUN_LINK_FIELDS, PANEL_VERDICT_SHOWN, REPORT_REPLAY_FIELDS
from oloproof_pipeline.read.reports import (
    REPORTED_CASE_COLUMNS,
    REPORTED_REPLAY_COLUMNS,
    REPORTED_RUN_COLUMNS,
    REPORTED_VERDICT_COLUMNS,
    report_inputs_digest,
)
from oloproof_pipeline.store.layout import read_table, table_path
from oloproof_pipeline.store.reuse import stored_tables
from oloproof_pipeline.store.stored import StoredTable

from helpers import watch_reads

VERSION = "1.0.0"
# Each stored table the report reads, and the columns its inputs digest stands on.
REPORTED = {
    ("cases", None): ["case_id", "case_digest"],
    ("derived_cases", None): REPORTED_CASE_COLUMNS,
    ("recorded_runs", VERSION): REPORTED_RUN_COLUMNS,
    ("verdicts", VERSION): REPORTED_VERDICT_COLUMNS,
    ("fault_replays", VERSION): REPORTED_REPLAY_COLUMNS,
}


def report_tables(root: Path) -> ReportTables:
    project = load_project(root)
    return ReportTables.stored(root, stored_tables(project, VERSION), VERSION, read_table(root, "gate", VERSION), read_table(root, "slices", VERSION))


def inputs_digest(root: Path) -> str:
    return report_inputs_digest("desk", report_tables(root))


def edited(column: pa.ChunkedArray, row: int) -> pa.Array:
    """`column` with its value at `row` changed (text: a character more; a number: one more;
    a null: a value)."""
    values = column.to_pylist()
    value = values[row]
    if pa.types.is_floating(column.type) or pa.types.is_integer(column.type):
        values[row] = 1 if value is None else value + 1
    else:
        values[row] = "x" if value is None else value + "x"
    return pa.array(values, column.type)


def rewrite(path: Path, name: str, row: int, change=edited) -> None:
    table = pq.read_table(path)
    at = table.schema.get_field_index(name)
    pq.write_table(table.set_column(at, table.schema.field(at), change(table.column(name), row)), path)


def test_the_inputs_digest_changes_with_every_value_the_report_stands_on(evaluated_desk, tmp_path):
    """One value changed (or made null) in any reported column of any table, first row or last,
    changes the report's inputs digest; the same tables read again give the same digest."""
    before = inputs_digest(evaluated_desk)
    assert inputs_digest(evaluated_desk) == before
    seen = {before}
    for (table, partition), names in REPORTED.items():
        path = table_path(evaluated_desk, table, partition)
        kept = tmp_path / "kept.parquet"
        shutil.copy(path, kept)
        rows = pq.ParquetFile(path).metadata.num_rows
        for name in names:
            for row, change in ((0, edited), (rows - 1, edited), (rows // 2, lambda column, row: nulled(column, row))):
                rewrite(path, name, row, change)
                changed = inputs_digest(evaluated_desk)
                assert changed not in seen, (table, name, row)
                seen.add(changed)
                shutil.copy(kept, path)
        assert inputs_digest(evaluated_desk) == before


def nulled(column: pa.ChunkedArray, row: int) -> pa.Array:
    values = column.to_pylist()
    values[row] = None if values[row] is not None else ("x" if pa.types.is_string(column.type) or pa.types.is_large_string(column.type) else 1)
    return pa.array(values, column.type)


def test_a_panel_key_changes_with_what_that_panel_shows_and_no_other(evaluated_desk):
    """A value a panel shows changed: that case's panel key changes (and, for a source's
    recording, its copies' too: their pairs show its calls), every other key stays."""
    def keys() -> dict[str, str]:
        scan = ReportScan.of(report_tables(evaluated_desk))
        return dict(zip(scan.order, scan.panel_keys(scan.order)))

    before = keys()
    verdicts = read_table(evaluated_desk, "verdicts", VERSION)
    runs = read_table(evaluated_desk, "recorded_runs", VERSION)
    copies = read_table(evaluated_desk, "derived_cases")
    row = len(verdicts) // 2
    rewrite(table_path(evaluated_desk, "verdicts", VERSION), "details", row)
    after = keys()
    assert {case_id for case_id in before if before[case_id] != after[case_id]} == {verdicts["case_id"].iloc[row]}

    source = copies["source_id"].iloc[0]
    at = int((runs["case_id"] == source).to_numpy().nonzero()[0][0])
    rewrite(table_path(evaluated_desk, "recorded_runs", VERSION), "trajectory", at)
    again = keys()
    expected = {source, *copies.loc[copies["source_id"] == source, "case_id"]}
    assert {case_id for case_id in after if after[case_id] != again[case_id]} == expected


def scanned(root: Path) -> tuple:
    scan = ReportScan.of(report_tables(root))
    return (
        scan.order, scan.failing_first(), scan.panel_keys(scan.order), scan.failing, sorted(scan.criteria),
        list(scan.recorded_by.items()), list(scan.replayed_by.items()), list(scan.judged_by.items()),
        [(scan.case_position(case_id), scan.run_position(case_id), list(scan.verdict_positions(case_id)),
          list(scan.replay_positions(case_id)), run_ids, scan.source_of(case_id)) for case_id, run_ids in zip(scan.order, scan.run_ids(scan.order))],
    )


def test_the_scan_is_the_same_however_the_rows_are_sliced(evaluated_desk, monkeypatch):
    """A case's rows cut between slices (or row groups) are digested as one run: every key,
    position, count and failing verdict is what one slice of every row gives."""
    whole = scanned(evaluated_desk)
    for rows in (1, 2, 5, 7):
        monkeypatch.setattr(streamed, "SLICE_ROWS", rows)
        assert scanned(evaluated_desk) == whole, rows


def test_the_scan_and_the_digest_read_only_the_columns_they_need(evaluated_desk, monkeypatch):
    """The inputs digest reads the reported columns alone, the scan the columns the panels and
    the page's head show (and the runs they link to), each table once; no row is read again
    by position when every panel is kept."""
    read: list[tuple[str, ...]] = []
    groups = streamed.StreamedTable.groups

    def counted(self, names):
        names = tuple(names)
        read.append(names)
        return groups(self, names)

    monkeypatch.setattr(streamed.StreamedTable, "groups", counted)
    tables = report_tables(evaluated_desk)
    report_inputs_digest("desk", tables)
    assert Counter(read) == Counter(map(tuple, [REPORTED_CASE_COLUMNS, REPORTED_RUN_COLUMNS, REPORTED_REPLAY_COLUMNS, REPORTED_VERDICT_COLUMNS]))
    read.clear()
    ReportScan.of(tables)
    assert Counter(read) == Counter([
        PANEL_CASE_FIELDS, ("case_id", "recorded_by_run", *PANEL_RUN_FIELDS), (*PANEL_VERDICT_SHOWN, *PANEL_RUN_LINK_FIELDS),
        (*[name for name in REPORT_REPLAY_FIELDS if name != "replayed_by_run"], "replayed_by_run"),
    ])
    assert (tables.cases.rows_read, tables.runs.rows_read, tables.verdicts.rows_read, tables.replays.rows_read) == (0, 0, 0, 0)


def test_runs_are_counted_in_order_of_appearance_as_python_counts_them():
    run_ids = ["b", None, "a", "", "b", "c", "a", None, "b"]
    counted: dict[str, int] = {"c": 1}
    count_runs(counted, pa.chunked_array([pa.array(run_ids, pa.large_string())]))
    expected = {"c": 1}
    for run_id, count in Counter(run_ids).items():
        if run_id:
            expected[run_id] = expected.get(run_id, 0) + count
    assert list(counted.items()) == list(expected.items())


@pytest.mark.parametrize(
    "left, right",
    [
        (["a", None], ["a", ""]),  # a null is not empty text
        (["ab", "c"], ["a", "bc"]),  # where one value ends and the next begins counts
        ([1.5, None], [1.5, 0.0]),
        ([1, 2], [1, 3]),
        ([None, None], ["", ""]),
    ],
)
def test_rows_digest_apart_when_any_value_differs(left, right):
    def digest(values) -> bytes:
        table = pa.table({"value": pa.array(values), "other": pa.array(["x", "y"], pa.large_string())})
        return TableBytes(table).digests([(0, 2)])[0]

    assert digest(left) != digest(right)
    assert digest(left) == digest(list(left))


def test_rows_of_a_sliced_table_digest_as_the_same_rows_whole():
    whole = pa.table({"text": pa.array(["a", None, "bcd", "", "ef"], pa.large_string()), "number": pa.array([1.0, 2.0, None, 4.0, 5.0])})
    part = whole.slice(2, 3)
    assert TableBytes(part).digests([(0, 3)])[0] == TableBytes(whole).digests([(2, 5)])[0]
    assert TableBytes(part).digests([(0, 3)])[0] != TableBytes(whole).digests([(1, 4)])[0]


def in_memory_tables(verdicts: list[tuple[str, str, str]]) -> ReportTables:
    """Two cases with one recording each and `verdicts` as (case, criterion, reason) rows."""
    cases = pd.DataFrame({"case_id": ["a", "b"], "source_id": [None, None], "input": ['"one"', '"two"']})
    runs = pd.DataFrame({
        "case_id": ["a", "b"], "recorded_by_run": ["r1", "r1"], "output": ['"x"', '"y"'], "status": ["ok", "error"],
        "error": [None, "boom"], "trajectory": ['{"steps": []}', '{"steps": []}'],
    })
    rows = pd.DataFrame(verdicts, columns=["case_id", "criterion", "reason"]).assign(
        outcome="PASS", details="null", recorded_by_run="r1", replayed_by_run=None, judged_by_run="r2",
    )
    return ReportTables(
        version=VERSION, cases=StreamedTable.of(StoredTable.of(cases)), runs=StreamedTable.of(StoredTable.of(runs)),
        verdicts=StreamedTable.of(StoredTable.of(rows)), replays=StreamedTable.of(None), gate=None, slices=None, validity=None,
        spend=version_spend(None),
    )


def test_a_case_whose_verdicts_are_apart_keeps_them_all_in_its_panel_and_key(monkeypatch):
    """Rows of one case apart in the table (another case's between): the case's panel reads
    both, its key changes with either, and slicing the rows one at a time changes nothing."""
    rows = [("a", "c1", "first"), ("b", "c1", "b's"), ("a", "c2", "second")]

    def keys(rows) -> dict[str, str]:
        scan = ReportScan.of(in_memory_tables(rows))
        return dict(zip(scan.order, scan.panel_keys(scan.order)))

    scan = ReportScan.of(in_memory_tables(rows))
    assert (list(scan.verdict_positions("a")), list(scan.verdict_positions("b"))) == ([0, 2], [1])
    assert scan.failing_first() == (["b", "a"], 1)  # b's recording failed: MISSING, first
    before = keys(rows)
    for changed in ([rows[0], rows[1], ("a", "c2", "other")], [("a", "c1", "other"), rows[1], rows[2]]):
        after = keys(changed)
        assert after["a"] != before["a"] and after["b"] == before["b"]
    monkeypatch.setattr(streamed, "SLICE_ROWS", 1)
    assert keys(rows) == before
    assert [list(ReportScan.of(in_memory_tables(rows)).verdict_positions(case)) for case in "ab"] == [[0, 2], [1]]


def test_a_verdicts_table_without_a_run_or_outcome_column_scans_as_nulls():
    """A table stored before a column existed reads it as nulls: the scan counts no run for it
    and ranks no outcome, and keys its panels all the same."""
    tables = in_memory_tables([("a", "c1", "first"), ("b", "c1", "b's")])
    verdicts = tables.verdicts.parts[0].columns("case_id", "criterion", "reason", "details", "recorded_by_run")
    tables.verdicts = StreamedTable.of(StoredTable.of(verdicts))
    scan = ReportScan.of(tables)
    assert scan.judged_by == {} and scan.failing == [] and scan.run_ids(["a"]) == [("r1", None, None)]
    assert len(set(scan.panel_keys(["a", "b"]))) == 2


def test_case_slices_give_each_run_of_one_case_whole_across_slices_and_row_groups(tmp_path, monkeypatch):
    """Runs of one case's rows, some longer than a slice, cut by row groups and slices at every
    place: each comes whole, at its position, in order; a case met again later is a run again."""
    keys = [key for key, length in zip("aabcadddddeffga", [1, 3, 2, 5, 1, 9, 1, 2, 1, 4, 2, 1, 7, 3, 1]) for _ in range(length)]
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"case_id": keys, "row": list(range(len(keys)))}), path, row_group_size=4)
    expected, at = [], 0
    for key, run in groupby(keys):
        length = len(list(run))
        expected.append((at, key, list(range(at, at + length))))
        at += length
    for rows in (1, 3, 4, 5, 64):  # a slice of 4 rows is a whole row group
        monkeypatch.setattr(streamed, "SLICE_ROWS", rows)
        given = [
            (start + first, table.column("case_id")[first].as_py(), table.column("row").to_pylist()[first:end])
            for start, table, runs in StreamedTable.of(StoredTable(path)).case_slices(["case_id", "row"])
            for first, end in runs
        ]
        assert given == expected, rows


def test_an_empty_table_digests_apart_from_a_missing_one_and_scans_to_nothing():
    empty = pd.DataFrame({"case_id": pd.Series([], dtype=object), "criterion": pd.Series([], dtype=object)})
    table = StreamedTable.of(StoredTable.of(empty))
    assert table.digest("t", ["case_id", "criterion"]) != StreamedTable.of(None).digest("t", ["case_id", "criterion"])
    assert TableBytes(pa.table({"case_id": pa.array([], pa.large_string())})).digests([]) == []
    tables = in_memory_tables([])
    tables.verdicts = table
    scan = ReportScan.of(tables)
    assert scan.run_ids(["a", "b"]) == [(), ()] and len(set(scan.panel_keys(["a", "b"]))) == 2


def test_a_runs_outcome_counts_read_the_verdicts_a_row_group_at_a_time_and_count_as_the_whole_table(tmp_path, monkeypatch):
    """The run's summary counts the stored verdicts per criterion a row group at a time (never
    the whole columns): the same counts, criteria in the order they first appear, a criterion
    first met in a later group included."""
    criteria = ["b"] * 4 + ["a"] * 3 + ["b", "c", "a", "c", "b"]
    outcomes = ["PASS", "FAIL", "EXCLUDED", "MISSING", "PASS", "PASS", "FAIL", "FAIL", "PASS", "EXCLUDED", "MISSING", "PASS"]
    frame = pd.DataFrame({"case_id": [f"c{n}" for n in range(len(criteria))], "criterion": criteria, "outcome": outcomes})
    path = tmp_path / "verdicts.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path, row_group_size=3)
    stored = StoredTable(path)
    read_whole, groups_read = watch_reads(monkeypatch, lambda table: table is stored)
    counted = stored_outcome_counts(stored)
    assert counted == outcome_counts(frame) and list(counted) == ["b", "a", "c"]
    assert counted["c"] == {"PASS": 1, "FAIL": 0, "MISSING": 1, "EXCLUDED": 0}
    assert read_whole == [] and groups_read == [0, 1, 2, 3]
