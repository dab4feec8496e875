"""Stored rows decode into the very models `json.loads` and `model_validate` made of them:
hostile values (floats at their edges, huge integers, odd text, deep nesting, escapes a
fast parser refuses) read back identically, and a row that failed to decode still fails."""

from __future__ import annotations

import gc
import json
import threading
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from pydantic import BaseModel, ValidationError

from oloproof_pipeline.model.cases import CaseRecord
from oloproof_pipeline.model.faults import FaultReplay
from oloproof_pipeline.model.records import RecordedRun
from oloproof_pipeline.store import layout
from oloproof_pipeline.store.decoding import GroupedRows, case_models, case_stream, replay_models, run_models
from oloproof_pipeline.store.layout import write_table_file
from oloproof_pipeline.store.stored import StoredTable
from oloproof_pipeline.store.tables import (
    CASE_NESTED,
    FAULT_REPLAY_NESTED,
    FAULT_REPLAYS_SCHEMA,
    RUN_NESTED,
    case_table,
    models_to_frame,
    recorded_runs_table,
)

FLOATS = [0.1, 1e-7, 1e16, 1e22, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, -0.0, 0.30000000000000004, 21.25, 3.0]
INTEGERS = [0, -1, 2**53 + 1, 2**63, 2**64 + 7, -(2**70), 10**30]
TEXTS = ["", "\u2028\u2029", "caf\u00e9 \U0001f600", "\x00\x1f\x7f", 'q"uote\\back/slash', "</script>", "\ud7ff\ue000\uffff", "tab\tnew\nline"]


def nested(depth: int):
    value: object = {"leaf": True}
    for level in range(depth):
        value = [value] if level % 2 else {"d": value}
    return value


def hostile_value(seed: int):
    """JSON values a system may leave behind: every float, integer and text above, in
    lists and under keys that are themselves odd."""
    return {
        "floats": FLOATS[seed % len(FLOATS):] + FLOATS[: seed % len(FLOATS)],
        "integers": INTEGERS,
        "texts": {text or "empty": text for text in TEXTS},
        "mixed": [1, 1.0, True, None, "1", [], {}],
        "deep": nested(150),  # deeper than most parsers' default would go
    }


def trajectory(seed: int) -> dict:
    return {
        "steps": [
            {"kind": "tool_call", "tool": "t\u2028", "arguments": {"x": FLOATS[seed % len(FLOATS)], "n": INTEGERS[seed % len(INTEGERS)]}},
            {"kind": "tool_result", "tool": "t\u2028", "result": hostile_value(seed)},
        ],
        "checkpoints": [{"step": 0, "calls_before": 0, "label": TEXTS[seed % len(TEXTS)]}],
        "constraints": [{"name": "c", "passed": seed % 2 == 0, "detail": None, "step": 1}],
    }


def hostile_runs(count: int) -> list[RecordedRun]:
    return [
        RecordedRun(
            case_id=f"c{seed}", case_digest=f"sha256:{seed}", system_version="1.0.0", status="ok",
            error=TEXTS[seed % len(TEXTS)] or None, output=hostile_value(seed + 1), trajectory=trajectory(seed),
            environment_state={"initial": "sha256:0", "state": hostile_value(seed + 2)},
            duration_s=FLOATS[seed % len(FLOATS)], recorded_by_run="run\u2028",
        )
        for seed in range(count)
    ]


def hostile_cases(count: int) -> list[CaseRecord]:
    return [
        CaseRecord(
            case_id=f"c{seed}", case_digest=f"sha256:{seed}", group_id=TEXTS[seed % len(TEXTS)], input=hostile_value(seed),
            initial_state={"orders": hostile_value(seed + 3)}, expected={"state": {"x": INTEGERS[seed % len(INTEGERS)]}},
            metadata={"\u2028": TEXTS}, events=[{"at_step": 1, "event": "e", "v": FLOATS}], line=seed or None,
        )
        for seed in range(count)
    ]


def hostile_replays(count: int) -> list[FaultReplay]:
    return [
        FaultReplay(
            case_id=f"c{seed}", case_digest=f"sha256:{seed}", system_version="1.0.0", criterion="recovers", tool="t",
            fault="timeout", occurrence=1, plan_digest="p", outcome="PASS", reason=TEXTS[seed % len(TEXTS)],
            details=hostile_value(seed), checkpoint={"step": 0, "calls_before": 0}, control_status="ok",
            control_trajectory=trajectory(seed), faulted_status="ok", faulted_trajectory=trajectory(seed + 1),
            faulted_output=INTEGERS[seed % len(INTEGERS)], faulted_environment_state={"initial": "i", "state": hostile_value(seed)},
        )
        for seed in range(count)
    ]


def decoded_as_ever(path: Path, model: type[BaseModel], nested: tuple[str, ...]) -> list[BaseModel]:
    """What decoding did before it was made fast: each row's JSON text through `json.loads`,
    then the model validates the row."""
    rows = pq.read_table(path).to_pylist()
    fields = [name for name in model.model_fields if name in rows[0]]
    return [model.model_validate({name: json.loads(row[name]) if name in nested and row[name] is not None else row[name] for name in fields}) for row in rows]


def exactly(models) -> list[str]:
    """Models as text that tells 1 from 1.0, -0.0 from 0.0 and every float's last digit."""
    return [repr(model.model_dump()) for model in models]


def stored(tmp_path: Path, name: str, frame: pd.DataFrame) -> Path:
    path = tmp_path / f"{name}.parquet"
    write_table_file(path, frame)
    return path


@pytest.mark.parametrize("table", ["cases", "recorded_runs", "fault_replays"])
def test_hostile_rows_decode_into_the_models_json_loads_made(tmp_path, table):
    count = 24
    if table == "cases":
        path, model, nested = stored(tmp_path, table, case_table(hostile_cases(count))), CaseRecord, CASE_NESTED
        decode = case_models
    elif table == "recorded_runs":
        path, model, nested = stored(tmp_path, table, recorded_runs_table(hostile_runs(count))), RecordedRun, RUN_NESTED
        decode = run_models
    else:
        frame = models_to_frame(hostile_replays(count), FAULT_REPLAYS_SCHEMA, FAULT_REPLAY_NESTED)
        path, model, nested = stored(tmp_path, table, frame), FaultReplay, FAULT_REPLAY_NESTED
        decode = replay_models
    positions = [5, 0, 23, 7, 7, 12]
    decoded = decode(StoredTable(path), positions)
    as_ever = decoded_as_ever(path, model, nested)
    assert sorted(decoded) == sorted(set(positions))
    assert exactly(decoded[position] for position in sorted(decoded)) == exactly(as_ever[position] for position in sorted(decoded))
    assert exactly(decode(StoredTable(path), range(count)).values()) == exactly(as_ever)
    if table == "cases":
        assert exactly(case_stream(StoredTable(path), positions)) == exactly(as_ever[position] for position in positions)


def test_text_only_json_loads_reads_decodes_as_it_did(tmp_path):
    """JSON text another writer may have stored: a lone surrogate escaped (`ensure_ascii`),
    nesting deeper than pydantic-core's parser goes, spaces between tokens."""
    run = hostile_runs(1)[0]
    frame = recorded_runs_table([run, run, run])
    frame.loc[0, "output"] = json.dumps({"lone": "\ud800", "pair": "\ud83d\ude00"})
    frame.loc[1, "output"] = json.dumps(nested(400))
    frame.loc[2, "environment_state"] = ' { "initial" : "i" ,\n "state" : [ 1 , 2.5 ] } '
    path = stored(tmp_path, "recorded_runs", frame)
    decoded = run_models(StoredTable(path), [0, 1, 2])
    assert decoded[0].output == {"lone": "\ud800", "pair": "\U0001f600"}
    assert decoded[1].output == nested(400)
    assert decoded[2].environment_state.state == [1, 2.5]
    assert exactly(decoded.values()) == exactly(decoded_as_ever(path, RecordedRun, RUN_NESTED))


def test_a_table_older_than_a_field_decodes_with_its_default(tmp_path):
    frame = recorded_runs_table(hostile_runs(3)).drop(columns=["recorded_by_run", "duration_s"])
    path = stored(tmp_path, "recorded_runs", frame)
    decoded = run_models(StoredTable(path), [2, 0])
    assert [(run.case_id, run.recorded_by_run, run.duration_s) for run in decoded.values()] == [("c0", None, 0.0), ("c2", None, 0.0)]
    assert exactly(decoded.values()) == exactly(decoded_as_ever(path, RecordedRun, RUN_NESTED)[0::2])


@pytest.mark.parametrize(
    "column, text, error",
    [
        ("trajectory", '{"steps": [{"kind": "tool_call"}', json.JSONDecodeError),  # cut short
        ("trajectory", '{"steps": []} {"steps": []}', json.JSONDecodeError),  # two values
        ("output", "[1, 2,]", json.JSONDecodeError),
        ("trajectory", '{"steps": 5}', ValidationError),  # JSON, but no trajectory
        ("environment_state", '{"initial": "i", "state": 1, "extra": 2}', ValidationError),
    ],
)
def test_a_row_that_failed_to_decode_still_fails_alike(tmp_path, column, text, error):
    frame = recorded_runs_table(hostile_runs(2))
    good = decoded_as_ever(stored(tmp_path, "good", frame), RecordedRun, RUN_NESTED)
    frame.loc[1, column] = text
    path = stored(tmp_path, "recorded_runs", frame)
    with pytest.raises(error):
        decoded_as_ever(path, RecordedRun, RUN_NESTED)
    with pytest.raises(error):
        run_models(StoredTable(path), [0, 1])
    assert gc.isenabled()  # decoding holds the collector off while it works, and only then
    assert exactly(run_models(StoredTable(path), [0]).values()) == exactly(good[:1])  # the rows around it still read


def test_decoding_sets_off_no_garbage_collection(tmp_path):
    """Decoding makes no reference cycle, so it holds the collector off: each few hundred
    objects it makes would otherwise set off a collection, now and then one of the whole
    heap. What is left is the one collection (of the objects it made) once it is done."""
    path = stored(tmp_path, "recorded_runs", recorded_runs_table(hostile_runs(200)))
    table = StoredTable(path)
    collections: list[int] = []
    decoding = threading.get_ident()  # a collection runs in the thread whose allocation set it off

    def counted(phase: str, info: dict) -> None:
        if phase == "start" and threading.get_ident() == decoding:
            collections.append(info["generation"])

    gc.callbacks.append(counted)
    try:
        decoded = run_models(table, range(200))
    finally:
        gc.callbacks.remove(counted)
    assert len(decoded) == 200 and len(collections) <= 1
    assert gc.isenabled()


def test_cases_stacked_with_their_copies_decode_alike_in_any_order(tmp_path):
    """Judging decodes a chunk's cases from the sources and their copies stacked (positions in
    order); recording streams them in the order it plans (any order)."""
    cases = hostile_cases(9)
    sources = stored(tmp_path, "cases", case_table(cases[:4]))
    copies = stored(tmp_path, "copies", case_table(cases[4:]))
    as_ever = decoded_as_ever(sources, CaseRecord, CASE_NESTED) + decoded_as_ever(copies, CaseRecord, CASE_NESTED)
    stacked = StoredTable(sources, copies)
    in_order = [0, 2, 3, 4, 6, 8]
    assert exactly(case_models(stacked, in_order).values()) == exactly(as_ever[position] for position in in_order)
    any_order = [8, 0, 5, 3, 4, 1]
    assert exactly(case_stream(stacked, any_order)) == exactly(as_ever[position] for position in any_order)


def test_stacked_tables_are_decoded_a_row_group_of_each_file_at_a_time(tmp_path, monkeypatch):
    """Tables written from frames are stored in row groups, and the sources and their copies
    stacked read as the groups of each file in turn: decoding a few cases reads the groups
    holding them alone, to the models the whole table gives."""
    monkeypatch.setattr(layout, "FRAME_GROUP_ROWS", 4)
    cases = hostile_cases(15)
    sources = stored(tmp_path, "cases", case_table(cases[:6]))
    copies = stored(tmp_path, "copies", case_table(cases[6:]))
    assert [pq.ParquetFile(path).num_row_groups for path in (sources, copies)] == [2, 3]
    as_ever = decoded_as_ever(sources, CaseRecord, CASE_NESTED) + decoded_as_ever(copies, CaseRecord, CASE_NESTED)
    stacked = StoredTable(sources, copies)
    groups = stacked.row_groups()
    assert groups.starts.tolist() == [0, 4, 6, 10, 14]
    read = groups.read
    groups_read: list[int] = []
    groups.read = lambda group, names: groups_read.append(group) or read(group, names)
    monkeypatch.setattr(StoredTable, "row_groups", lambda table: groups)
    decoder = GroupedRows(stacked, CaseRecord, CASE_NESTED)
    wanted = [1, 5, 11, 12]
    assert exactly(decoder.models(wanted).values()) == exactly(as_ever[position] for position in wanted)
    assert groups_read == [0, 1, 3]


def test_rows_of_a_stored_table_are_read_from_the_row_groups_holding_them(tmp_path, monkeypatch):
    """Recording and replaying decode their cases and recordings a slice at a time: the rows
    asked for are read from their row groups, never the whole columns, to the same rows; rows
    scattered over more groups than are kept are read from whole columns, once."""
    monkeypatch.setattr(layout, "FRAME_GROUP_ROWS", 4)
    path = stored(tmp_path, "recorded_runs", recorded_runs_table(hostile_runs(40)))
    as_ever = decoded_as_ever(path, RecordedRun, RUN_NESTED)
    table = StoredTable(path)
    read_whole: list[str] = []
    read_columns = StoredTable._read_columns
    monkeypatch.setattr(StoredTable, "_read_columns", lambda self, names: read_whole.extend(names) or read_columns(self, names))
    in_slices = [run_models(table, range(start, start + 10)) for start in range(0, 40, 10)]
    assert read_whole == []
    assert exactly(model for part in in_slices for model in part.values()) == exactly(as_ever)
    scattered = list(range(0, 40, 3))  # 10 groups of the 10
    assert exactly(run_models(table, scattered).values()) == exactly(as_ever[position] for position in scattered)
    assert "trajectory" in read_whole


def test_judging_holds_the_collector_off_while_it_judges(evaluated_example, monkeypatch):
    """Judging a chunk of clusters (decoding it, each verdict, its rows) makes no cycle either:
    the collector stays off while any case is judged, and is on again once the table is made."""
    from oloproof_pipeline.evaluators.base import Evaluator
    from oloproof_pipeline.evaluators.judging import judge_verdict_table
    from oloproof_pipeline.project import load_project
    from oloproof_pipeline.store.reuse import stored_tables

    project = load_project(evaluated_example[0])
    stored = stored_tables(project, "1.0.0")
    collector_on: list[bool] = []
    judge_case = Evaluator.judge_case

    def judged_noting_the_collector(self, case, context):
        collector_on.append(gc.isenabled())
        return judge_case(self, case, context)

    monkeypatch.setattr(Evaluator, "judge_case", judged_noting_the_collector)
    frame, summary = judge_verdict_table(
        project, stored["cases"], stored["recorded_runs"], stored["fault_replays"], StoredTable.of(None),
        version="1.0.0", judged_by_run="judging-again",
    )
    assert summary.judged == len(frame) == len(collector_on) == 72 * len(project.evaluators)
    assert not any(collector_on) and gc.isenabled()
