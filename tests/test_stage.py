"""The incremental stage (run/stage.py) and the launch's system (run/system.py's
ResolvedSystem): a stage imports the system only in the worker that runs what is left, a
launch's system of another version is refused before anything is imported, and a worker
refuses a system that reports another version than the declared one."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from oloproof_pipeline.model.cases import load_cases
from oloproof_pipeline.model.errors import ProjectError, SystemVersionMismatch
from oloproof_pipeline.project import load_project
from oloproof_pipeline.run.recording import record_case_table
from oloproof_pipeline.run.replaying import replay_fault_table
from oloproof_pipeline.run.system import ResolvedSystem
from oloproof_pipeline.run.trials import record_trial_table
from oloproof_pipeline.store.journal import Journal
from oloproof_pipeline.store.layout import table_path, write_table_file
from oloproof_pipeline.store.stored import StoredTable
from oloproof_pipeline.model.faults import FaultReplay
from oloproof_pipeline.model.records import RecordedRun
from oloproof_pipeline.store.tables import (
    FAULT_REPLAY_NESTED, FAULT_REPLAYS_SCHEMA, RECORDED_RUNS_SCHEMA, RUN_NESTED, RowBatches, case_table, frame_from_rows,
)

from conftest import write_project

# Each import of the system appends a line to IMPORTS, a file outside the project.
LOGGED_IMPORT = """
with open({imports!r}, "a") as _log:
    _log.write("imported\\n")
"""

TOOLBOX_APP = """
import copy

from oloproof_pipeline.toolbox import ToolBox


class System:
    {version_line}

    def __init__(self):
        self.state = {{}}
        self.toolbox = ToolBox({{"pay": self._pay, "escalate": self._escalate}})

    def reset(self, state):
        self.state = state

    def snapshot(self):
        return copy.deepcopy(self.state)

    def _pay(self, key):
        self.state["paid"] = True
        return {{"status": "paid"}}

    def _escalate(self, key):
        return {{"status": "escalated"}}

    def __call__(self, request):
        if "error" in self.toolbox.call("pay", key="a"):
            self.toolbox.call("escalate", key="a")
            self.toolbox.finish("failure")
        return {{"done": True}}
"""

# No tool box and no replay method: its recordings carry checkpoints, but it cannot be replayed.
UNREPLAYABLE_APP = """
class System:
    def __call__(self, request):
        self._trajectory = {
            "steps": [
                {"kind": "tool_call", "tool": "pay", "arguments": {"key": "a"}},
                {"kind": "tool_result", "tool": "pay", "result": {"status": "paid"}},
            ],
            "checkpoints": [{"step": 0, "calls_before": 0}],
        }
        return {"answer": "paid"}

    def trajectory(self):
        return self._trajectory
"""

FAULT_RECOVERY = {"type": "fault_recovery", "tool": "pay", "fault": "error", "escalate_tools": ["escalate"]}


def logged_project(tmp_path: Path, app: str, *, reported: str | None = None, extra_config: str = "") -> tuple[Path, Path]:
    """A project whose system logs each import to a file outside it: (root, that file)."""
    imports = tmp_path / "imports.log"
    version_line = f"version = {reported!r}" if reported is not None else "pass"
    source = app.format(version_line=version_line) if "{version_line}" in app else app
    cases = [{"id": f"c-{n}", "input": {}, "initial_state": {"paid": False}} for n in range(3)]
    root = write_project(
        tmp_path / "p", app=source + LOGGED_IMPORT.format(imports=str(imports)), cases=cases,
        evaluators=[FAULT_RECOVERY], rules=[], extra_config=extra_config,
    )
    return root, imports


def imports_of(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def cases_of(root: Path):
    project = load_project(root)
    return project, StoredTable.of(case_table(load_cases(project)))


def test_a_launch_system_of_another_version_is_refused_before_anything_is_imported(tmp_path):
    root, imports = logged_project(tmp_path, TOOLBOX_APP)
    project, cases = cases_of(root)
    launched = ResolvedSystem(version="2.0.0", code_digest="any")
    with pytest.raises(SystemVersionMismatch, match="refusing to record partition '1.0.0': the loaded system app:System is version '2.0.0'"):
        record_case_table(project, cases, version="1.0.0", run_id="r1", system=launched)
    assert imports_of(imports) == 0
    assert not Journal.for_partition(root, "recorded_runs", "1.0.0").path.exists()


def test_a_declared_version_is_never_probed_the_recording_and_replay_workers_import_once_each(tmp_path):
    root, imports = logged_project(tmp_path, TOOLBOX_APP)
    project, cases = cases_of(root)
    # No launch system (a run started without the tag): a declared version is taken as it stands.
    runs, recorded = record_case_table(project, cases, version="1.0.0", run_id="r1")
    assert (recorded.new, set(runs["status"])) == (3, {"ok"})
    assert imports_of(imports) == 1  # the recording worker, no probe
    # The launch did not import the system, so whether it can be replayed is its worker's to say.
    launched = ResolvedSystem(version="1.0.0", code_digest="any", replayable=None)
    replays, replayed = replay_fault_table(project, cases, StoredTable.of(runs), version="1.0.0", run_id="r2", system=launched)
    assert (replayed.new, set(replays["outcome"])) == (3, {"PASS"})
    assert imports_of(imports) == 2
    # Nothing left: nothing imported, with or without a launch system.
    _, again = record_case_table(project, cases, version="1.0.0", run_id="r3")
    _, replayed_again = replay_fault_table(project, cases, StoredTable.of(runs), version="1.0.0", run_id="r4", system=launched)
    assert (again.new, again.reused, replayed_again.new, replayed_again.reused) == (0, 3, 0, 3)
    assert imports_of(imports) == 2


def test_each_finished_row_is_journalled_as_the_values_its_table_holds(tmp_path):
    """A row is encoded once for its table and its journal: the journal line carries the nested
    values as the JSON they are (never as text of JSON), and the journals alone rebuild the
    recordings and the replays tables cell for cell."""
    root, _ = logged_project(tmp_path, TOOLBOX_APP)
    project, cases = cases_of(root)
    runs, _ = record_case_table(project, cases, version="1.0.0", run_id="r1")
    replays, _ = replay_fault_table(project, cases, StoredTable.of(runs), version="1.0.0", run_id="r2")
    for table, frame, model, schema, nested, member in (
        ("recorded_runs", runs, RecordedRun, RECORDED_RUNS_SCHEMA, RUN_NESTED, "trajectory"),
        ("fault_replays", replays, FaultReplay, FAULT_REPLAYS_SCHEMA, FAULT_REPLAY_NESTED, "faulted_trajectory"),
    ):
        lines = list(Journal.for_partition(root, table, "1.0.0").lines_of(model))
        assert len(lines) == 3 and all(isinstance(line[member], dict) for line in lines)
        rebuilt = frame_from_rows(lines, schema, nested)
        by_case = lambda rows: rows.sort_values("case_id", ignore_index=True)  # noqa: E731 - in the order they finished
        pd.testing.assert_frame_equal(by_case(rebuilt), by_case(frame[rebuilt.columns]), check_dtype=False, check_categorical=False)


def test_a_run_cut_short_is_resumed_from_its_journal_each_line_made_a_table_row_as_it_is_read(tmp_path, monkeypatch):
    """Resuming reads the journal a line at a time into the table's batches: a journal of tens
    of thousands of lines is never held as values all at once."""
    root, imports = logged_project(tmp_path, TOOLBOX_APP)
    project, cases = cases_of(root)
    first, _ = record_case_table(project, cases, version="1.0.0", run_id="r1")  # journalled; its table never written

    lines_read, read_at_each_batch = [0], []
    numbered_rows = Journal._numbered_rows

    def counted(journal):
        for each in numbered_rows(journal):
            lines_read[0] += 1
            yield each

    flush = RowBatches._flush

    def noted(batches):
        if batches._pending:
            read_at_each_batch.append(lines_read[0])
        flush(batches)

    monkeypatch.setattr(Journal, "_numbered_rows", counted)
    monkeypatch.setattr(RowBatches, "_flush", noted)
    monkeypatch.setattr(RowBatches, "ROWS", 1)
    resumed, summary = record_case_table(project, cases, version="1.0.0", run_id="r2")
    assert (summary.new, summary.reused) == (0, 3)
    assert imports_of(imports) == 1  # nothing left to record: the system is not imported again
    assert read_at_each_batch[:3] == [1, 2, 3]  # each line a batch before the next is read
    # The rows a rerun reads from the stored table instead (these cases are alike: one recording serves all).
    write_table_file(table_path(root, "recorded_runs", "1.0.0"), first)
    rerun, summary = record_case_table(project, cases, version="1.0.0", run_id="r3")
    assert (summary.new, summary.reused) == (0, 3)
    pd.testing.assert_frame_equal(resumed, rerun)


def test_a_system_reporting_another_version_than_declared_records_each_case_as_an_error(tmp_path):
    root, imports = logged_project(tmp_path, TOOLBOX_APP, reported="2.0.0")
    project, cases = cases_of(root)
    launched = ResolvedSystem(version="1.0.0", code_digest="any")  # the declared one, not probed
    runs, summary = record_case_table(project, cases, version="1.0.0", run_id="r1", system=launched)
    refusal = f"{root.resolve() / 'oloproof.yaml'}: system.version: recording version '1.0.0', but the system reports '2.0.0'"
    assert list(runs["status"]) == ["error"] * 3
    assert list(runs["error"]) == [refusal] * 3
    assert summary.failed == 3
    journalled = [json.loads(line) for line in Journal.for_partition(root, "recorded_runs", "1.0.0").path.read_text().splitlines()]
    assert [row["status"] for row in journalled] == ["error"] * 3
    # Never a recording to reuse: the next run records the cases again, saying why.
    _, again = record_case_table(project, cases, version="1.0.0", run_id="r2", system=launched)
    assert again.new == 3 and again.reasons() == ["3 cases re-recorded: the last recording was not clean (error)"]
    # ... and there is nothing clean to replay.
    replays, replayed = replay_fault_table(project, cases, StoredTable.of(runs), version="1.0.0", run_id="r3", system=launched)
    assert (len(replays), replayed.new) == (0, 0)


@pytest.mark.parametrize("replayable", [False, None])
def test_an_unreplayable_system_is_refused_before_any_replay_whoever_finds_it_out(tmp_path, replayable):
    root, imports = logged_project(tmp_path, UNREPLAYABLE_APP)
    project, cases = cases_of(root)
    runs, _ = record_case_table(project, cases, version="1.0.0", run_id="r1")
    assert imports_of(imports) == 1
    launched = ResolvedSystem(version="1.0.0", code_digest="any", replayable=replayable)
    with pytest.raises(ProjectError) as refused:
        replay_fault_table(project, cases, StoredTable.of(runs), version="1.0.0", run_id="r2", system=launched)
    assert str(refused.value) == (
        f"{root.resolve() / 'oloproof.yaml'}: evaluators[0] (fault_recovery recovers_from_error_at_pay): the system "
        "app:System neither uses the tool box nor has a replay(trajectory, *, checkpoint, change) method, "
        "so its cases cannot be replayed"
    )
    # Known unreplayable: refused with nothing imported; unknown: its replay worker found out.
    assert imports_of(imports) == (1 if replayable is False else 2)
    assert not Journal.for_partition(root, "fault_replays", "1.0.0").path.exists()


def test_all_later_trials_run_in_one_sandbox_in_trial_then_case_order(tmp_path):
    root, imports = logged_project(tmp_path, TOOLBOX_APP)
    config = json.loads((root / "oloproof.yaml").read_text())
    config["execution"]["trials"] = 4
    (root / "oloproof.yaml").write_text(json.dumps(config))
    project, cases = cases_of(root)
    frame, summary = record_trial_table(project, cases, version="1.0.0", run_id="r1")
    assert summary.new == 9 and imports_of(imports) == 1  # trials 2, 3 and 4: one worker
    assert list(zip(frame["trial"], frame["case_id"])) == [(trial, f"c-{n}") for trial in (2, 3, 4) for n in range(3)]
    journalled = pd.read_json(Journal.for_partition(root, "trial_runs", "1.0.0").path, lines=True)
    assert list(zip(journalled["trial"], journalled["case_id"])) == list(zip(frame["trial"], frame["case_id"]))
