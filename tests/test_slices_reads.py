"""Slicing a stored version reads what it counts: the recordings' trajectories a row group at a
time (never a whole column), and the rows come out as they do from the cases and recordings
as models."""

from __future__ import annotations

import pyarrow.parquet as pq

from oloproof_pipeline.decide.slices import slice_rows, slices_of_version
from oloproof_pipeline.model.slicing import parse_slice_spec
from oloproof_pipeline.project import load_project
from oloproof_pipeline.store.layout import table_path
from oloproof_pipeline.store.reuse import stored_tables
from oloproof_pipeline.store.stored import StoredTable
from oloproof_pipeline.store.tables import cases_with_copies, runs_from_table

from helpers import watch_reads


def test_slices_read_recordings_a_row_group_at_a_time_to_the_rows_the_models_give(evaluated_example, tmp_path, monkeypatch):
    project = load_project(evaluated_example[0])
    grouped_path = tmp_path / "recorded_runs.parquet"
    pq.write_table(pq.read_table(table_path(project.root, "recorded_runs", "1.0.0")), grouped_path, row_group_size=10)
    grouped = StoredTable(grouped_path)
    assert pq.ParquetFile(grouped_path).num_row_groups == -(-len(grouped) // 10) > 2

    read_whole, groups_read = watch_reads(monkeypatch, lambda table: table is grouped)
    stored = {**stored_tables(project, "1.0.0"), "recorded_runs": grouped, "slices": StoredTable()}
    _, rows, reuse = slices_of_version(project, stored, "1.0.0", run_id="again")
    assert not reuse.reused and "trajectory" not in read_whole
    assert set(groups_read) == set(range(pq.ParquetFile(grouped_path).num_row_groups))

    whole = stored_tables(project, "1.0.0")
    cases = cases_with_copies(whole["cases"].whole(), None)
    runs = runs_from_table(whole["recorded_runs"].whole())
    from_models = slice_rows(
        [parse_slice_spec(text) for text in project.config.slices], whole["verdicts"].whole(),
        {case.case_id: case for case in cases}, {run.case_id: run for run in runs},
        min_support=project.config.min_slice_support, confidence=project.release.confidence_level,
    )
    assert rows == from_models and any(row.slice.startswith("tool_calls") and row.support for row in rows)
