"""Judging reads what a chunk of clusters needs: recordings stored in several row groups, and
the cases and their copies, are read a row group at a time, never as whole columns, and the
verdicts come out as they do from recordings read whole."""

from __future__ import annotations

import gc
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from oloproof_pipeline.evaluators import chunk_inputs, judging
from oloproof_pipeline.evaluators.judging import judge_verdict_table
from oloproof_pipeline.evaluators.verdict_keys import VerdictSummary, WantedVerdicts, reusable_entries, why_judged
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


def test_each_reason_a_stored_verdict_is_judged_again_is_found_from_its_keys_read_a_row_group_at_a_time(tmp_path, monkeypatch):
    """At 100,000 source cases an evaluator changed re-judges 300,000 of 1.8 million verdicts:
    their stored keys are read at those rows, a row group at a time, never as whole columns."""
    cases = ["a", "b", "c", "d", "e", "f", "g"]
    wanted = WantedVerdicts(
        case_id_column=pa.array(cases), criterion_names=["state_correct"], digests=["D"],
        recording_key_column=pa.array([f"r-{case}" for case in cases]), inputs_keys=pa.array([f"k-{case}" for case in cases]),
        evaluators=1,
    )
    stored_rows = {  # case -> (evaluator_digest, recording_key, inputs_key); g is not stored
        "f": ("D", "r-f", "k-f"),                # its key holds: reused
        "e": ("D", "r-e", "k-e-before"),         # the same recording: its replay or source's changed
        "d": ("D", "r-d-before", "k-d-before"),
        "c": ("C", "r-c", "k-c-before"),
        "b": ("D", "r-b", None),                 # its judge did not answer
        "a": (None, None, None),                 # judged before cache keys
    }
    path = tmp_path / "verdicts.parquet"
    pq.write_table(pa.table({
        "case_id": list(stored_rows), "criterion": ["state_correct"] * len(stored_rows),
        **{name: [keys[index] for keys in stored_rows.values()] for index, name in enumerate(("evaluator_digest", "recording_key", "inputs_key"))},
    }), path, row_group_size=2)
    stored = StoredTable(path)
    read_whole, groups_read = watch_reads(monkeypatch, lambda table: table is stored)

    reuse, positions = reusable_entries(wanted, stored)
    assert reuse.tolist() == [False, False, False, False, False, True, False]
    summary = VerdictSummary()
    why_judged(wanted, np.flatnonzero(~reuse), positions, stored, summary)

    assert summary.reasons() == [
        "1 verdict for state_correct re-judged: no cache key stored with the verdict",
        "1 verdict for state_correct re-judged: its judge did not answer last time",
        "1 verdict for state_correct re-judged: evaluator changed",
        "1 verdict for state_correct re-judged: recording changed",
        "1 verdict for state_correct re-judged: fault replay or the source's recording changed",
        "1 verdict for state_correct judged: new case",
    ]
    assert set(read_whole) == {"case_id", "criterion"}  # to find each case's row; no key column whole
    assert sorted(groups_read) == [0, 0, 1, 1, 2, 2]  # each group once for the inputs keys, once for the others
