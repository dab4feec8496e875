"""Slicing a stored version reads what it counts: the recordings' trajectories a row group at a
time (never a whole column), and the rows come out as they do from the cases and recordings
as models."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from oloproof_pipeline.decide.slices import (
    SLICED_VERDICT_COLUMNS, buckets_from_tables, project_slices_of, slice_rows, slices_inputs_digest, slices_of_version,
)
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


def test_slices_read_verdicts_a_row_group_at_a_time_and_their_digest_follows_every_sliced_value(evaluated_example, tmp_path, monkeypatch):
    """The slices' inputs digest and counts read the verdicts' sliced columns a row group at a
    time (never a whole column); the rows are those the whole frame gives, and the digest
    changes with any one sliced value of any group, not with another column."""
    project = load_project(evaluated_example[0])
    stored_verdicts = pq.read_table(table_path(project.root, "verdicts", "1.0.0"))
    grouped_path = tmp_path / "verdicts.parquet"
    pq.write_table(stored_verdicts, grouped_path, row_group_size=25)
    grouped = StoredTable(grouped_path)
    groups = pq.ParquetFile(grouped_path).num_row_groups
    assert groups > 3

    read_whole, groups_read = watch_reads(monkeypatch, lambda table: table is grouped)
    stored = {**stored_tables(project, "1.0.0"), "verdicts": grouped, "slices": StoredTable()}
    _, rows, reuse = slices_of_version(project, stored, "1.0.0", run_id="again")
    assert not reuse.reused and read_whole == []
    assert sorted(groups_read) == sorted(list(range(groups)) * 2)  # once for the digest, once for the counts
    whole = stored_tables(project, "1.0.0")
    buckets = buckets_from_tables([parse_slice_spec(text) for text in project.config.slices], whole["cases"], whole["recorded_runs"])
    assert rows == project_slices_of(project, whole["verdicts"].whole(), buckets)

    digest = slices_inputs_digest(project, grouped)
    assert slices_inputs_digest(project, StoredTable(table_path(project.root, "verdicts", "1.0.0"))) != digest  # other groups
    last = stored_verdicts.num_rows - 1
    for column in SLICED_VERDICT_COLUMNS:  # one value changed in the last group
        values = stored_verdicts.column(column).to_pylist()
        values[last] = None if values[last] is not None else "x"
        changed = tmp_path / f"changed-{column}.parquet"
        pq.write_table(stored_verdicts.set_column(stored_verdicts.schema.get_field_index(column), column, pa.array(values, stored_verdicts.schema.field(column).type)), changed, row_group_size=25)
        assert slices_inputs_digest(project, StoredTable(changed)) != digest, column
    other = tmp_path / "other-column.parquet"
    reason = stored_verdicts.schema.get_field_index("reason")
    pq.write_table(stored_verdicts.set_column(reason, "reason", pa.array(["else"] * stored_verdicts.num_rows, stored_verdicts.schema.field(reason).type)), other, row_group_size=25)
    assert slices_inputs_digest(project, StoredTable(other)) == digest
