"""A recording comes back from its worker as its row (model/records.py's RecordingRow), a
replay as its text (RunText): the nested values as the text `recorded_runs` and
`fault_replays` store, which the evaluating process writes through without encoding it
again. That text must be what the tables held when the run travelled as a model and was
encoded again there."""

from __future__ import annotations

import pytest

from oloproof_pipeline.model.digests import canonical_json
from oloproof_pipeline.model.records import EnvironmentState, RecordedRun, RecordingRow, ReplayResult
from oloproof_pipeline.model.trajectory import MODEL_STEP, USER_STEP, Step, Trajectory
from oloproof_pipeline.run.channel import WorkerMessage
from oloproof_pipeline.run.worker import as_line, recording_row, replay_text
from oloproof_pipeline.store.tables import RECORDED_RUNS_SCHEMA, RUN_NESTED, _json_columns, _prepared


def as_stored_before(run: RecordedRun) -> dict:
    """The columns as the evaluating process made them when the recording came as a model:
    read back from the worker's JSON, dumped, and each nested value encoded."""
    again = RecordedRun.model_validate_json(run.model_dump_json())
    trajectory = again.trajectory or Trajectory()
    row = {**again.model_dump(mode="json"), **trajectory.model_usage(), **trajectory.user_usage()}
    return _prepared(row, RECORDED_RUNS_SCHEMA, _json_columns(RECORDED_RUNS_SCHEMA, RUN_NESTED))


def a_run(**fields) -> RecordedRun:
    return RecordedRun(**{"case_id": "c1", "case_digest": "sha256:1", "system_version": "1.0.0", "status": "ok", **fields})


ODD_RESULTS = [
    ("a tuple, text beyond ASCII", (1, [2.5, {"b": None, "a": "é\u2028"}])),
    ("floats", {"big": 1e300, "small": 5e-324, "whole": 2.0, "inf": float("inf")}),
    ("keys out of order", {"z": 1, "a": {"y": [], "b": True}}),
    ("keys not text, a set", {1: "one", 2.5: {True: None}, "s": {3}}),
    ("not a number", {"nan": float("nan"), "minus": float("-inf")}),
]


@pytest.mark.parametrize("what,result", ODD_RESULTS, ids=[what for what, _ in ODD_RESULTS])
def test_a_row_holds_the_text_the_table_held_when_the_recording_came_as_a_model(what, result):
    steps = [Step(kind="tool_call", tool="pay", arguments={"amount": 3}), Step(kind="tool_result", tool="pay", result=result)]
    run = a_run(output={"answer": result}, trajectory=Trajectory(steps=steps), duration_s=0.25, found_files={"app.py": "d1"})
    row = run.as_row()
    expected = as_stored_before(run)
    for name in RecordingRow.model_fields:
        if name in RECORDED_RUNS_SCHEMA.names:
            assert getattr(row, name) == expected[name], name
    assert row.found_files == {"app.py": "d1"}
    # ... and it reads back as the recording it was (as the worker's JSON reads back).
    assert row.as_run() == RecordedRun.model_validate_json(run.model_dump_json())


@pytest.mark.parametrize("what,result", ODD_RESULTS, ids=[what for what, _ in ODD_RESULTS])
def test_a_replays_text_is_what_the_table_held_when_it_came_as_a_model(what, result):
    steps = [Step(kind="tool_call", tool="pay"), Step(kind="tool_result", tool="pay", result=result)]
    state = EnvironmentState(initial="sha256:0", state={"orders": {"b": result, "a": 1}})
    replay = ReplayResult(status="ok", output=[result], trajectory=Trajectory(steps=steps), environment_state=state, duration_s=0.5)
    text = replay.as_text()
    again = ReplayResult.model_validate_json(replay.model_dump_json())
    for name in ("output", "trajectory", "environment_state"):
        assert getattr(text, name) == canonical_json(again.model_dump(mode="json")[name]), name
    assert text.as_result() == again


def test_a_rows_usage_counts_live_model_and_user_turns_as_the_table_did():
    steps = [
        Step(kind=MODEL_STEP, result={"usage": {"prompt_tokens": 7, "completion_tokens": 2}, "latency_s": 0.5}),
        Step(kind=MODEL_STEP, result={"usage": {"prompt_tokens": 100, "completion_tokens": 100}, "served": True}),
        Step(kind=USER_STEP, text="hi", result={"usage": {"prompt_tokens": 3, "completion_tokens": 1}}),
    ]
    row = a_run(trajectory=Trajectory(steps=steps)).as_row()
    assert (row.model_calls, row.prompt_tokens, row.completion_tokens, row.model_latency_s) == (1, 7, 2, 0.5)
    assert (row.user_calls, row.user_prompt_tokens, row.user_completion_tokens) == (1, 3, 1)
    # A scripted system's recording (no model turn) and one with no trajectory count none.
    for run in (a_run(trajectory=Trajectory(steps=[Step(kind="tool_call", tool="pay")])), a_run(status="error", error="boom")):
        row = run.as_row()
        assert (row.model_calls, row.user_calls, row.trajectory is None) == (None, None, run.trajectory is None)


def test_a_trajectory_that_is_not_json_makes_the_case_not_json_never_an_unreadable_answer():
    steps = [Step(kind="tool_result", tool="pay", result={"when": object()})]
    row = recording_row(a_run(output={"answer": 1}, trajectory=Trajectory(steps=steps)))
    assert row.status == "not_json" and row.error.startswith("what the system recorded is not JSON: ")
    assert row.trajectory is None and row.output == '{"answer":1}'
    replayed = replay_text(ReplayResult(status="ok", trajectory=Trajectory(steps=steps)))
    assert replayed.status == "not_json" and replayed.error == row.error and replayed.trajectory is None


def test_text_that_is_not_utf8_costs_the_case_never_the_run():
    """A lone surrogate the system left in its output (which reads as JSON) or in its error
    cannot be sent: the case is `not_json`, and the answer is still one readable line."""

    def answered(run: RecordedRun) -> RecordingRow:
        return WorkerMessage.model_validate_json(as_line(WorkerMessage(recorded=recording_row(run)))).recorded

    in_output = answered(a_run(output={"answer": "x\ud800"}, trajectory=Trajectory()))
    assert in_output.status == "not_json" and (in_output.output, in_output.trajectory) == (None, None)
    in_error = answered(a_run(status="error", error="boom \ud800", output={"answer": 1}))
    assert in_error.status == "not_json" and in_error.output == '{"answer":1}'
