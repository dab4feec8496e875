"""The tables users query (DuckDB, pandas): column names are the public data contract.

Nested values are stored as JSON text so every column is a plain Parquet type.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import sys
import types
from contextlib import suppress
from collections import namedtuple
from typing import Any, Iterable, Iterator, Literal, TypeVar, Union, get_args, get_origin

import numpy as np
import pandas as pd
import pyarrow as pa
from pydantic import BaseModel
from pydantic_core import from_json

from ..model.cases import CaseRecord
from ..model.digests import canonical_json
from ..model.faults import FaultReplay
from ..model.judgments import JudgmentRecord
from ..model.outcomes import Verdict
from ..model.records import RecordedRun
from ..model.transforms import DerivedCaseRecord

TEXT, FLOAT, INT, BOOL = pa.string(), pa.float64(), pa.int64(), pa.bool_()
SCALAR_TYPES = {str: TEXT, int: INT, float: FLOAT, bool: BOOL}

# Arrow's default pool (mimalloc) keeps what it freed in per-thread arenas, so reading a few
# tables in turn costs their sum; the system allocator hands it back (unless a user chose).
if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
    pa.set_memory_pool(pa.system_memory_pool())

# glibc raises its mmap threshold each time a large block is freed (up to 32 MiB): from then on
# the tables' buffers and a stage's large objects come from the heap, where a few live blocks
# keep whole freed stretches resident. A fixed threshold keeps blocks of 128 KiB or more in
# mappings of their own, handed back as soon as they are freed (unless a user chose one).
M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES = -3, 128 * 1024
if sys.platform.startswith("linux") and "MALLOC_MMAP_THRESHOLD_" not in os.environ:
    with suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


def return_freed_memory() -> None:
    """Hand what a finished stage freed back to the operating system. glibc keeps freed pages
    for reuse, so without this a run's resident memory only ever grows, stage after stage."""
    gc.collect()
    if sys.platform.startswith("linux"):
        with suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)


# -- a record's columns, read off its pydantic model ------------------------------------------


def scalar_type(annotation: Any) -> pa.DataType | None:
    """The Arrow type of a field holding one text, number or flag (optional or a `Literal` of
    one kind); None for anything else, which is stored as JSON text."""
    if get_origin(annotation) in (Union, types.UnionType):
        kept = [each for each in get_args(annotation) if each is not type(None)]
        if len(kept) != 1:
            return None
        annotation = kept[0]
    if get_origin(annotation) is Literal:
        kinds = {type(value) for value in get_args(annotation)}
        return SCALAR_TYPES.get(kinds.pop()) if len(kinds) == 1 else None
    return SCALAR_TYPES.get(annotation)


def json_fields(model: type[BaseModel]) -> tuple[str, ...]:
    """The fields of `model` stored as JSON text (nested values), in the model's order."""
    return tuple(name for name, info in model.model_fields.items() if scalar_type(info.annotation) is None)


def model_schema(model: type[BaseModel], *extra: pa.Field) -> pa.Schema:
    """A table whose columns are `model`'s fields in its order (nested ones as JSON text), then
    `extra`. Reordering the model's fields reorders the stored columns."""
    columns = [pa.field(name, scalar_type(info.annotation) or TEXT) for name, info in model.model_fields.items()]
    return pa.schema([*columns, *extra])


CASES_SCHEMA = model_schema(CaseRecord)
# The metamorphic copies: the `cases` columns, then each pair's digests and label status, and
# what the copies were made from (the cases, the transforms, the label files): while that
# holds, a rerun reuses them as they are. While its `copy_key` holds (its source's row, its
# transform, the code: store/copies.py) a copy is kept when other cases changed.
DERIVED_CASES_SCHEMA = model_schema(DerivedCaseRecord, pa.field("inputs_digest", TEXT), pa.field("copy_key", TEXT))
# The columns of `derived_cases` a transform's validity is read from (decide/validity.py).
VALIDITY_COLUMNS = ("transform", "transform_digest", "label_status", "stale_labels", "minimum_validity")
# Exploratory rates per slice bucket and criterion; never gated.
SLICES_SCHEMA = pa.schema(
    [
        ("slice", TEXT), ("bucket", TEXT), ("criterion", TEXT), ("passed", INT), ("failed", INT), ("missing", INT),
        ("support", INT), ("estimate", FLOAT), ("lower", FLOAT), ("upper", FLOAT), ("method", TEXT),
        ("whole_estimate", FLOAT), ("p_value", FLOAT), ("differs", BOOL), ("min_slice_support", INT),
        ("system_version", TEXT), ("sliced_by_run", TEXT),
        # What the slices were computed from: while it holds, a rerun reuses them as they are.
        ("inputs_digest", TEXT),
    ]
)
RECORDED_RUNS_SCHEMA = pa.schema(
    [
        ("case_id", TEXT), ("case_digest", TEXT), ("system_version", TEXT), ("status", TEXT), ("error", TEXT),
        ("output", TEXT), ("trajectory", TEXT), ("environment_state", TEXT), ("duration_s", FLOAT),
        ("recorded_by_run", TEXT),
        # The system's code that made the recording (model/fingerprints.py): the digest, and
        # each file's digest (JSON), which names the files that changed when it no longer holds.
        ("code_fingerprint", TEXT), ("code_files", TEXT),
        # This very recording (case, version, code, run): what verdicts and replays are keyed by.
        ("recording_key", TEXT),
        # A chat agent's model calls made live for the case, their tokens and latency (nulls
        # for a system with no model turns; Trajectory.model_usage).
        ("model_calls", INT), ("prompt_tokens", INT), ("completion_tokens", INT), ("model_latency_s", FLOAT),
        # What those tokens cost by `pricing:` (null without a rate for the model; run/budget.py).
        ("cost_usd", FLOAT),
        # The simulated user's settings the conversation was played with (run/simulated_user.py;
        # null without one): part of the recording's cache key, not of the system's version.
        ("simulator_digest", TEXT),
        # Its requests made live and their tokens, kept apart from the system's (Trajectory.user_usage).
        ("user_calls", INT), ("user_prompt_tokens", INT), ("user_completion_tokens", INT),
    ]
)
MODEL_USAGE_COLUMNS = frozenset(
    {"model_calls", "prompt_tokens", "completion_tokens", "model_latency_s", "cost_usd", "user_calls",
     "user_prompt_tokens", "user_completion_tokens"}
)
FLOAT_USAGE_COLUMNS = frozenset({"model_latency_s", "cost_usd"})


def model_usage_totals(runs: pd.DataFrame) -> dict[str, float | int]:
    """The model calls, tokens and latency of a version's recordings, summed (none without any)."""
    present = [name for name in sorted(MODEL_USAGE_COLUMNS) if name in runs.columns and runs[name].notna().any()]
    return {name: (round(float(runs[name].sum()), 6) if name in FLOAT_USAGE_COLUMNS else int(runs[name].sum())) for name in present}
VERDICTS_SCHEMA = pa.schema(
    [
        ("case_id", TEXT), ("case_digest", TEXT), ("group_id", TEXT), ("criterion", TEXT), ("outcome", TEXT),
        ("reason", TEXT), ("details", TEXT), ("system_version", TEXT), ("recorded_by_run", TEXT),
        ("replayed_by_run", TEXT), ("judged_by_run", TEXT),
        # The cache key of the verdict: its evaluator (configuration and code), its case's
        # recording, and all it was judged from (with a copy's source recording and the replay).
        ("evaluator_digest", TEXT), ("recording_key", TEXT), ("inputs_key", TEXT),
    ]
)
# One row per source case and fault plan: both replays whole, and the outcome judged from them;
# then the whole plan the outcome was judged under (escalation tools included; `plan_digest`
# covers only what decides the replay itself).
FAULT_REPLAYS_SCHEMA = model_schema(FaultReplay, pa.field("judging_digest", TEXT))
GATE_SCHEMA = pa.schema(
    [
        ("rule_id", TEXT), ("metric", TEXT), ("decision", TEXT), ("estimate", FLOAT), ("lower", FLOAT),
        ("upper", FLOAT), ("method", TEXT), ("observed", INT), ("passed", INT), ("failed", INT), ("missing", INT),
        ("excluded", INT), ("bar_kind", TEXT), ("bar", FLOAT), ("bar_min", FLOAT), ("bar_max", FLOAT), ("reasons", TEXT), ("suite_size_to_decide", INT),
        ("system_version", TEXT), ("gate_decision", TEXT), ("gate_reasons", TEXT), ("judged_by_run", TEXT),
        # What the gate was decided from: while it holds, a rerun reuses the decisions.
        ("inputs_digest", TEXT),
    ]
)
# The judgments journal's columns (store/judgments.py; JSON lines, one per judgment a model
# judge gave): `pd.read_json(path, lines=True)` or DuckDB's `read_json` read it as this table.
JUDGMENTS_SCHEMA = model_schema(JudgmentRecord)
# Repeated trials (`execution.trials: k`): the recordings and verdicts of trials 2..k, each a
# `recorded_runs` or `verdicts` row plus its trial. Trial 1 stays in those tables, as with one.
TRIAL_RUNS_SCHEMA = pa.schema(list(RECORDED_RUNS_SCHEMA) + [pa.field("trial", INT)])
TRIAL_VERDICTS_SCHEMA = pa.schema(list(VERDICTS_SCHEMA) + [pa.field("trial", INT)])

# By table name, as `layout.table_path` names the files: a stored file without these columns
# is no such table (written by hand, or by something else).
TABLE_SCHEMAS = {
    "cases": CASES_SCHEMA, "derived_cases": DERIVED_CASES_SCHEMA, "recorded_runs": RECORDED_RUNS_SCHEMA,
    "fault_replays": FAULT_REPLAYS_SCHEMA, "verdicts": VERDICTS_SCHEMA, "slices": SLICES_SCHEMA, "gate": GATE_SCHEMA,
    "trial_runs": TRIAL_RUNS_SCHEMA, "trial_verdicts": TRIAL_VERDICTS_SCHEMA,
}
# Case certification (`oloproof certify`): one row per case, its flags (JSON list of
# {flag, criterion, reason}) and its reference run, kept while `reference_key` holds.
CERTIFICATION_SCHEMA = pa.schema(
    [
        ("case_id", TEXT), ("case_digest", TEXT), ("source_id", TEXT), ("certified", BOOL), ("flags", TEXT),
        ("has_reference", BOOL), ("reference_status", TEXT), ("reference_run", TEXT), ("reference_key", TEXT),
        ("certified_by_run", TEXT),
    ]
)
CERTIFICATION_NESTED = ("flags", "reference_run")
TABLE_SCHEMAS["case_certification"] = CERTIFICATION_SCHEMA

# The cache keys stored beside each table's columns: a table written before they existed
# is still that table (it reads them as nulls, so nothing in it is reused without a key).
CACHE_KEY_COLUMNS = frozenset(
    {"code_fingerprint", "code_files", "recording_key", "evaluator_digest", "inputs_key", "judging_digest", "inputs_digest",
     "reference_key", "simulator_digest", "copy_key"}
)


def required_columns(table: str) -> list[str]:
    """The columns a stored file must have to be `table` (none for a table we do not know)."""
    schema = TABLE_SCHEMAS.get(table)
    optional = CACHE_KEY_COLUMNS | MODEL_USAGE_COLUMNS  # tables stored before these existed still read
    return [] if schema is None else [name for name in schema.names if name not in optional]


def to_json_text(value: Any) -> str | None:
    return None if value is None else canonical_json(value)


def from_json_text(text: Any) -> Any:
    """Stored JSON text as values. pydantic-core's parser (jiter) reads it in half the time of
    `json.loads` and to the same values (floats to the same bits, ints of any size); the
    little it refuses and `json.loads` reads (a lone surrogate escape, nesting over 200 deep)
    or what is not JSON at all is read by `json.loads`, which decodes or fails as ever."""
    if text is None:
        return None
    try:
        return from_json(text)
    except ValueError:
        return json.loads(text)


def _json_columns(schema: pa.Schema, nested: Iterable[str]) -> set[str]:
    return {name for name in nested if name in schema.names}


# Rows are turned into Arrow record batches this many at a time, so a large table never
# exists as one list of Python dicts.
BATCH_ROWS = 4096
# Text that is the same on nearly every row (the code a recording was made with, a few KiB):
# held once per batch as a dictionary, and read as categories, never once per row.
REPEATED_TEXT = frozenset({"code_files"})


def _prepared(row: dict[str, Any], schema: pa.Schema, json_columns: set[str]) -> dict[str, Any]:
    return {name: (to_json_text(row.get(name)) if name in json_columns else row.get(name)) for name in schema.names}


class RowBatches:
    """Rows collected into Arrow record batches of the table's schema as they arrive (nested
    values as JSON text), then one typed DataFrame."""

    # Rows held as Python objects before they become a batch: a recording's row carries its
    # trajectory and state (a few KiB), so a few hundred at a time.
    ROWS = 1024

    def __init__(self, schema: pa.Schema, nested: Iterable[str] = ()):
        self.schema = schema
        self.json_columns = _json_columns(schema, nested)
        self._repeated = [index for index, name in enumerate(schema.names) if name in REPEATED_TEXT]
        self._pending: list[dict[str, Any]] = []
        self._batches: list[pa.RecordBatch] = []
        self.count = 0

    def encoded(self, row: dict[str, Any]) -> dict[str, Any]:
        """`row` as the table holds it: each of its columns, nested values as JSON text (what a
        journal line can carry as it is, so a finished row's values are encoded once)."""
        return _prepared(row, self.schema, self.json_columns)

    def add(self, row: dict[str, Any]) -> None:
        self.add_encoded(self.encoded(row))

    def add_encoded(self, row: dict[str, Any]) -> None:
        """Add a row `encoded` already."""
        self._pending.append(row)
        self.count += 1
        if len(self._pending) >= self.ROWS:
            self._flush()

    def extend(self, rows: Iterable[dict[str, Any]]) -> None:
        for row in rows:
            self.add(row)

    def _flush(self) -> None:
        if self._pending:
            batch = pa.RecordBatch.from_pylist(self._pending, schema=self.schema)
            for index in self._repeated:
                batch = batch.set_column(index, batch.schema.field(index).name, batch.column(index).dictionary_encode())
            self._batches.append(batch)
            self._pending = []

    def table(self) -> pa.Table:
        """The rows (repeated text as dictionaries)."""
        self._flush()
        return pa.Table.from_batches(self._batches) if self._batches else self.schema.empty_table()

    def rows(self) -> Any:
        """The rows, as a table assembled from them reads them (store/assembly.py): here the
        table held (store/spill.py's rows are read back from their file)."""
        return self.table()

    def frame(self) -> pd.DataFrame:
        return self.table().cast(self.schema).to_pandas()


def frame_from_rows(rows: Iterable[dict[str, Any]], schema: pa.Schema, nested: Iterable[str] = ()) -> pd.DataFrame:
    """Rows of plain data to a typed DataFrame; `nested` columns become JSON text."""
    batches = RowBatches(schema, nested)
    batches.extend(rows)
    return batches.frame()


def rows_from_frame(frame: pd.DataFrame, nested: Iterable[str] = ()) -> list[dict[str, Any]]:
    """A stored table back to plain rows (None for nulls, JSON text parsed)."""
    rows = pa.Table.from_pandas(frame, preserve_index=False).to_pylist()
    nested = [name for name in nested if name in frame.columns]
    for row in rows:
        for name in nested:
            row[name] = from_json_text(row[name])
    return rows


def models_to_frame(models: Iterable[BaseModel], schema: pa.Schema, nested: Iterable[str], **extra: Any) -> pd.DataFrame:
    return frame_from_rows(({**model.model_dump(mode="json"), **extra} for model in models), schema, nested)


Model = TypeVar("Model", bound=BaseModel)


def models_from_frame(frame: pd.DataFrame | None, model: type[Model], nested: Iterable[str]) -> list[Model]:
    """The rows as `model`s, from the columns the model has (a table carries more: its keys)."""
    if frame is None or frame.empty:
        return []
    fields = [name for name in model.model_fields if name in frame.columns]
    return [model.model_validate(row) for row in rows_from_frame(frame[fields], nested)]


def null_to_none(values: pd.Series) -> list[Any]:
    """A column as a list, nulls (None, NaN) as None."""
    return values.to_numpy(dtype=object, na_value=None).tolist()


def rows_at(table: pa.Table, positions: Any) -> pa.Table:
    """The table's rows at `positions`: a slice, not a copy, when they are a run in order (a
    reused table's rows, a first run's sources, a rerun's checked lines mostly are)."""
    at = np.asarray(positions, dtype=np.int64)
    if len(at) and at[-1] - at[0] + 1 == len(at) and (len(at) == 1 or bool(np.all(np.diff(at) == 1))):
        return table.slice(int(at[0]), len(at))
    return table.take(pa.array(at))


def rows_in_order(parts: list[tuple[pd.DataFrame, Any, Any]], schema: pa.Schema) -> pd.DataFrame:
    """A table assembled from parts, each `(frame, positions, slots)`: the frame's rows at
    `positions` become the output's rows at `slots` (together, 0 to n-1). A part that is the
    whole output already, in order (a rerun that changed nothing), is returned as it is: a
    large stored table is not copied to be written back unchanged. The list is emptied as it
    is read: a part's frame that no one else holds is let go a column at a time as the output
    takes its rows."""
    columns = schema.names
    taken_parts = [(frame, np.asarray(positions, dtype=np.int64), np.asarray(slots, dtype=np.int64)) for frame, positions, slots in parts]
    parts.clear()
    taken_parts = [part for part in taken_parts if len(part[1])]
    if not taken_parts:
        return frame_from_rows([], schema)
    if len(taken_parts) == 1:
        frame, positions, slots = taken_parts[0]
        whole = np.arange(len(frame))
        if len(positions) == len(frame) and (positions == whole).all() and (slots == whole).all():
            return frame if list(frame.columns) == columns else frame.reindex(columns=columns)
        del frame
    # Taken in Arrow, once: the parts are seen as Arrow columns without a copy, and the rows
    # wanted are copied once, in their final order, a column at a time (pandas would copy each
    # part, the concatenation and the reordering in turn: a large table three times over).
    tables = [arrow_columns(frame, schema) for frame, _, _ in taken_parts]
    starts = np.cumsum([0] + [table.num_rows for table in tables[:-1]])
    taken = np.concatenate([start + positions for start, (_, positions, _) in zip(starts, taken_parts)])
    order = pa.array(taken[np.argsort(np.concatenate([slots for _, _, slots in taken_parts]), kind="stable")], type=pa.int64())
    del taken_parts
    combined = pa.concat_tables(tables)
    del tables
    ordered = []
    for _ in columns:
        ordered.append(combined.column(0).take(order))
        combined = combined.remove_column(0)
    return pa.table(ordered, schema=schema).to_pandas()


def arrow_columns(frame: pd.DataFrame, schema: pa.Schema) -> pa.Table:
    """The frame's columns as `schema`'s (nulls for any it lacks), sharing its memory where
    the types agree (text is Arrow-backed in pandas)."""
    present = [name for name in schema.names if name in frame.columns]
    table = pa.Table.from_pandas(frame[present], schema=pa.schema([schema.field(name) for name in present]), preserve_index=False)
    return pa.table(
        [table.column(name) if name in present else pa.nulls(len(frame), schema.field(name).type) for name in schema.names],
        schema=schema,
    )


def with_values(frame: pd.DataFrame, column: str, values: Any) -> pd.DataFrame:
    """`frame` with `column` set to `values`, copied only if they differ (a frame returned as
    stored must not change under whoever else holds it)."""
    values = list(values)
    if null_to_none(frame[column]) == values:
        return frame
    return frame.assign(**{column: pd.Series(values, index=frame.index, dtype=frame[column].dtype)})


def rows_of(frame: pd.DataFrame, names: list[str]) -> Iterator[Any]:
    """The rows of a few columns as named tuples, nulls as None: each column turned into a
    list in one go (iterating a column element by element is slow for Arrow-backed text)."""
    row = namedtuple("Row", names)  # type: ignore[misc]
    return (row(*values) for values in zip(*(null_to_none(frame[name]) for name in names)))


CASE_NESTED = json_fields(CaseRecord)
RUN_NESTED = json_fields(RecordedRun)
VERDICT_NESTED = json_fields(Verdict)
# A rule's reasons and the gate's (a column beside the rule's fields, from another model).
GATE_NESTED = ("reasons", "gate_reasons")
FAULT_REPLAY_NESTED = json_fields(FaultReplay)


# -- records as tables and back -------------------------------------------------------------


def case_table(cases: list[CaseRecord]) -> pd.DataFrame:
    return models_to_frame(cases, CASES_SCHEMA, CASE_NESTED)


def derived_case_table(copies: list[DerivedCaseRecord], inputs_digest: str | None = None) -> pd.DataFrame:
    rows = ({**derived.model_dump(mode="json"), "inputs_digest": inputs_digest} for derived in copies)
    return frame_from_rows(rows, DERIVED_CASES_SCHEMA, CASE_NESTED)


def cases_with_copies(cases: pd.DataFrame, derived_cases: pd.DataFrame | None) -> list[CaseRecord]:
    """Sources then copies, as plain case records: what is recorded and judged."""
    frames = [cases[CASES_SCHEMA.names]]
    if derived_cases is not None and not derived_cases.empty:
        frames.append(derived_cases[CASES_SCHEMA.names])
    combined = pd.concat(frames, ignore_index=True)
    return [CaseRecord.model_validate(row) for row in rows_from_frame(combined, CASE_NESTED)]


def recorded_runs_table(runs: list[RecordedRun]) -> pd.DataFrame:
    return models_to_frame(runs, RECORDED_RUNS_SCHEMA, RUN_NESTED)


def runs_from_table(frame: pd.DataFrame | None) -> list[RecordedRun]:
    return models_from_frame(frame, RecordedRun, RUN_NESTED)


def cases_from_table(frame: pd.DataFrame) -> list[CaseRecord]:
    return models_from_frame(frame, CaseRecord, CASE_NESTED)


def replays_from_table(frame: pd.DataFrame | None) -> list[FaultReplay]:
    return models_from_frame(frame, FaultReplay, FAULT_REPLAY_NESTED)
