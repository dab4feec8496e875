"""A large table assembled from reused stored rows and new ones, written a row group at a time.

A stage that reuses most of its stored table (one case added to 10,000) would otherwise hold
the stored table whole, then its reordered copy, then the Parquet writer's: three times the
table. Here only the small columns (numbers, keys, statuses) are assembled whole, as pandas
makes them; the large text columns (trajectories, states, outputs) are taken a row group at
a time from the stored file's row groups and the new rows, and written as they come.

The file written is the one `frame.to_parquet` of the whole table would write: the same rows
in the same order, the same column types (pandas' round trip: an integer column with nulls is
stored as floats) and the same pandas metadata; only its row groups differ, so a later stage
reads a few of them at a time in turn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .stored import RowGroups, StoredTable
from .tables import rows_at, rows_in_order, with_values

# Rows per row group of an assembled table (the streamed columns of one group held at a time;
# a recording's row carries its trajectory and state, a few KiB).
ROW_GROUP_ROWS = 1024
LARGE_TEXT = pa.large_string()

# A source of rows: a stored table (its file read a row group at a time) or rows in memory.
Source = StoredTable | pa.Table | pd.DataFrame | None


class AssembledTable:
    """The table whose row at each slot is `parts[i]`'s row at a position, as `rows_in_order`
    makes it, with the text columns not in `whole` left in their sources until written.
    `whole` is those columns assembled (pandas, as the table's frame would hold them): what
    a stage's metadata reads. `column_values` sets columns' values in slot order; one not in
    `whole` is held whole as given, never read from the sources."""

    def __init__(
        self, schema: pa.Schema, parts: list[tuple[Source, Any, Any]], whole: Sequence[str], *,
        column_values: dict[str, list] | None = None, rows_per_group: int | None = None,
    ):
        self.schema = schema
        self.rows_per_group = rows_per_group or ROW_GROUP_ROWS
        kept = [(source, np.asarray(positions, dtype=np.int64), np.asarray(slots, dtype=np.int64)) for source, positions, slots in parts]
        self._parts = [part for part in kept if len(part[1])]
        self.num_rows = int(sum(len(positions) for _, positions, _ in self._parts))
        given = column_values or {}
        self.streamed = [field.name for field in schema if field.name not in whole and field.name not in given]
        if any(not pa.types.is_string(schema.field(name).type) for name in self.streamed):
            raise ValueError("only text columns are left in their sources")
        frames = [(_whole_columns(source, [name for name in schema.names if name in whole]), positions, slots) for source, positions, slots in self._parts]
        self.whole = rows_in_order(frames, pa.schema([field for field in schema if field.name in whole]))
        assembled = self.whole
        for name, values in given.items():
            if name in whole:
                self.whole = with_values(self.whole, name, values)
            else:  # a column given whole: its sources' values are never read
                column = pa.array(values, type=schema.field(name).type).to_pandas().set_axis(self.whole.index)
                self.whole = self.whole.assign(**{name: column})
        # The one stored table this is, row for row (a rerun that reused every row in place):
        # written by copying its file.
        self._same_as: StoredTable | None = None
        if len(self._parts) == 1 and self.whole is assembled and isinstance(self._parts[0][0], StoredTable):
            source, positions, slots = self._parts[0]
            in_place = np.arange(len(source))
            if np.array_equal(positions, in_place) and np.array_equal(slots, in_place):
                self._same_as = source
        for source, _, _ in self._parts:
            if isinstance(source, StoredTable):
                source.forget()  # the columns a stage planned from: the file is read again a row group at a time

    def __len__(self) -> int:
        return self.num_rows

    def written_schema(self) -> pa.Schema:
        """The schema `to_parquet` gives the whole table's frame: the `whole` columns' as pandas
        holds them, each streamed column as pandas holds text (whatever its values)."""
        whole = pa.Schema.from_pandas(self.whole, preserve_index=False)
        text = pa.Schema.from_pandas(pd.DataFrame({name: pd.Series([None], dtype="str") for name in self.streamed}), preserve_index=False)
        pandas = json.loads(whole.metadata[b"pandas"])
        described = {column["name"]: column for column in pandas["columns"] + json.loads(text.metadata[b"pandas"])["columns"]}
        pandas["columns"] = [described[name] for name in self.schema.names]
        fields = {field.name: field for field in [*whole, *text]}
        return pa.schema([fields[name] for name in self.schema.names], metadata={b"pandas": json.dumps(pandas).encode()})

    def kept_at(self, path: Path) -> bool:
        """Whether the file at `path` is this table already (a rerun that reused its every row
        in place): kept as it is rather than written again with the same bytes."""
        return self._same_as is not None and self._same_as.is_file_at(path, self.written_schema(), self.rows_per_group)

    def write_parquet(self, path: Path) -> None:
        """Written a row group at a time (a file stored without row groups is read whole, once);
        the stored file as it is when this is that file's table unchanged."""
        schema = self.written_schema()
        if self._same_as is not None and self._same_as.copied_as(schema, path):
            return
        whole = pa.Table.from_pandas(self.whole, schema=pa.schema([schema.field(name) for name in self.whole.columns]), preserve_index=False)
        with pq.ParquetWriter(path, schema) as writer:
            if not self.num_rows:
                writer.write_table(schema.empty_table())
            for start, streamed in self._streamed_groups():
                rows = min(self.rows_per_group, self.num_rows - start)
                columns = {name: whole.column(name).slice(start, rows) for name in whole.column_names}
                columns.update(zip(self.streamed, streamed))
                writer.write_table(pa.table([columns[name] for name in schema.names], schema=schema))

    def let_go(self) -> None:
        """Drop the rows once written: the stage's output is held until its step ends, after
        the memory it freed was handed back; its new rows (many small buffers) would then stay
        resident until the next stage ends."""
        self._parts, self._same_as = [], None
        # Emptied anew: a slice of the frame would keep its columns' buffers.
        self.whole = pd.DataFrame({name: pd.Series([], dtype=dtype) for name, dtype in self.whole.dtypes.items()})
        self.num_rows = 0

    def frame(self) -> pd.DataFrame:
        """The whole table as the frame it is written from (for scripts and tests)."""
        frame = self.whole.copy()
        groups = [streamed for _, streamed in self._streamed_groups()]
        for index, name in enumerate(self.streamed):
            values = pa.chunked_array([group[index] for group in groups], LARGE_TEXT).to_pandas()
            frame[name] = values.set_axis(frame.index) if len(values) else pd.Series([], dtype="str", index=frame.index)
        return frame[self.schema.names]

    def _streamed_groups(self):
        """(first slot, the streamed columns' values) per row group, in slot order."""
        source_of = np.empty(self.num_rows, dtype=np.int64)
        position_of = np.empty(self.num_rows, dtype=np.int64)
        for index, (_, positions, slots) in enumerate(self._parts):
            source_of[slots], position_of[slots] = index, positions
        readers = [_Reader(source, self.streamed, position_of[source_of == index], np.flatnonzero(source_of == index) // self.rows_per_group)
                   for index, (source, _, _) in enumerate(self._parts)]
        for group, start in enumerate(range(0, self.num_rows, self.rows_per_group)):
            sources, positions = source_of[start : start + self.rows_per_group], position_of[start : start + self.rows_per_group]
            pieces, slots = [], []
            for index, reader in enumerate(readers):
                at = np.flatnonzero(sources == index)
                if len(at):
                    pieces.append(reader.take(positions[at], group))
                    slots.append(at)
            yield start, [_in_order([piece[column] for piece in pieces], slots) for column in range(len(self.streamed))]


def _whole_columns(source: Source, names: list[str]) -> pd.DataFrame:
    if isinstance(source, StoredTable):
        columns = source.columns(*names)
        source.forget()  # held by the frame alone: let go a column at a time as the table takes its rows
        return columns
    if isinstance(source, pd.DataFrame):
        return source.reindex(columns=names)
    return pa.table([_decoded(source.column(name)) if name in source.column_names else pa.nulls(source.num_rows) for name in names], names=names).to_pandas()


def _decoded(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A column held as a dictionary (rows kept compact while made) as its plain values."""
    return column.cast(column.type.value_type) if pa.types.is_dictionary(column.type) else column


class _Reader:
    """The streamed columns of one source, at positions, a row group at a time (a stored
    file's, or the record batches of rows in memory: never the whole column joined), each
    group kept until the last output group that needs it is written."""

    def __init__(self, source: Source, names: list[str], positions: np.ndarray, out_groups: np.ndarray):
        self.names = names
        if isinstance(source, pd.DataFrame):  # its text is Arrow's already: seen as Arrow, not copied
            source = pa.Table.from_pandas(source[[name for name in names if name in source.columns]], preserve_index=False)
        self.groups = source.row_groups() if isinstance(source, StoredTable) else _batches_of(source)
        group_of = np.searchsorted(self.groups.starts, positions, side="right") - 1
        self.last_use = {int(group): int(out_groups[group_of == group].max()) for group in np.unique(group_of)}
        self.cache: dict[int, pa.Table] = {}

    def take(self, positions: np.ndarray, out_group: int) -> list[pa.Array]:
        group_of = np.searchsorted(self.groups.starts, positions, side="right") - 1
        groups = np.unique(group_of).tolist()
        if len(groups) == 1:  # taken in slot order at once: no second copy to reorder
            rows = rows_at(self._group(groups[0]), positions - self.groups.starts[groups[0]])
            self._let_go(out_group)
            return [_as_large_text(rows, name).combine_chunks() for name in self.names]
        taken = []
        for group in groups:
            at = positions[group_of == group] - self.groups.starts[group]
            taken.append((np.flatnonzero(group_of == group), rows_at(self._group(group), at)))
        self._let_go(out_group)
        slots = [at for at, _ in taken]
        return [_in_order([_as_large_text(table, name).combine_chunks() for _, table in taken], slots) for name in self.names]


    def _group(self, group: int) -> pa.Table:
        if group not in self.cache:
            self.cache[group] = self.groups.read(group, self.names)
        return self.cache[group]

    def _let_go(self, out_group: int) -> None:
        """The groups no later output group needs."""
        for group in [group for group, last in self.last_use.items() if last <= out_group and group in self.cache]:
            del self.cache[group]


def _in_order(pieces: list[pa.Array], slots: list[np.ndarray]) -> pa.Array:
    """The pieces' values put at their slots (each piece's slots in its order): joined as they
    are when they already follow each other."""
    joined = pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces)
    at = slots[0] if len(slots) == 1 else np.concatenate(slots)
    if len(at) < 2 or bool(np.all(np.diff(at) > 0)):
        return joined
    return joined.take(pa.array(np.argsort(at, kind="stable"), type=pa.int64()))


def _batches_of(table: pa.Table) -> RowGroups:
    """Rows in memory as row groups: their record batches, as they were made."""
    batches = table.to_batches()
    present = set(table.column_names)
    return RowGroups(
        [batch.num_rows for batch in batches],
        lambda group, names: pa.Table.from_batches([batches[group]]).select([name for name in names if name in present]),
    )


def _as_large_text(table: pa.Table, name: str) -> pa.ChunkedArray:
    if name not in table.column_names:
        return pa.chunked_array([pa.nulls(table.num_rows, LARGE_TEXT)])
    return table.column(name).cast(LARGE_TEXT)
