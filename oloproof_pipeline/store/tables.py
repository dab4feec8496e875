"""The tables users query (DuckDB, pandas): column names are the public data contract.

Nested values are stored as JSON text so every column is a plain Parquet type.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

import pandas as pd
import pyarrow as pa
from pydantic import BaseModel

from ..model.cases import CaseRecord
from ..model.digests import canonical_json
from ..model.faults import FaultReplay
from ..model.records import RecordedRun
from ..model.transforms import DerivedCaseRecord

TEXT, FLOAT, INT, BOOL = pa.string(), pa.float64(), pa.int64(), pa.bool_()

CASES_SCHEMA = pa.schema(
    [
        ("case_id", TEXT), ("case_digest", TEXT), ("source_id", TEXT), ("transform", TEXT), ("group_id", TEXT),
        ("input", TEXT), ("initial_state", TEXT), ("snapshot", TEXT), ("expected", TEXT), ("metadata", TEXT),
        ("events", TEXT), ("file", TEXT), ("line", INT),
    ]
)
# The metamorphic copies: the `cases` columns, then each pair's digests and label status.
DERIVED_CASES_SCHEMA = pa.schema(
    list(CASES_SCHEMA)
    + [
        pa.field("transform_digest", TEXT), pa.field("pair_digest", TEXT), pa.field("label_status", TEXT),
        pa.field("stale_labels", INT), pa.field("minimum_validity", FLOAT),
    ]
)
# Exploratory rates per slice bucket and criterion; never gated.
SLICES_SCHEMA = pa.schema(
    [
        ("slice", TEXT), ("bucket", TEXT), ("criterion", TEXT), ("passed", INT), ("failed", INT), ("missing", INT),
        ("support", INT), ("estimate", FLOAT), ("lower", FLOAT), ("upper", FLOAT), ("method", TEXT),
        ("whole_estimate", FLOAT), ("p_value", FLOAT), ("differs", BOOL), ("min_slice_support", INT),
        ("system_version", TEXT), ("sliced_by_run", TEXT),
    ]
)
RECORDED_RUNS_SCHEMA = pa.schema(
    [
        ("case_id", TEXT), ("case_digest", TEXT), ("system_version", TEXT), ("status", TEXT), ("error", TEXT),
        ("output", TEXT), ("trajectory", TEXT), ("environment_state", TEXT), ("duration_s", FLOAT),
        ("recorded_by_run", TEXT),
    ]
)
VERDICTS_SCHEMA = pa.schema(
    [
        ("case_id", TEXT), ("case_digest", TEXT), ("group_id", TEXT), ("criterion", TEXT), ("outcome", TEXT),
        ("reason", TEXT), ("details", TEXT), ("system_version", TEXT), ("recorded_by_run", TEXT),
        ("replayed_by_run", TEXT), ("judged_by_run", TEXT),
    ]
)
# One row per source case and fault plan: both replays whole, and the outcome judged from them.
FAULT_REPLAYS_SCHEMA = pa.schema(
    [
        ("case_id", TEXT), ("case_digest", TEXT), ("system_version", TEXT), ("criterion", TEXT), ("tool", TEXT),
        ("fault", TEXT), ("occurrence", INT), ("plan_digest", TEXT), ("outcome", TEXT), ("reason", TEXT),
        ("details", TEXT), ("faulted_call_index", INT), ("checkpoint", TEXT), ("control_status", TEXT),
        ("control_error", TEXT), ("control_trajectory", TEXT), ("faulted_status", TEXT), ("faulted_error", TEXT),
        ("faulted_trajectory", TEXT), ("faulted_output", TEXT), ("faulted_environment_state", TEXT),
        ("duration_s", FLOAT), ("recorded_by_run", TEXT), ("replayed_by_run", TEXT),
    ]
)
GATE_SCHEMA = pa.schema(
    [
        ("rule_id", TEXT), ("metric", TEXT), ("decision", TEXT), ("estimate", FLOAT), ("lower", FLOAT),
        ("upper", FLOAT), ("method", TEXT), ("observed", INT), ("passed", INT), ("failed", INT), ("missing", INT),
        ("excluded", INT), ("bar_kind", TEXT), ("bar", FLOAT), ("bar_min", FLOAT), ("bar_max", FLOAT), ("reasons", TEXT), ("suite_size_to_decide", INT),
        ("system_version", TEXT), ("gate_decision", TEXT), ("gate_reasons", TEXT), ("judged_by_run", TEXT),
    ]
)

# By table name, as `layout.table_path` names the files: a stored file without these columns
# is no such table (written by hand, or by something else).
TABLE_SCHEMAS = {
    "cases": CASES_SCHEMA, "derived_cases": DERIVED_CASES_SCHEMA, "recorded_runs": RECORDED_RUNS_SCHEMA,
    "fault_replays": FAULT_REPLAYS_SCHEMA, "verdicts": VERDICTS_SCHEMA, "slices": SLICES_SCHEMA, "gate": GATE_SCHEMA,
}

def to_json_text(value: Any) -> str | None:
    return None if value is None else canonical_json(value)


def from_json_text(text: Any) -> Any:
    return None if text is None else json.loads(text)


def _json_columns(schema: pa.Schema, nested: Iterable[str]) -> set[str]:
    return {name for name in nested if name in schema.names}


def frame_from_rows(rows: list[dict[str, Any]], schema: pa.Schema, nested: Iterable[str] = ()) -> pd.DataFrame:
    """Rows of plain data to a typed DataFrame; `nested` columns become JSON text."""
    json_columns = _json_columns(schema, nested)
    prepared = [
        {name: (to_json_text(row.get(name)) if name in json_columns else row.get(name)) for name in schema.names}
        for row in rows
    ]
    return pa.Table.from_pylist(prepared, schema=schema).to_pandas()


def rows_from_frame(frame: pd.DataFrame, nested: Iterable[str] = ()) -> list[dict[str, Any]]:
    """A stored table back to plain rows (None for nulls, JSON text parsed)."""
    rows = pa.Table.from_pandas(frame, preserve_index=False).to_pylist()
    nested = [name for name in nested if name in frame.columns]
    for row in rows:
        for name in nested:
            row[name] = from_json_text(row[name])
    return rows


def models_to_frame(models: Iterable[BaseModel], schema: pa.Schema, nested: Iterable[str], **extra: Any) -> pd.DataFrame:
    rows = [{**model.model_dump(mode="json"), **extra} for model in models]
    return frame_from_rows(rows, schema, nested)


CASE_NESTED = ("input", "initial_state", "expected", "metadata", "events")
RUN_NESTED = ("output", "trajectory", "environment_state")
VERDICT_NESTED = ("details",)
GATE_NESTED = ("reasons", "gate_reasons")
FAULT_REPLAY_NESTED = (
    "details", "checkpoint", "control_trajectory", "faulted_trajectory", "faulted_output", "faulted_environment_state",
)


# -- records as tables and back -------------------------------------------------------------


def case_table(cases: list[CaseRecord]) -> pd.DataFrame:
    return models_to_frame(cases, CASES_SCHEMA, CASE_NESTED)


def derived_case_table(copies: list[DerivedCaseRecord]) -> pd.DataFrame:
    return frame_from_rows([derived.model_dump(mode="json") for derived in copies], DERIVED_CASES_SCHEMA, CASE_NESTED)


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
    if frame is None:
        return []
    return [RecordedRun.model_validate(row) for row in rows_from_frame(frame, RUN_NESTED)]


def cases_from_table(frame: pd.DataFrame) -> list[CaseRecord]:
    return [CaseRecord.model_validate(row) for row in rows_from_frame(frame, CASE_NESTED)]


def fault_replays_table(replays: list[FaultReplay]) -> pd.DataFrame:
    return models_to_frame(replays, FAULT_REPLAYS_SCHEMA, FAULT_REPLAY_NESTED)


def replays_from_table(frame: pd.DataFrame | None) -> list[FaultReplay]:
    if frame is None:
        return []
    return [FaultReplay.model_validate(row) for row in rows_from_frame(frame, FAULT_REPLAY_NESTED)]
