"""Runs of one project at once (the nightly schedule firing while a person runs the CLI):
each waits for or reuses the others' work, none fails, every case is recorded once; and a
stored table read while another run writes it is read as the file it was when found."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd

from oloproof_pipeline.run.reuse import journal_is_newer
from oloproof_pipeline.store.journal import Journal
from oloproof_pipeline.store.layout import table_path, write_table_file
from oloproof_pipeline.store.stored import StoredTable
from oloproof_pipeline.store.tables import required_columns

from helpers import OLOPROOF, cli_environment
from test_day_thirty import calls, slow_project


def recorded_runs_frame(case_ids: list[str]) -> pd.DataFrame:
    """A recorded_runs table of these cases (every column a stored one has; the rest empty)."""
    frame = pd.DataFrame({name: [None] * len(case_ids) for name in required_columns("recorded_runs")})
    return frame.assign(case_id=case_ids, case_digest=[f"d-{case}" for case in case_ids], status="ok")


def test_a_table_replaced_by_another_run_is_read_as_it_was_when_found(tmp_path):
    """Another run writes the table (a rename over it) between a stage's reads: every later
    read, column, filtered row or write time, is still of the file the stage found."""
    path = table_path(tmp_path, "recorded_runs", "1.0.0")
    write_table_file(path, recorded_runs_frame(["c0", "c1", "c2"]))
    found = StoredTable.at(tmp_path, "recorded_runs", partition="1.0.0")
    assert len(found) == 3
    written_when_found = path.stat().st_mtime_ns
    write_table_file(path, recorded_runs_frame(["c9"]))  # the other run's table, newer and unlike it

    assert found.columns("case_id")["case_id"].tolist() == ["c0", "c1", "c2"]
    assert [row["case_id"] for row in found.rows_where("case_digest", "d-c1")] == ["c1"]
    assert found.rows([2], ["case_id", "status"]) == [{"case_id": "c2", "status": "ok"}]
    assert found.modified_ns == written_when_found
    # The journal of lines written after the table this stage found is still read beside it.
    journal = Journal.for_partition(tmp_path, "recorded_runs", "1.0.0")
    journal.append({"case_id": "c3"})
    path.touch()  # the other run's table is newer than the journal; the one found is not
    assert journal_is_newer(journal, found)
    assert StoredTable.at(tmp_path, "recorded_runs", partition="1.0.0").columns("case_id")["case_id"].tolist() == ["c9"]


def test_two_cli_runs_and_a_dagster_materialization_at_once_all_succeed_and_record_each_case_once(tmp_path):
    total = 12
    root = slow_project(tmp_path / "busy", total)
    environment = cli_environment()
    launched = [
        subprocess.Popen([OLOPROOF, "run", "--project", str(root)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env=environment)
        for _ in range(2)
    ]
    launched.append(subprocess.Popen(  # what the schedule's run does: the graph, materialized by Dagster
        [sys.executable, "-c", "import sys; from oloproof_pipeline.defs.launch import run_evaluation; "
         f"run = run_evaluation({str(root)!r}); print(run.errors); sys.exit(0 if run.success else 1)"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment,
    ))
    outputs = [process.communicate(timeout=600)[0] for process in launched]
    assert [process.returncode for process in launched] == [0, 0, 0], outputs  # the gate allows: every state is right
    assert calls(root) == total  # each case ran once: the runs that waited reused it
    runs = pd.read_parquet(table_path(root, "recorded_runs", "1.0.0"))
    assert sorted(runs["case_id"]) == [f"c{n:02d}" for n in range(total)] and (runs["status"] == "ok").all()
    journalled = [row["case_id"] for row in Journal.for_partition(root, "recorded_runs", "1.0.0").rows()]
    assert sorted(journalled) == sorted(runs["case_id"])
