"""Stored rows turned into their models, only at the positions a stage asks for: recording,
replaying and judging decode the few rows whose work is left, never a whole table."""

from __future__ import annotations

from typing import Any, Iterable, Iterator

import pyarrow as pa
from pydantic import BaseModel

from ..model.cases import CaseRecord
from ..model.collector import collection_paused
from ..model.faults import FaultReplay
from ..model.records import RecordedRun
from .stored import StoredTable
from .tables import CASE_NESTED, CASES_SCHEMA, FAULT_REPLAY_NESTED, RUN_NESTED, from_json_text

# Cases turned into models at a time, as the sandboxes take them.
MODELS_AT_ONCE = 500


def _models(table: StoredTable, positions: Iterable[int], model: type[BaseModel], names: list[str], nested: Iterable[str]) -> dict:
    unique = sorted({int(position) for position in positions})
    with collection_paused():
        return {position: model.model_validate(row) for position, row in zip(unique, table.rows(unique, names, nested))}


def _fields(columns: Iterable[str], model: type[BaseModel]) -> list[str]:
    """The model's fields among a table's `columns` (a table older than a field leaves its default)."""
    names = set(columns)
    return [name for name in model.model_fields if name in names]


def case_models(cases: StoredTable, positions: Iterable[int]) -> dict[int, CaseRecord]:
    """Position -> the case there."""
    return _models(cases, positions, CaseRecord, CASES_SCHEMA.names, CASE_NESTED)


def run_models(runs: StoredTable, positions: Iterable[int]) -> dict[int, RecordedRun]:
    """Position -> the recording there."""
    return _models(runs, positions, RecordedRun, _fields(runs.names, RecordedRun), RUN_NESTED)


def replay_models(replays: StoredTable, positions: Iterable[int]) -> dict[int, FaultReplay]:
    """Position -> the fault replay there."""
    return _models(replays, positions, FaultReplay, _fields(replays.names, FaultReplay), FAULT_REPLAY_NESTED)


def case_stream(cases: StoredTable, positions: list[int]) -> Iterator[CaseRecord]:
    """The cases at `positions`, in that order, made a slice at a time as the sandboxes take
    them, so a large suite is never held as models all at once."""
    for start in range(0, len(positions), MODELS_AT_ONCE):
        with collection_paused():
            rows = cases.rows(positions[start : start + MODELS_AT_ONCE], CASES_SCHEMA.names, CASE_NESTED)
            models = [CaseRecord.model_validate(row) for row in rows]
        yield from models


def models_in(rows: pa.Table, positions: Iterable[int], model: type[BaseModel], nested: Iterable[str]) -> dict[int, Any]:
    """Position -> the model at that row of `rows` (a row group as read: its text taken and
    turned into Python strings only at the positions asked for, never a frame of the group)."""
    unique = sorted({int(position) for position in positions})
    if not unique:
        return {}
    taken = rows.take(pa.array(unique, pa.int64()))
    names = _fields(taken.column_names, model)
    parsed = set(nested)
    columns = [taken.column(name).to_pylist() for name in names]
    values = [[from_json_text(text) for text in column] if name in parsed else column for name, column in zip(names, columns)]
    with collection_paused():
        return {position: model.model_validate(dict(zip(names, row))) for position, row in zip(unique, zip(*values))}
