"""A recording stage that reuses most of its stored table writes it a row group at a time
(store/assembly.py): with one case added, the file written is the one `to_parquet` of the
whole table would write (rows, order, schema, pandas metadata), and no reused recording is
decoded into a model on the way."""

from __future__ import annotations

import pandas as pd
import pyarrow.parquet as pq

from oloproof_pipeline.model.cases import load_cases
from oloproof_pipeline.model.records import RecordedRun
from oloproof_pipeline.project import load_project
from oloproof_pipeline.run.recording import record_case_rows
from oloproof_pipeline.store import assembly
from oloproof_pipeline.store.journal import Journal
from oloproof_pipeline.store.layout import table_path, write_table_file
from oloproof_pipeline.store.stored import StoredTable
from oloproof_pipeline.store.tables import RECORDED_RUNS_SCHEMA, RUN_NESTED, case_table, frame_from_rows

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
