"""A table's values as the bytes to digest, straight from its Arrow buffers: no Python value is
made of any row. Each column is its values' bytes one after another (text as stored, any other
type as Arrow's text of it) and, per row, its length (a null as -(length + 1)); a run of rows
is digested as the lengths of its rows (a row's columns side by side) and then each column's
bytes, so two runs digest alike only when every value of them is the same."""

from __future__ import annotations

import hashlib
from typing import Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

TEXT_TYPES = (pa.large_string(), pa.large_binary())
SIZE = np.dtype("<i8")  # a row's length, as digested
DIGEST_BYTES = 16  # of a run's digest: 128 bits


class ColumnBytes:
    """One column as its values' bytes (`data`) and where each row's start (`starts`), with
    each row's length, a null's as -(length + 1) (`sizes`)."""

    __slots__ = ("data", "starts", "sizes")

    def __init__(self, column: pa.Array | pa.ChunkedArray):
        array = as_text(column)
        rows = len(array)
        buffers = array.buffers()
        offsets = np.frombuffer(buffers[1], dtype=np.int64, count=rows + 1, offset=array.offset * 8) if rows else np.zeros(1, np.int64)
        first, last = int(offsets[0]), int(offsets[-1])
        self.data = memoryview(buffers[2])[first:last] if buffers[2] is not None and last > first else memoryview(b"")
        starts = offsets - first
        sizes = np.diff(starts)
        if array.null_count:
            nulls = array.is_null().to_numpy(zero_copy_only=False)
            sizes[nulls] = -sizes[nulls] - 1
        self.starts = starts
        self.sizes = sizes


def as_text(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The column as one large string (or binary) array: text as it is, nulls as nulls, any
    other type as Arrow's text of each value (its repr where Arrow has none)."""
    column = one_array(column)
    if column.type in TEXT_TYPES:
        return column
    if pa.types.is_null(column.type):
        return pa.nulls(len(column), pa.large_string())
    if pa.types.is_string(column.type) or pa.types.is_binary(column.type):
        return column.cast(pa.large_binary() if pa.types.is_binary(column.type) else pa.large_string())
    try:
        return pc.cast(column, pa.large_string())
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):  # nested types: their Python repr
        return pa.array([None if value is None else repr(value) for value in column.to_pylist()], pa.large_string())


def one_array(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The column as one array (a copy only when it is in several chunks)."""
    if isinstance(column, pa.ChunkedArray):
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


class TableBytes:
    """A table's columns (`ColumnBytes`), with every row's lengths side by side (`record`), so
    a run of rows is digested in one call per column, plus one for their lengths (`digests`),
    and the whole table in as many (`update_all`)."""

    __slots__ = ("columns", "record", "row_bytes", "rows")

    def __init__(self, table: pa.Table):
        self.columns = [ColumnBytes(column) for column in table.columns]
        self.rows = table.num_rows
        sizes = np.stack([column.sizes for column in self.columns], axis=1) if self.columns else np.zeros((self.rows, 0), SIZE)
        self.record = memoryview(np.ascontiguousarray(sizes, dtype=SIZE).reshape(-1).view(np.uint8))
        self.row_bytes = SIZE.itemsize * len(self.columns)

    def digests(self, runs: list[tuple[int, int]], befores: list[bytes | None] | None = None) -> list[bytes]:
        """128 bits of the SHA-256 of each run of rows ((first, end), as `row_key`), each going
        on from its `befores` digest when it has one (the digest of rows met earlier)."""
        record, row_bytes, sha256 = self.record, self.row_bytes, hashlib.sha256
        columns = [(column.data, column.starts.tolist()) for column in self.columns]  # read per run: as Python ints
        found = []
        for at, (first, end) in enumerate(runs):
            before = befores[at] if befores is not None else None
            hashed = sha256(before) if before else sha256()
            hashed.update(record[first * row_bytes : end * row_bytes])
            for data, starts in columns:
                hashed.update(data[starts[first] : starts[end]])
            found.append(hashed.digest()[:DIGEST_BYTES])
        return found

    def update_all(self, hashed: Any) -> None:
        """Digest every row into `hashed` (a hashlib object), as `digests` digests a run."""
        hashed.update(self.record)
        for column in self.columns:
            hashed.update(column.data)


def table_types(table: pa.Table) -> bytes:
    """The table's column names and types, as digested beside its values."""
    return "\x00".join(f"{name}:{column.type}" for name, column in zip(table.column_names, table.columns)).encode("utf-8")


def update_with_groups(hashed: Any, groups: Iterable[pa.Table]) -> int:
    """Digest a table read a row group at a time into `hashed` (a hashlib object): each group's
    column names and types, its row count, then its rows (`TableBytes.update_all`); only one
    group is held at once. Returns how many groups there were."""
    count = 0
    for table in groups:
        hashed.update(table_types(table) + b"\x00%d\x00" % table.num_rows)
        TableBytes(table).update_all(hashed)
        count += 1
    return count
