"""Judging reads what a chunk of clusters needs: recordings stored in several row groups, and
the cases and their copies, are read a row group at a time, never as whole columns, and the
verdicts come out as they do from recordings read whole."""

from __future__ import annotations

import pyarrow.parquet as pq

from oloproof_pipeline.evaluators import chunk_inputs
from oloproof_pipeline.evaluators.judging import judge_verdict_table
from oloproof_pipeline.evaluators.verdict_rows import VerdictColumns
from oloproof_pipeline.project import load_project
from oloproof_pipeline.store.layout import table_path
from oloproof_pipeline.store.reuse import stored_tables
from oloproof_pipeline.store.stored import StoredTable

from helpers import watch_reads


def test_recordings_in_row_groups_are_judged_a_group_at_a_time_to_the_same_verdicts(evaluated_example, tmp_path, monkeypatch):
    project = load_project(evaluated_example[0])
    stored = stored_tables(project, "1.0.0")
    whole, _ = judge_verdict_table(
        project, stored["cases"], stored["recorded_runs"], stored["fault_replays"], StoredTable.of(None),
        version="1.0.0", judged_by_run="again",
    )

    grouped_path = tmp_path / "recorded_runs.parquet"
    pq.write_table(pq.read_table(table_path(project.root, "recorded_runs", "1.0.0")), grouped_path, row_group_size=10)
    grouped = StoredTable(grouped_path)
    assert pq.ParquetFile(grouped_path).num_row_groups == -(-len(grouped) // 10) > 2

    read_whole, groups_read = watch_reads(monkeypatch, lambda table: table is grouped)
    cases_read_whole, _ = watch_reads(monkeypatch, lambda table: table is stored["cases"])
    stored = stored_tables(project, "1.0.0")
    by_group, summary = judge_verdict_table(
        project, stored["cases"], grouped, stored["fault_replays"], StoredTable.of(None), version="1.0.0", judged_by_run="again",
    )
    assert summary.judged == len(by_group) == len(whole)
    assert by_group.equals(whole)
    assert "trajectory" not in read_whole and "environment_state" not in read_whole  # only keys read whole
    assert set(groups_read) == set(range(pq.ParquetFile(grouped_path).num_row_groups))
    assert set(cases_read_whole) <= {"case_id", "source_id", "group_id"}  # the cases' keys; their inputs and states by group


def test_the_small_batches_of_each_chunk_are_held_merged_to_the_same_verdicts(evaluated_example, monkeypatch):
    """Each chunk's verdict rows are a small batch; held merged (dictionaries unified) a few
    thousand rows at a time, they make the very table the chunks' batches made."""
    project = load_project(evaluated_example[0])

    def judged() -> tuple[object, list[int]]:
        stored = stored_tables(project, "1.0.0")
        held: list[int] = []
        compact = VerdictColumns.compact
        monkeypatch.setattr(VerdictColumns, "compact", lambda self: (held.extend(batch.num_rows for batch in self._batches + self._small), compact(self))[1])
        table, _ = judge_verdict_table(
            project, stored["cases"], stored["recorded_runs"], stored["fault_replays"], StoredTable.of(None), version="1.0.0", judged_by_run="again",
        )
        return table, held

    monkeypatch.setattr(chunk_inputs, "CLUSTERS_PER_CHUNK", 1)
    monkeypatch.setattr(VerdictColumns, "MERGED_ROWS", 10**9)
    apart, batches_apart = judged()
    monkeypatch.setattr(VerdictColumns, "MERGED_ROWS", 12)
    merged, batches_merged = judged()
    assert merged.equals(apart)
    assert len(batches_merged) < len(batches_apart) and all(rows >= 12 for rows in batches_merged[:-1])
