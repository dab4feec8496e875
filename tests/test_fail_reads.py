"""The gate's summary of what the graders caught reads the FAIL verdicts a row group at a time:
at 100,000 source cases they are a quarter of a million rows, and reading them whole with
their details parsed cost the run's printout 266 MiB."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from oloproof_pipeline.read.violations import violation_summary
from oloproof_pipeline.store.stored import StoredTable

FAILED_AT = [0, 1, 2, 25, 30, None]  # none in rows 10-19; row 35's outcome is null


def stored_verdicts(path):
    rows = []
    for index in range(40):
        outcome = "FAIL" if index in FAILED_AT else (None if index == 35 else "PASS")
        details = json.dumps({"violations": [{"rule": "no_double_refund", "step": index}]}) if outcome == "FAIL" else None
        rows.append({"case_id": f"c{index}", "criterion": "trace", "outcome": outcome, "reason": "r" * 50, "details": details})
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=10)
    return StoredTable(path)


def test_fail_rows_are_read_a_row_group_at_a_time_with_only_the_columns_named(tmp_path, monkeypatch):
    table = stored_verdicts(tmp_path / "verdicts.parquet")
    reads = []
    read_row_group = pq.ParquetFile.read_row_group

    def counted(self, index, columns=None, **options):
        reads.append((index, tuple(columns)))
        return read_row_group(self, index, columns=columns, **options)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", counted)
    fails = table.rows_where("outcome", "FAIL", ["details"], names=("case_id", "outcome", "details"))
    first = next(fails)
    assert first == {"case_id": "c0", "outcome": "FAIL", "details": {"violations": [{"rule": "no_double_refund", "step": 0}]}}
    assert reads == [(0, ("outcome",)), (0, ("case_id", "outcome", "details"))]  # nothing of the later groups yet
    rest = list(fails)
    assert [row["case_id"] for row in rest] == ["c1", "c2", "c25", "c30"]  # a null outcome never matches
    # A group with no FAIL is read for its outcomes alone; the reasons are never read.
    assert reads[2:] == [(1, ("outcome",)), (2, ("outcome",)), (2, ("case_id", "outcome", "details")),
                         (3, ("outcome",)), (3, ("case_id", "outcome", "details"))]


def test_the_violations_summary_takes_the_fails_as_they_are_read(tmp_path):
    table = stored_verdicts(tmp_path / "verdicts.parquet")
    summary = violation_summary(table.rows_where("outcome", "FAIL", ["details"], names=("case_id", "criterion", "outcome", "details")))
    assert summary == [{
        "criterion": "trace", "rules": ["no_double_refund"], "cases": 5, "violations": 5,
        "examples": ["c0: step 0", "c1: step 1", "c2: step 2"],
    }]


def test_a_table_not_stored_yet_or_held_in_memory_gives_its_matching_rows_alike(tmp_path):
    assert list(StoredTable.at(tmp_path, "verdicts", partition="1.0.0").rows_where("outcome", "FAIL", ["details"])) == []
    held = StoredTable.of(pd.DataFrame({"case_id": ["a", "b", "c"], "outcome": ["FAIL", "PASS", None]}))
    assert list(held.rows_where("outcome", "FAIL")) == [{"case_id": "a", "outcome": "FAIL"}]
