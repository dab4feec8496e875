"""Judging reads what a chunk of clusters needs: recordings stored in several row groups, and
the cases and their copies, are read a row group at a time, never as whole columns, and the
verdicts come out as they do from recordings read whole."""

from __future__ import annotations

import gc
import tempfile

import pyarrow.parquet as pq
import pytest

from oloproof_pipeline.evaluators import chunk_inputs, judging
from oloproof_pipeline.evaluators.judging import judge_verdict_table
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


def test_verdicts_are_written_a_band_of_the_table_at_a_time_to_the_same_table(evaluated_example, tmp_path, monkeypatch):
    """The rows judged are written to a file of their own, a row group per band of the table's
    slots as each band fills (chunks of clusters come in another order than the table's), and
    the table written from it reads each band once: the very table one band makes."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the rows are spilled (other runs spill to the shared one)
    project = load_project(evaluated_example[0])

    def judged() -> tuple[object, list[int]]:
        stored = stored_tables(project, "1.0.0")
        _, bands_read = watch_reads(monkeypatch, lambda table: all(table is not known for known in stored.values()))  # the spilled rows
        table, _ = judge_verdict_table(
            project, stored["cases"], stored["recorded_runs"], stored["fault_replays"], StoredTable.of(None), version="1.0.0", judged_by_run="again",
        )
        return table, bands_read

    one_band, _ = judged()
    monkeypatch.setattr(chunk_inputs, "CLUSTERS_PER_CHUNK", 1)
    monkeypatch.setattr(judging, "VERDICT_GROUP_ROWS", 5)
    banded, bands_read = judged()
    assert banded.equals(one_band)
    assert sorted(bands_read) == list(range(-(-len(one_band) // 5)))  # each band read once
    assert not list(tmp_path.glob("oloproof-rows-*"))


def test_a_judging_step_that_fails_leaves_no_spilled_rows_behind(evaluated_example, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(chunk_inputs, "CLUSTERS_PER_CHUNK", 1)
    monkeypatch.setattr(judging, "VERDICT_GROUP_ROWS", 2)
    project = load_project(evaluated_example[0])
    stored = stored_tables(project, "1.0.0")
    judge_chunk, chunks = judging.judge_chunk, []

    def failing_on_the_third(*args, **kwargs):
        chunks.append(len(args[3]))
        if len(chunks) == 3:
            assert list(tmp_path.glob("oloproof-rows-*"))  # bands written already
            raise RuntimeError("judging broke")
        return judge_chunk(*args, **kwargs)

    monkeypatch.setattr(judging, "judge_chunk", failing_on_the_third)
    with pytest.raises(RuntimeError, match="judging broke"):
        judge_verdict_table(
            project, stored["cases"], stored["recorded_runs"], stored["fault_replays"], StoredTable.of(None), version="1.0.0", judged_by_run="again",
        )
    gc.collect()
    assert len(chunks) == 3 and not list(tmp_path.glob("oloproof-rows-*"))
