"""Rows a recording stage makes are written to a file of their own as each batch fills, not
held until its table is written: the table written is the one the held rows made, and the
file leaves nothing behind."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from oloproof_pipeline.model.cases import load_cases
from oloproof_pipeline.project import load_project
from oloproof_pipeline.run.recording import RecordingStage, record_case_rows
from oloproof_pipeline.store.layout import write_table_file
from oloproof_pipeline.store.spill import SpilledBands, SpilledRowBatches
from oloproof_pipeline.store.stored import StoredTable
from oloproof_pipeline.store.tables import RECORDED_RUNS_SCHEMA, RUN_NESTED, RowBatches, case_table


@pytest.fixture(autouse=True)
def own_temporary_folder(tmp_path, monkeypatch):
    """Rows are spilled to this test's own folder: other runs on the machine spill to the shared one."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def left_behind() -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob("oloproof-rows-*"))


def test_spilled_rows_hold_one_batch_and_read_back_as_the_rows_held(monkeypatch):
    monkeypatch.setattr(RowBatches, "ROWS", 4)
    rows = [{"case_id": f"c{index}", "status": "ok", "output": None if index % 3 else {"n": index}, "code_files": "{}",
             "duration_s": index / 7, "model_calls": None if index % 2 else index} for index in range(11)]
    held, spilled = RowBatches(RECORDED_RUNS_SCHEMA, RUN_NESTED), SpilledRowBatches(RECORDED_RUNS_SCHEMA, RUN_NESTED)
    for row in rows:
        held.add(row)
        spilled.add(row)
        assert spilled._batches == [] and len(spilled._pending) < 4
    read = spilled.rows()
    assert isinstance(read, StoredTable) and len(read) == spilled.count == 11
    groups = [read.row_groups().read(index, RECORDED_RUNS_SCHEMA.names) for index in range(3)]
    assert [group.num_rows for group in groups] == [4, 4, 3]
    assert pa.concat_tables(groups).cast(RECORDED_RUNS_SCHEMA).equals(held.table().cast(RECORDED_RUNS_SCHEMA))
    assert not left_behind()


def test_a_recording_stage_writes_the_table_its_held_rows_made(refund_desk, tmp_path, monkeypatch):
    monkeypatch.setattr(RowBatches, "ROWS", 5)
    project = load_project(refund_desk)
    cases = StoredTable.of(case_table(load_cases(project)))
    spilled, _ = record_case_rows(project, cases, version="1.0.0", run_id="r1")
    write_table_file(tmp_path / "spilled.parquet", spilled)
    monkeypatch.setattr(RecordingStage, "new_rows", lambda self: RowBatches(self.stored.schema, RUN_NESTED))
    held, _ = record_case_rows(project, cases, version="1.0.0", run_id="r1")
    write_table_file(tmp_path / "held.parquet", held)
    drop = ["duration_s"]  # the time each case took
    written, expected = pq.read_table(tmp_path / "spilled.parquet"), pq.read_table(tmp_path / "held.parquet")
    assert written.schema.equals(expected.schema, check_metadata=True)
    assert written.drop_columns(drop).equals(expected.drop_columns(drop)) and written.num_rows == len(cases) > 5
    assert not left_behind()


def test_rows_spilled_by_a_stage_that_fails_leave_nothing_behind():
    spilled = SpilledRowBatches(RECORDED_RUNS_SCHEMA, RUN_NESTED)
    spilled.extend([{"case_id": f"c{index}", "status": "ok"} for index in range(RowBatches.ROWS + 1)])
    assert len(left_behind()) == 1  # written as the first batch filled, never read back
    del spilled
    assert not left_behind()


def test_rows_bound_for_slots_are_written_a_band_at_a_time_in_slot_order():
    """Rows come in any order; each band of slots is held until its last row comes, then
    written as one row group in slot order; a band never filled is written at the end."""
    schema = pa.schema([("case_id", pa.string()), ("outcome", pa.string())])
    slots = np.array([9, 0, 4, 1, 8, 5, 2, 3, 6, 7, 12])
    bands = SpilledBands(schema, np.append(slots, 13), rows_per_band=4)  # slot 13's row never comes
    held = []
    for start in range(0, len(slots), 3):
        at = slots[start : start + 3]
        rows = pa.record_batch([pa.array([f"c{slot}" for slot in at]).dictionary_encode(), pa.array(["pass"] * len(at))], names=schema.names)
        bands.add(rows, at)
        held.append(bands.held)
    assert held == [3, 4, 3, 1]  # bands 8-9, 0-3 and 4-7 written as their last rows came
    stored, slots_written = bands.rows()
    assert list(slots_written) == [8, 9, 0, 1, 2, 3, 4, 5, 6, 7, 12]
    groups = [stored.row_groups().read(group, schema.names) for group in range(4)]
    assert [group.column("case_id").to_pylist() for group in groups] == [["c8", "c9"], ["c0", "c1", "c2", "c3"], ["c4", "c5", "c6", "c7"], ["c12"]]
    assert groups[0].schema.equals(schema) and bands.held == 0 and not left_behind()


def test_a_band_is_cast_and_written_a_slice_at_a_time(monkeypatch):
    """A band's text becomes plain values a slice of rows at a time (each slice a row group of
    the file), never the whole band at once: every band of a small suite comes due together."""
    monkeypatch.setattr("oloproof_pipeline.store.spill.SLICE_ROWS", 3)
    schema = pa.schema([("case_id", pa.string())])
    slots = np.array([6, 2, 0, 5, 1, 7, 3, 4])
    bands = SpilledBands(schema, slots, rows_per_band=8)
    for start in range(0, len(slots), 4):
        at = slots[start : start + 4]
        bands.add(pa.record_batch([pa.array([f"c{slot}" for slot in at]).dictionary_encode()], names=["case_id"]), at)
    stored, slots_written = bands.rows()
    assert list(slots_written) == list(range(8))
    groups = stored.row_groups()
    read = [groups.read(group, ["case_id"]) for group in range(len(groups.starts))]
    assert [group.num_rows for group in read] == [3, 3, 2]
    assert [value for group in read for value in group.column("case_id").to_pylist()] == [f"c{slot}" for slot in range(8)]
    assert all(group.schema.equals(schema) for group in read)
