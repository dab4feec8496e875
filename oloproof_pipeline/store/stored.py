"""Stored tables read a column at a time: a stage reads the few key columns it compares, and
decodes rows only for the work left to do, so a rerun with nothing to do never reads a
trajectory, and a large table is never turned into objects all at once.

Each file is opened once, when the table is found, and every later read is of that open
file: another run that writes the table meanwhile (two `oloproof run`s and a scheduled
materialization at once) replaces it by a rename, so this reader keeps reading the file it
started with, never a column of one and a row of another."""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .journal import log
from .layout import StoredTableError, _short_reason, table_path
from .tables import REPEATED_TEXT, from_json_text, required_columns, rows_from_frame

Part = Path | pd.DataFrame
COPY_BLOCK_BYTES = 1 << 20  # a stored file copied a MiB at a time


class PinnedFile:
    """A stored file opened once: its path (for messages), its open handle (closed with it)
    and its status when opened. A file that could not be opened keeps why, raised at its
    first read."""

    def __init__(self, path: Path):
        self.path = path
        self.handle: pa.NativeFile | None = None
        self.problem: OSError | None = None
        try:
            self.handle = pa.OSFile(str(path), "r")
            self.modified_ns = os.fstat(self.handle.fileno()).st_mtime_ns
            self.size = os.fstat(self.handle.fileno()).st_size
        except (OSError, pa.ArrowException) as error:
            self.problem = error if isinstance(error, OSError) else OSError(str(error))
            self.modified_ns, self.size = 0, 0

    def still_at(self, path: Path) -> bool:
        """Whether `path` is still this very file (not replaced by another run's write)."""
        if self.handle is None:
            return False
        try:
            opened, found = os.fstat(self.handle.fileno()), os.stat(path)
        except OSError:
            return False
        return (opened.st_dev, opened.st_ino, opened.st_size, opened.st_mtime_ns) == (
            found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns)

    def source(self) -> pa.NativeFile:
        """The open file, at its start, for one read."""
        if self.handle is None:
            raise StoredTableError(self.path, _short_reason(self.problem))
        self.handle.seek(0)
        return self.handle


def table_of(path: Path) -> str:
    """The table a stored file is: `tables/<table>.parquet` or `tables/<table>/<version>.parquet`."""
    return path.stem if path.parent.name == "tables" else path.parent.name


def taken_from(values: pa.Array | pa.ChunkedArray, positions: np.ndarray) -> list[Any]:
    """The values at `positions` as Python objects. A column of stacked tables is taken from
    chunk by chunk: Arrow takes from a chunked text column by joining its chunks first, a
    copy of the whole column for every few rows asked for."""
    if isinstance(values, pa.ChunkedArray) and values.num_chunks == 1:
        values = values.chunk(0)
    if not isinstance(values, pa.ChunkedArray):
        return values.take(pa.array(positions)).to_pylist()
    starts = np.cumsum([0] + [len(chunk) for chunk in values.chunks])
    if np.all(positions[:-1] <= positions[1:]):
        # In order (as models are decoded): each chunk's share is one run of the positions.
        bounds = np.searchsorted(positions, starts).tolist()
        in_order: list[Any] = []
        for index, (first, end) in enumerate(zip(bounds, bounds[1:])):
            if end > first:
                in_order.extend(values.chunk(index).take(pa.array(positions[first:end] - starts[index])).to_pylist())
        return in_order
    chunk_of = np.searchsorted(starts, positions, side="right") - 1
    taken: list[Any] = [None] * len(positions)
    for index in np.unique(chunk_of).tolist():
        slots = np.flatnonzero(chunk_of == index)
        found = values.chunk(index).take(pa.array(positions[slots] - starts[index])).to_pylist()
        for slot, value in zip(slots.tolist(), found):
            taken[slot] = value
    return taken


class RowGroups:
    """A stored table's row groups: where each starts, and each read when asked (only the
    columns asked for that the file has)."""

    def __init__(self, sizes: list[int], read: Callable[[int, list[str]], pa.Table]):
        self.starts = np.cumsum([0] + sizes[:-1]).astype(np.int64)
        self.read = read
        # Groups read through `kept` (by group and columns), the least recently used first.
        self._kept: OrderedDict[tuple[int, tuple[str, ...]], pa.Table] = OrderedDict()

    def group_of(self, at: np.ndarray) -> np.ndarray:
        """The group holding each row position in `at`."""
        return np.searchsorted(self.starts, at, side="right") - 1

    def kept(self, group: int, names: list[str]) -> pa.Table:
        """The group's named columns, read once and kept as Arrow read them until
        `let_go_beyond` lets them go (rows asked for a few at a time mostly lie in them)."""
        key = (group, tuple(names))
        if key in self._kept:
            self._kept.move_to_end(key)
        else:
            self._kept[key] = self.read(group, names)
        return self._kept[key]

    def let_go_beyond(self, count: int) -> None:
        """Keep only the `count` groups `kept` read or gave most recently."""
        while len(self._kept) > count:
            self._kept.popitem(last=False)

    def each(self, names: list[str]) -> Iterator[pa.Table]:
        """Each group's named columns, in turn (one group held at a time)."""
        for group in range(len(self.starts)):
            yield self.read(group, names)


class StoredTable:
    """A stored table (or several stacked, as the cases and their copies are), read a column
    at a time as a stage needs it (each column at most once), its rows decoded only where
    asked. Columns a file lacks (cache keys of a table written before they existed) read as
    nulls; a file that cannot be read, or is not its table, is a `StoredTableError`."""

    def __init__(self, *parts: Part | None):
        # A folder in a table's place is no table at all: writing it again says what is wrong.
        self._parts: list[PinnedFile | pd.DataFrame] = [
            part if isinstance(part, pd.DataFrame) else PinnedFile(Path(part))
            for part in parts if isinstance(part, pd.DataFrame) or (part is not None and Path(part).is_file())
        ]
        self._read: dict[str, pd.Series] = {}
        # Typed columns as Arrow sees them (made once: seeing a float column finds its NaNs).
        self._typed: dict[str, pa.Array | pa.ChunkedArray] = {}
        self._shapes: list[tuple[list[str], int]] | None = None
        # Row groups read for `rows`, the last few kept as Arrow read them (`RowGroups.kept`).
        self._groups: RowGroups | None = None

    @classmethod
    def of(cls, frame: pd.DataFrame | None) -> "StoredTable":
        return cls(frame)

    @classmethod
    def at(cls, project_root: Path, *tables: str, partition: str | None = None) -> "StoredTable":
        """The project's stored `tables`, stacked (each of `partition`, when given)."""
        return cls(*(table_path(project_root, table, partition) for table in tables))

    @property
    def exists(self) -> bool:
        return bool(self._parts)

    @property
    def modified_ns(self) -> int | None:
        """When its newest file was written (None for tables in memory or none at all)."""
        times = [part.modified_ns for part in self._parts if isinstance(part, PinnedFile)]
        return max(times) if times else None

    def _part_shapes(self) -> list[tuple[list[str], int]]:
        """(column names, rows) of each part, from the Parquet footer alone."""
        if self._shapes is None:
            shapes = []
            for part in self._parts:
                if isinstance(part, pd.DataFrame):
                    shapes.append((list(part.columns), len(part)))
                    continue
                metadata = self._footer(part)
                names = list(metadata.schema.names)
                missing = [name for name in required_columns(table_of(part.path)) if name not in names]
                if missing:
                    more = " ..." if len(missing) > 3 else ""
                    raise StoredTableError(part.path, f"not a {table_of(part.path)} table: no column {', '.join(missing[:3])}{more}")
                shapes.append((names, metadata.num_rows))
            self._shapes = shapes
        return self._shapes

    @staticmethod
    def _footer(part: PinnedFile) -> pq.FileMetaData:
        source = part.source()
        try:
            return pq.ParquetFile(source).metadata
        except (OSError, ValueError, pa.ArrowException) as error:
            raise StoredTableError(part.path, "the file is empty" if part.size == 0 else _short_reason(error)) from None

    def is_file_at(self, path: Path, schema: pa.Schema, rows_per_group: int) -> bool:
        """Whether this table is the file at `path` as it is, byte for byte what writing its
        rows again would write: its one file, not replaced by another run since it was read,
        of `schema` (its pandas metadata too) and a row group per `rows_per_group` rows."""
        part = self._one_file()
        if part is None or not part.still_at(path):
            return False
        try:
            file = pq.ParquetFile(part.source())
            groups = [file.metadata.row_group(index).num_rows for index in range(file.num_row_groups)]
            if not file.schema_arrow.equals(schema, check_metadata=True):
                return False
        except (OSError, ValueError, pa.ArrowException):
            return False
        rows = len(self)
        return groups == ([min(rows_per_group, rows - start) for start in range(0, rows, rows_per_group)] or [0])

    def _one_file(self) -> PinnedFile | None:
        """The one stored file this table is (None: a frame, or several parts stacked)."""
        part = self._parts[0] if len(self._parts) == 1 else None
        return part if isinstance(part, PinnedFile) else None

    def readable(self, instead: str) -> "StoredTable":
        """This table, or none at all when it cannot be read: a warning (printed by the CLI as
        a `warning:` line) says so and what is done `instead`; the run rebuilds the table."""
        try:
            self._part_shapes()
            return self
        except StoredTableError as error:
            log.warning(f"{error.path}: stored table cannot be read; {instead}")
            return StoredTable()

    @property
    def names(self) -> list[str]:
        return list(dict.fromkeys(name for names, _ in self._part_shapes() for name in names))

    def __len__(self) -> int:
        return sum(rows for _, rows in self._part_shapes())

    def _read_part(self, part: "PinnedFile | pd.DataFrame", names: list[str], rows: int, wanted: list[str]) -> dict[str, pd.Series]:
        present = [name for name in wanted if name in names]
        if isinstance(part, pd.DataFrame):
            read = {name: part[name].reset_index(drop=True) for name in present}
        elif present:
            try:
                # One chunk per column (a file of several row groups reads as several): pandas'
                # operations on a column of many chunks join them again and again. Read and
                # joined a column at a time, so joining holds one column twice, never all.
                file = pq.ParquetFile(part.source(), read_dictionary=[name for name in present if name in REPEATED_TEXT])
                read = {name: file.read(columns=[name]).combine_chunks().to_pandas()[name] for name in present}
            except (OSError, ValueError, pa.ArrowException) as error:
                raise StoredTableError(part.path, _short_reason(error)) from None
        else:
            read = {}
        return {name: read.get(name, pd.Series([None] * rows, dtype=object)) for name in wanted}

    def columns(self, *names: str) -> pd.DataFrame:
        """The named columns (nulls for any the table lacks), read once each."""
        self._read_columns(names)
        return pd.DataFrame({name: self._read[name] for name in names})

    def _read_columns(self, names: Iterable[str]) -> None:
        """Each named column not yet read, read (nulls for any the table lacks)."""
        wanted = [name for name in dict.fromkeys(names) if name not in self._read]
        if wanted:
            pieces = [self._read_part(part, part_names, rows, wanted) for part, (part_names, rows) in zip(self._parts, self._part_shapes())]
            for name in wanted:
                columns = [piece[name] for piece in pieces]
                self._read[name] = (
                    pd.concat(columns, ignore_index=True) if len(columns) > 1
                    else columns[0] if columns else pd.Series([], dtype=object)
                )

    def row_groups(self) -> RowGroups:
        """The table's row groups, to read one at a time: each stored file's own, in turn (the
        cases then their copies, when stacked); a table in memory is one group of the whole."""
        shapes = self._part_shapes()
        whole = RowGroups([len(self)], lambda group, names: pa.Table.from_pandas(self.columns(*names), preserve_index=False))
        if not self._parts or not all(isinstance(part, PinnedFile) for part in self._parts):
            return whole
        sizes: list[int] = []
        found: list[tuple[PinnedFile, pq.ParquetFile, set[str], int]] = []
        for part, (names, _) in zip(self._parts, shapes):
            try:
                file = pq.ParquetFile(part.source())
            except (OSError, ValueError, pa.ArrowException) as error:
                raise StoredTableError(part.path, _short_reason(error)) from None
            groups = [file.metadata.row_group(index).num_rows for index in range(file.num_row_groups)]
            found.extend((part, file, set(names), index) for index in range(len(groups)))
            sizes.extend(groups)
        if not sizes:  # files of no row group at all: no rows
            return whole

        def read(group: int, names: list[str]) -> pa.Table:
            part, file, present, index = found[group]
            try:
                return file.read_row_group(index, columns=[name for name in names if name in present])
            except (OSError, ValueError, pa.ArrowException) as error:
                raise StoredTableError(part.path, _short_reason(error)) from None

        return RowGroups(sizes, read)

    def copied_as(self, schema: pa.Schema, path: Path) -> bool:
        """When this is one stored file of `schema` (its pandas metadata too), its bytes copied
        to `path`, as they are: a table written back unchanged is not decoded and encoded again.
        False (nothing written) for anything else."""
        part = self._one_file()
        if part is None:
            return False
        try:
            if not pq.ParquetFile(part.source()).schema_arrow.equals(schema, check_metadata=True):
                return False
            source = part.source()
            with open(path, "wb") as copy:
                while block := source.read(COPY_BLOCK_BYTES):
                    copy.write(block)
        except (ValueError, pa.ArrowException) as error:
            raise StoredTableError(part.path, _short_reason(error)) from None
        return True

    def forget(self) -> None:
        """Let go of the columns read so far (a stage done with the rows it decoded); a later
        read reads them again from the same open file."""
        self._read.clear()
        self._typed.clear()
        if self._groups is not None:
            self._groups.let_go_beyond(0)

    def whole(self, schema: pa.Schema | None = None) -> pd.DataFrame:
        """Every column (of `schema` when given, nulls for those the table lacks)."""
        return self.columns(*(schema.names if schema is not None else self.names))

    def rows_where(self, column: str, value: Any, nested: Iterable[str] = (), names: Iterable[str] | None = None) -> Iterator[dict[str, Any]]:
        """Each row whose `column` equals `value` (as Parquet's `==` filter: a null never
        matches), its columns among `names` (None: all), JSON text parsed in `nested`: read a
        row group at a time, `column` first and the rest of only the matching rows. The FAILs
        of a large table are many (a quarter of a million at 100,000 source cases): never all
        held, let alone parsed, at once."""
        named = None if names is None else set(names)
        wanted = [name for name in self.names if named is None or name in named]  # the table's order
        groups = self.row_groups()
        for group in range(len(groups.starts)):
            keyed = groups.read(group, [column])
            if column not in keyed.column_names or pa.types.is_null(keyed.schema.field(column).type):
                continue  # no such column (a table not stored yet reads as nulls): no row matches
            matches = pc.equal(keyed.column(column), pa.scalar(value, keyed.schema.field(column).type))
            if not pc.any(matches).as_py():
                continue
            matching = groups.read(group, wanted).filter(matches)
            yield from rows_from_frame(matching.to_pandas(), [name for name in nested if name in matching.column_names])

    def at_positions(self, positions: np.ndarray, names: list[str]) -> Iterator[tuple[np.ndarray, pa.Table]]:
        """The named columns at `positions`, a row group at a time: per group holding any of
        them, which of `positions` it holds (their indices, ascending) and its rows there, in
        that order (nulls for a column the file lacks). One group is held at a time: a few keys
        of a table of millions of rows are never read whole."""
        at = np.asarray(positions, dtype=np.int64)
        if not len(at):
            return
        groups = self.row_groups()
        group_of = groups.group_of(at)
        by_group = np.argsort(group_of, kind="stable")
        bounds = np.searchsorted(group_of[by_group], np.arange(len(groups.starts) + 1))
        for group in np.unique(group_of).tolist():
            slots = by_group[bounds[group] : bounds[group + 1]]
            rows = groups.read(group, names).take(pa.array(at[slots] - groups.starts[group]))
            yield slots, pa.table([rows.column(name) if name in rows.column_names else pa.nulls(len(slots), pa.string()) for name in names], names=names)

    def rows(self, positions: Iterable[int], names: Iterable[str], nested: Iterable[str] = ()) -> list[dict[str, Any]]:
        """The rows at `positions` as plain dicts of `names`, JSON text parsed in `nested`."""
        names, positions = list(names), list(positions)
        if not positions:
            return []
        at = np.asarray(positions, dtype=np.int64)
        values = self._taken_by_group(at, names) if self._by_group(at, names) else self._taken_from_columns(positions, at, names)
        parsed = set(nested)
        values = [[from_json_text(text) for text in column] if name in parsed else column for name, column in zip(names, values)]
        return [dict(zip(names, row)) for row in zip(*values)]

    # Row groups `rows` keeps as read (at least those of its last call): rows asked for a slice
    # at a time in order lie in one or two of them.
    GROUPS_KEPT = 8

    def _by_group(self, at: np.ndarray, names: list[str]) -> bool:
        """Whether the rows at `at` are read from their row groups (a stored table's, stacked or
        not): unless their columns were read whole already, or they lie scattered over more
        groups than are kept (read from whole columns, once, then)."""
        if not self._parts or not all(isinstance(part, PinnedFile) for part in self._parts):
            return False
        if all(name in self._read for name in names):
            return False
        if self._groups is None:
            self._groups = self.row_groups()
        return len(np.unique(self._groups.group_of(at))) <= self.GROUPS_KEPT

    def _taken_by_group(self, at: np.ndarray, names: list[str]) -> list[list[Any]]:
        """Each named column's values at `at`, taken from the row groups holding them (nulls
        for a column a file lacks)."""
        groups = self._groups
        assert groups is not None
        group_of = groups.group_of(at)
        columns: list[list[Any]] = [[None] * len(at) for _ in names]
        used = np.unique(group_of).tolist()
        for group in used:
            slots = np.flatnonzero(group_of == group)
            taken = groups.kept(group, names).take(pa.array(at[slots] - groups.starts[group]))
            for column, name in zip(columns, names):
                if name in taken.column_names:
                    for slot, value in zip(slots.tolist(), taken.column(name).to_pylist()):
                        column[slot] = value
        groups.let_go_beyond(max(self.GROUPS_KEPT, len(used)))
        return columns

    def _taken_from_columns(self, positions: list[int], at: np.ndarray, names: list[str]) -> list[list[Any]]:
        """Each named column's values at `positions`, from the column read whole (once)."""
        # Each column's values taken where asked, as Arrow converts them (as `rows_from_frame`
        # does): no frame of the whole table is built for a few rows, which a stage decoding a
        # chunk at a time would pay for on every chunk.
        self._read_columns(names)
        values = []
        for name in names:
            column = self._read[name]
            # Typed columns are seen as Arrow without a copy, then taken; Python objects are
            # taken first, so Arrow infers their type from the rows asked for alone.
            if column.dtype == object:
                taken = pa.array(column.take(positions), from_pandas=True).to_pylist()
            else:
                if name not in self._typed:
                    self._typed[name] = pa.array(column, from_pandas=True)
                taken = taken_from(self._typed[name], at)
            values.append(taken)
        return values
