"""Rows a stage makes, written to a file of their own as they come rather than held until its
table is written: the stage holds a batch of rows at a time, and the table assembled from them
(store/assembly.py) reads them back a row group at a time.

The file is a temporary one, removed from its folder as soon as it is opened for reading: the
open handle reads it (store/stored.py's `PinnedFile`) and its space goes when that is closed.
A stage that fails before then removes it as its rows are let go (or at exit); only a process
killed outright leaves it in the temporary folder."""

from __future__ import annotations

import os
import tempfile
import weakref
from contextlib import suppress
from pathlib import Path
from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .stored import StoredTable
from .tables import RowBatches


class SpilledRows:
    """Record batches written as they come (each a row group), then read back as a `StoredTable`."""

    def __init__(self) -> None:
        self._path: Path | None = None
        self._writer: pq.ParquetWriter | None = None

    def write(self, batch: pa.RecordBatch) -> None:
        if self._writer is None:
            handle, name = tempfile.mkstemp(prefix="oloproof-rows-", suffix=".parquet")
            os.close(handle)
            self._path = Path(name)
            weakref.finalize(self, _removed, self._path)  # a stage that fails never reads it back
            self._writer = pq.ParquetWriter(self._path, batch.schema)
        self._writer.write_batch(batch, row_group_size=max(batch.num_rows, 1))

    def stored(self) -> StoredTable | None:
        """The rows written, to read (None when none were)."""
        if self._writer is None or self._path is None:
            return None
        self._writer.close()
        self._writer = None
        table = StoredTable(self._path)
        len(table)  # its footer read now, through the handle the table keeps open
        _removed(self._path)  # a system that will not remove an open file leaves it in the temporary folder
        self._path = None
        return table


def _removed(path: Path) -> None:
    with suppress(OSError):
        path.unlink(missing_ok=True)


class SpilledRowBatches(RowBatches):
    """`RowBatches` whose batches are written to a file of their own as each fills (`rows`
    reads them back), never all held: a stage's new recordings, a few KiB each."""

    def __init__(self, schema: pa.Schema, nested: Iterable[str] = ()):
        super().__init__(schema, nested)
        self._spilled = SpilledRows()

    def _flush(self) -> None:
        super()._flush()
        for batch in self._batches:
            self._spilled.write(batch)
        self._batches = []

    def rows(self) -> StoredTable | pa.Table:
        """The rows added: read back from their file (none added: an empty table)."""
        self._flush()
        stored = self._spilled.stored()
        return stored if stored is not None else self.schema.empty_table()

    def table(self) -> pa.Table:
        """The rows added, read back whole (for scripts and tests)."""
        rows = self.rows()
        return rows if isinstance(rows, pa.Table) else pa.Table.from_pandas(rows.whole(), preserve_index=False)


# Rows of a band cast and written at a time (a row group of the file each).
SLICE_ROWS = 2048


class SpilledBands:
    """Rows bound for known slots of a table, arriving in any order, written to a file of their
    own a band of slots at a time: a band's rows (`rows_per_band` slots, a row group of the
    table assembled from them) are held until its last one arrives, then written in slot order
    as one row group. The table is then written reading each band once, in turn; rows written
    as they came would have it read (and keep) the whole file for every group when the order
    they came in is not the table's."""

    def __init__(self, schema: pa.Schema, slots: np.ndarray, rows_per_band: int):
        self.schema, self.rows_per_band = schema, rows_per_band
        bands, counts = np.unique(np.asarray(slots, dtype=np.int64) // rows_per_band, return_counts=True)
        self._left = dict(zip(bands.tolist(), counts.tolist()))
        self._held: dict[int, list[tuple[pa.RecordBatch, np.ndarray]]] = {}
        self._written: list[np.ndarray] = []
        self._spilled = SpilledRows()

    @property
    def held(self) -> int:
        """Rows held, their bands not yet written."""
        return sum(rows.num_rows for pieces in self._held.values() for rows, _ in pieces)

    def add(self, batch: pa.RecordBatch, slots: np.ndarray) -> None:
        """The batch's rows, each bound for its slot (one of those given at the start; its
        columns any the table's schema casts from, e.g. text as dictionaries)."""
        slots = np.asarray(slots, dtype=np.int64)
        band_of = slots // self.rows_per_band
        for band in np.unique(band_of).tolist():
            at = np.flatnonzero(band_of == band)
            rows = batch if len(at) == batch.num_rows else batch.take(pa.array(at))
            self._held.setdefault(band, []).append((rows, slots[at]))
            self._left[band] -= len(at)
            if self._left[band] <= 0:
                self._write(band)

    def _write(self, band: int) -> None:
        """The band's rows in slot order, cast to the table's types a slice at a time (each
        slice a row group of the file): a band's text as plain values is several times its
        dictionaries, and every band of a small suite comes due at its last chunk."""
        pieces = self._held.pop(band)
        slots = np.concatenate([slots for _, slots in pieces])
        order = np.argsort(slots, kind="stable")
        rows = pa.Table.from_batches([rows for rows, _ in pieces]).combine_chunks()
        del pieces  # the batches held: the joined rows hold the band now
        for start in range(0, len(order), SLICE_ROWS):
            taken = rows.take(pa.array(order[start : start + SLICE_ROWS])).cast(self.schema)
            for batch in taken.combine_chunks().to_batches():
                self._spilled.write(batch)
        self._written.append(slots[order])

    def rows(self) -> tuple[StoredTable | pa.Table, np.ndarray]:
        """The rows added, read back from their file (none added: an empty table), and the slot
        of each."""
        for band in list(self._held):  # a band whose rows did not all come: written as it is
            self._write(band)
        stored = self._spilled.stored()
        slots = np.concatenate(self._written) if self._written else np.array([], dtype=np.int64)
        return (stored if stored is not None else self.schema.empty_table()), slots
