"""Stored rows turned into their models, only at the positions a stage asks for: recording,
replaying and judging decode the few rows whose work is left, never a whole table."""

from __future__ import annotations

from typing import Any, Iterable, Iterator

import numpy as np
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


class GroupedRows:
    """A stored table's rows decoded a few at a time, a row group at a time (each stacked
    file's own; a table in memory is one group of the whole): only the groups holding the rows
    asked for, the last few kept as Arrow read them (the next rows asked for mostly lie in
    them), so a stage never holds its large columns whole, nor as Python strings beyond the
    rows it decodes."""

    # A chunk's rows lie in a few runs of the table (its sources, and each transform's copies),
    # each in one row group or across two: the groups of the last call are kept, and at least
    # this many.
    GROUPS_KEPT = 6

    def __init__(self, table: StoredTable, model: type[BaseModel], nested: tuple[str, ...]):
        self.model, self.nested = model, nested
        self.groups = table.row_groups() if table.exists and len(table) else None
        self.names = [name for name in model.model_fields if name in table.names] if self.groups is not None else []

    def models(self, positions: list[int]) -> dict[int, Any]:
        """Position -> the model there."""
        if self.groups is None or not positions:
            return {}
        wanted = np.unique(np.asarray(positions, dtype=np.int64))
        group_of = self.groups.group_of(wanted)
        found: dict[int, Any] = {}
        used = np.unique(group_of).tolist()
        for group in used:
            start = int(self.groups.starts[group])
            local = (wanted[group_of == group] - start).tolist()
            rows = self.groups.kept(group, self.names)
            found.update((start + position, model) for position, model in models_in(rows, local, self.model, self.nested).items())
        self.groups.let_go_beyond(max(self.GROUPS_KEPT, len(used)))
        return found
