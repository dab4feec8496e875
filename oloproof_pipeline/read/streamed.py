"""Stored tables read a row group at a time, for the report: a pass over a table holds one
group's columns (as Arrow, 16,384 verdicts or fewer), and rows asked for by position are read
from the groups that hold them, the last group read kept for the next ask. The report walks
its cases in the tables' order (failing ones, then the rest: a few sweeps), so each group is
read a few times at most, and the report's memory does not grow with the suite beyond what
it keeps per case."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..store.stored import RowGroups, StoredTable
from ..store.tables import from_json_text
from ..store.arrow_bytes import update_with_groups


# Rows made Python values at a time in a pass over a table.
SLICE_ROWS = 8192
# Groups kept read per set of names (at most 16,384 rows each).
GROUPS_KEPT = 3


@dataclass
class StreamedTable:
    """One table (or several stacked, each a part: the sources, then their copies), by row group."""

    parts: list[StoredTable]
    _groups: list[tuple[RowGroups, int, int, int]] = field(init=False, repr=False)  # (its part's groups, index, start, rows)
    # The last groups read of each set of names, the most recent last (a report reads a few
    # sets, a sweep each; a copy's panel also reads its source's recording, further back).
    _last: dict[tuple[str, ...], dict[int, pa.Table]] = field(default_factory=dict, init=False, repr=False)
    rows_read: int = field(default=0, init=False)  # rows asked for by position (`rows`), the report's work per panel

    def __post_init__(self) -> None:
        self.parts = [part for part in self.parts if part.exists]
        self._groups = []
        offset = 0
        for part in self.parts:
            groups = part.row_groups()
            ends = [*groups.starts.tolist()[1:], len(part)]
            for index, (start, end) in enumerate(zip(groups.starts.tolist(), ends)):
                self._groups.append((groups, index, offset + start, end - start))
            offset += len(part)
        self._starts = np.array([start for _, _, start, _ in self._groups], dtype=np.int64)

    @classmethod
    def of(cls, *parts: StoredTable | None) -> "StreamedTable":
        return cls([part for part in parts if part is not None])

    @property
    def exists(self) -> bool:
        return bool(self.parts)

    def names(self) -> set[str]:
        return {name for part in self.parts for name in part.names}

    def _read_group(self, at: int, names: tuple[str, ...]) -> pa.Table:
        """Group `at`'s columns `names`, a column the file lacks as nulls."""
        groups, index, _, rows = self._groups[at]
        read = groups.read(index, list(names))
        return pa.table({name: read.column(name) if name in read.column_names else pa.nulls(rows) for name in names})

    def _read(self, at: int, names: tuple[str, ...]) -> pa.Table:
        """`_read_group`, the last `GROUPS_KEPT` groups of each set of names kept for the next ask."""
        last = self._last.setdefault(names, {})
        if at in last:
            last[at] = last.pop(at)  # the most recent last
            return last[at]
        table = last[at] = self._read_group(at, names)
        if len(last) > GROUPS_KEPT:
            del last[next(iter(last))]
        return table

    def groups(self, names: Iterable[str]) -> Iterator[tuple[int, pa.Table]]:
        """(position of its first row, the group's columns) of each group in turn."""
        names = tuple(names)
        for at, (_, _, start, _) in enumerate(self._groups):  # a pass: nothing kept after it
            yield start, self._read_group(at, names)

    def slices(self, names: Iterable[str]) -> Iterator[tuple[int, pa.Table]]:
        """`groups`, at most `SLICE_ROWS` rows at a time (a table written whole is one group of
        every row), each column one array."""
        for start, table in self.groups(names):
            for offset in range(0, table.num_rows, SLICE_ROWS):
                yield start + offset, table.slice(offset, SLICE_ROWS).combine_chunks()

    def case_slices(self, names: Iterable[str], key: str = "case_id") -> Iterator[tuple[int, pa.Table, list[tuple[int, int]]]]:
        """`slices`, each with its runs of rows of one `key` ((first, end) in the slice), a run
        never cut between two slices: a run a slice ends with waits for the next slice (or
        group) and goes on in it when that begins with the same key."""
        held: tuple[int, pa.Table] | None = None  # (position, rows) of the last run, not yet given
        for start, table in self.slices(names):
            if not table.num_rows:
                continue
            bounds = run_bounds(table.column(key))
            if held is not None and table.column(key)[0].as_py() == held[1].column(key)[0].as_py():
                joined = pa.concat_tables([held[1], table.slice(0, bounds[1])], promote_options="default").combine_chunks()
                if bounds[1] == table.num_rows:  # the run goes on past this slice too
                    held = (held[0], joined)
                    continue
                yield held[0], joined, [(0, joined.num_rows)]
                start, table, bounds = start + bounds[1], table.slice(bounds[1]), [bound - bounds[1] for bound in bounds[1:]]
            elif held is not None:
                yield held[0], held[1], [(0, held[1].num_rows)]
            last = bounds[-2]
            held = (start + last, table.slice(last))
            if last:
                yield start, table.slice(0, last), list(zip(bounds[:-2], bounds[1:-1]))
        if held is not None:
            yield held[0], held[1], [(0, held[1].num_rows)]

    def rows(self, positions: Iterable[int], names: Iterable[str], nested: Iterable[str] = ()) -> dict[int, dict[str, Any]]:
        """position -> the row there as plain values of `names`, JSON text parsed in `nested`;
        read from the groups that hold them, in order."""
        names, parsed = tuple(names), set(nested)
        wanted = np.unique(np.fromiter(positions, dtype=np.int64))
        found: dict[int, dict[str, Any]] = {}
        if not len(wanted):
            return found
        self.rows_read += len(wanted)
        group_of = np.searchsorted(self._starts, wanted, side="right") - 1
        for at in np.unique(group_of).tolist():
            here = wanted[group_of == at]
            table = self._read(at, names).take(pa.array(here - self._starts[at]))
            columns = [
                [from_json_text(value) for value in column.to_pylist()] if name in parsed else column.to_pylist()
                for name, column in zip(names, table.columns)
            ]
            for position, row in zip(here.tolist(), zip(*columns)):
                found[position] = dict(zip(names, row))
        return found

    def digest(self, tag: str, names: Iterable[str]) -> str | None:
        """A digest of the named columns (their names, types and every value, straight from
        their Arrow buffers: `arrow_bytes`), a group at a time; None when there is no table."""
        if not self.exists:
            return None
        names = list(names)
        hashed = hashlib.sha256(tag.encode("utf-8"))
        update_with_groups(hashed, (table for _, table in self.groups(names)))
        return f"{tag}:{len(self._groups)}:{hashed.hexdigest()}"


def run_bounds(keys: pa.Array | pa.ChunkedArray) -> list[int]:
    """Where each run of equal `keys` begins, and their end (nulls equal one another)."""
    rows = len(keys)
    if not rows:
        return [0]
    before, after = keys.slice(0, rows - 1), keys.slice(1)
    differ = pc.fill_null(pc.not_equal(before, after), True)
    if keys.null_count:
        differ = pc.and_(differ, pc.invert(pc.and_(pc.is_null(before), pc.is_null(after))))
    return [0, *(np.flatnonzero(differ.to_numpy(zero_copy_only=False)) + 1).tolist(), rows]
