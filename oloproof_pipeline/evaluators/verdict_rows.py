"""Verdicts as the rows of the `verdicts` table: made a column at a time from a chunk's
verdicts (no tuple or dict per row), held as Arrow record batches with repeated text as
dictionaries until the table is assembled, or (the judging step's) written to a file of their
own a band of the table's rows at a time and read back as the table is written."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
from pydantic import TypeAdapter

from ..model.cases import CaseRecord
from ..model.outcomes import Verdict
from ..store.spill import SpilledBands
from ..store.stored import StoredTable
from ..store.tables import BATCH_ROWS, VERDICTS_SCHEMA, to_json_text
from .base import JudgingContext

# A verdict's details as `Verdict.model_dump(mode="json")` gives them (its other fields are text
# already): dumping only them, and nothing for the many verdicts without any.
DETAILS: TypeAdapter[Any] = TypeAdapter(Any)

# While judged, a verdict column whose values repeat from row to row (a case's verdicts share
# its id, digest and recording; a run, an evaluator, a reason or details recur across cases)
# is held as a dictionary: each distinct value once per batch. Only the inputs key is unique.
UNIQUE_VERDICT_COLUMNS = frozenset({"inputs_key"})
COMPACT_VERDICTS_SCHEMA = pa.schema([
    field if field.name in UNIQUE_VERDICT_COLUMNS else pa.field(field.name, pa.dictionary(pa.int32(), field.type))
    for field in VERDICTS_SCHEMA
])
# The cache key columns a verdict row carries (`verdict_keys.WantedVerdicts`), in this order.
KEY_COLUMNS = ("evaluator_digest", "recording_key", "inputs_key")


class VerdictColumns:
    """Verdict rows gathered a column at a time into Arrow record batches of at most
    `BATCH_ROWS` rows (so a large table never exists as Python strings all at once), repeated
    text held as dictionaries (`COMPACT_VERDICTS_SCHEMA`), then one table of `VERDICTS_SCHEMA`."""

    def __init__(self) -> None:
        self._batches: list[pa.RecordBatch] = []

    def add(
        self, verdicts: Sequence[Verdict], cases: Sequence[CaseRecord], context: JudgingContext, version: str, judged_by_run: str,
        keys: dict[str, list[str | None]] | None = None, slots: Sequence[int] = (),
    ) -> None:
        """The verdicts' rows (each with the case it judged), naming the runs that recorded,
        replayed and judged them; `keys`: their cache key columns (`KEY_COLUMNS`; none: nulls);
        `slots`: each row's place in the table (`SpilledVerdictColumns` writes them by it)."""
        for start in range(0, len(verdicts), BATCH_ROWS):
            end = start + BATCH_ROWS
            batch = self._batch(verdicts[start:end], cases[start:end], context, version, judged_by_run,
                                {name: values[start:end] for name, values in (keys or {}).items()})
            self._hold(batch, slots[start:end])

    def _hold(self, batch: pa.RecordBatch, slots: Sequence[int]) -> None:
        self._batches.append(batch)

    @staticmethod
    def _batch(
        verdicts: Sequence[Verdict], cases: Sequence[CaseRecord], context: JudgingContext, version: str, judged_by_run: str,
        keys: dict[str, list[str | None]],
    ) -> pa.RecordBatch:
        recordings, replays = context.recordings, context.replays
        recorded_by = [getattr(recordings.get(verdict.case_id), "recorded_by_run", None) for verdict in verdicts]
        filled: dict[str, list[Any]] = {
            "case_id": [verdict.case_id for verdict in verdicts],
            "case_digest": [case.case_digest for case in cases],
            "group_id": [case.group_id for case in cases],
            "criterion": [verdict.criterion for verdict in verdicts],
            "outcome": [verdict.outcome for verdict in verdicts],
            "reason": [verdict.reason for verdict in verdicts],
            "details": [
                None if verdict.details is None else to_json_text(DETAILS.dump_python(verdict.details, mode="json"))
                for verdict in verdicts
            ],
            "system_version": [version] * len(verdicts),
            "recorded_by_run": recorded_by,
            "replayed_by_run": [
                getattr(replays.get((verdict.case_id, verdict.criterion)), "replayed_by_run", None) for verdict in verdicts
            ] if replays else [None] * len(verdicts),
            "judged_by_run": [judged_by_run] * len(verdicts),
            **keys,
        }
        arrays = [
            pa.array(filled[field.name], type=field.type) if field.name in filled else pa.nulls(len(verdicts), field.type)
            for field in COMPACT_VERDICTS_SCHEMA
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=COMPACT_VERDICTS_SCHEMA)

    def frame(self) -> pd.DataFrame:
        return pa.Table.from_batches(self._batches, schema=COMPACT_VERDICTS_SCHEMA).cast(VERDICTS_SCHEMA).to_pandas()


class SpilledVerdictColumns(VerdictColumns):
    """`VerdictColumns` for rows bound for known `slots` of the table, written to a file of
    their own a band of `rows_per_band` slots at a time as each band fills (store/spill.py),
    never all held: the judging step's rows grow with the suite (half a million at 30,000
    source cases)."""

    def __init__(self, slots: np.ndarray, rows_per_band: int) -> None:
        super().__init__()
        self._bands = SpilledBands(VERDICTS_SCHEMA, slots, rows_per_band)

    def _hold(self, batch: pa.RecordBatch, slots: Sequence[int]) -> None:
        self._bands.add(batch, np.asarray(slots, dtype=np.int64))

    def rows(self) -> tuple[StoredTable | pa.Table, np.ndarray]:
        """The rows added, read back from their file (a row group per band of slots, in slot
        order), and each one's slot."""
        return self._bands.rows()
