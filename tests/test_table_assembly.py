"""A stage that reuses most of its stored table writes it a row group at a time
(store/assembly.py): with one case added, the file written is the one `to_parquet` of the
whole table would write (rows, order, schema, pandas metadata), no reused recording is
decoded into a model on the way, and each stored row group is read once."""

from __future__ import annotations

import pandas as pd
import pyarrow.parquet as pq
from dagster import build_output_context
from upath import UPath

from oloproof_pipeline.defs.io_manager import ParquetFiles
from oloproof_pipeline.model.cases import load_cases
from oloproof_pipeline.model.records import RecordedRun
from oloproof_pipeline.project import load_project
from oloproof_pipeline.run.recording import record_case_rows
from oloproof_pipeline.store import assembly
from oloproof_pipeline.store.journal import Journal
from oloproof_pipeline.store.layout import table_path, write_table_file
from oloproof_pipeline.store.stored import StoredTable
from oloproof_pipeline.store.tables import RECORDED_RUNS_SCHEMA, RUN_NESTED, VERDICTS_SCHEMA, case_table, frame_from_rows, rows_in_order

VERSION = "1.0.0"


def test_one_case_added_writes_the_whole_table_as_a_frame_would_and_decodes_no_reused_recording(refund_desk, tmp_path, monkeypatch):
    monkeypatch.setattr(assembly, "ROW_GROUP_ROWS", 5)  # several row groups, read and let go in turn
    project = load_project(refund_desk)
    cases = load_cases(project)
    path = table_path(project.root, "recorded_runs", VERSION)

    first, _ = record_case_rows(project, StoredTable.of(case_table(cases[:-1])), version=VERSION, run_id="r1")
    write_table_file(path, first)
    assert pq.ParquetFile(path).num_row_groups == -(-(len(cases) - 1) // 5)
    stored = pd.read_parquet(path)

    decoded = []
    validate = RecordedRun.model_validate.__func__
    monkeypatch.setattr(RecordedRun, "model_validate", classmethod(lambda cls, *a, **k: decoded.append(1) or validate(cls, *a, **k)))
    added, summary = record_case_rows(project, StoredTable.of(case_table(cases)), version=VERSION, run_id="r2")
    write_table_file(path, added)
    assert (summary.new, summary.reused) == (1, len(cases) - 1)
    assert len(decoded) == 0  # the new case's row is made from its worker's answer, the rest read as text

    # What the table was written from before: the stored rows, then the new one (from its journal line).
    new_line = [row for row in Journal.for_partition(project.root, "recorded_runs", VERSION).lines_of(RecordedRun) if row["recorded_by_run"] == "r2"]
    whole = pd.concat([stored, frame_from_rows(new_line, RECORDED_RUNS_SCHEMA, RUN_NESTED)], ignore_index=True)
    expected = tmp_path / "expected.parquet"
    whole.to_parquet(expected, index=False)
    written, wanted = pq.read_table(path), pq.read_table(expected)
    assert written.schema.equals(wanted.schema, check_metadata=True)
    assert written.equals(wanted)
    assert added.frame().equals(pd.read_parquet(path))


def test_reused_verdicts_are_read_a_row_group_at_a_time_each_once_into_the_file_a_frame_would_make(tmp_path, monkeypatch):
    rows = [
        {"case_id": f"c{index}", "case_digest": f"d{index}", "group_id": None if index % 3 else "g", "criterion": f"k{index % 4}",
         "outcome": "PASS" if index % 5 else "FAIL", "reason": "why " * (index % 7), "details": None if index % 2 else '{"n": 1}',
         "system_version": "1.0.0", "recorded_by_run": "r1", "replayed_by_run": None, "judged_by_run": "r1",
         "evaluator_digest": "e", "recording_key": f"k{index}", "inputs_key": None if index == 4 else "i"}
        for index in range(60)
    ]
    stored_path = tmp_path / "verdicts.parquet"
    write_table_file(stored_path, assembly.AssembledTable(VERDICTS_SCHEMA, [(frame_from_rows(rows, VERDICTS_SCHEMA), range(60), range(60))], ["case_id"], rows_per_group=8))
    assert pq.ParquetFile(stored_path).num_row_groups == 8

    reads = []
    row_groups = StoredTable.row_groups

    def counted(table):
        groups = row_groups(table)
        read = groups.read
        groups.read = lambda group, names: reads.append(group) or read(group, names)
        return groups

    monkeypatch.setattr(StoredTable, "row_groups", counted)
    new = frame_from_rows([{**rows[0], "outcome": "MISSING", "judged_by_run": "r2"}], VERDICTS_SCHEMA)
    reused_at, slots = list(range(1, 60)), [slot for slot in range(60) if slot != 30]  # the new verdict between them
    table = assembly.AssembledTable(
        VERDICTS_SCHEMA, [(new, [0], [30]), (StoredTable(stored_path), reused_at, slots)], ["case_id", "criterion", "outcome"], rows_per_group=16
    )
    written = tmp_path / "written.parquet"
    write_table_file(written, table)
    assert sorted(reads) == list(range(8))  # each stored row group read once

    expected = tmp_path / "expected.parquet"
    rows_in_order([(new, [0], [30]), (pd.read_parquet(stored_path), reused_at, slots)], VERDICTS_SCHEMA).to_parquet(expected, index=False)
    assert pq.read_table(written).schema.equals(pq.read_table(expected).schema, check_metadata=True)
    assert pq.read_table(written).equals(pq.read_table(expected))
    assert list(table.whole["outcome"]).count("MISSING") == 1 and len(table) == 60


def test_a_table_reused_whole_in_place_is_written_as_its_stored_file_without_reading_a_row_group(tmp_path, monkeypatch):
    rows = [
        {"case_id": f"c{index}", "criterion": "k", "outcome": "PASS", "reason": "why", "system_version": "1.0.0",
         "judged_by_run": "r1", "inputs_key": f"i{index}"}
        for index in range(20)
    ]
    stored_path = tmp_path / "verdicts.parquet"
    write_table_file(stored_path, assembly.AssembledTable(VERDICTS_SCHEMA, [(frame_from_rows(rows, VERDICTS_SCHEMA), range(20), range(20))], ["case_id"], rows_per_group=3))
    reads = []
    row_groups = StoredTable.row_groups
    monkeypatch.setattr(StoredTable, "row_groups", lambda table: reads.append(1) or row_groups(table))

    table = assembly.AssembledTable(VERDICTS_SCHEMA, [(StoredTable(stored_path), range(20), range(20))], ["case_id", "outcome"], rows_per_group=8)
    written = tmp_path / "written.parquet"
    write_table_file(written, table)
    assert reads == [] and written.read_bytes() == stored_path.read_bytes()  # its 3-row groups kept, not regrouped by 8
    assert list(table.whole["outcome"]) == ["PASS"] * 20

    # Any row moved (or another source) writes it again, grouped as asked.
    moved = assembly.AssembledTable(VERDICTS_SCHEMA, [(StoredTable(stored_path), range(20), [*range(1, 20), 0])], ["case_id"], rows_per_group=8)
    write_table_file(written, moved)
    assert pq.ParquetFile(written).num_row_groups == 3 and reads
    assert pq.read_table(written)["case_id"].to_pylist() == [f"c{index}" for index in [19, *range(19)]]


def test_a_table_written_through_the_io_manager_lets_go_of_its_rows(tmp_path):
    """Dagster holds a stage's output until its step ends, after the stage's freed memory was
    handed back: once written, an assembled table holds no rows, whole or in its sources."""
    rows = [{"case_id": f"c{index}", "criterion": "k", "outcome": "PASS", "reason": "why"} for index in range(20)]
    table = assembly.AssembledTable(VERDICTS_SCHEMA, [(frame_from_rows(rows, VERDICTS_SCHEMA), range(20), range(20))], ["case_id", "outcome"])
    path = tmp_path / "verdicts.parquet"
    ParquetFiles(base_path=UPath(tmp_path)).dump_to_path(build_output_context(), table, UPath(path))
    assert pq.read_table(path).num_rows == 20 and list(pq.read_table(path).column("case_id").to_pylist()) == [row["case_id"] for row in rows]
    assert (len(table), len(table.whole), table.whole.columns.tolist()) == (0, 0, ["case_id", "outcome"])
    assert not table._parts
