"""What a materialization can reuse: finished work of this version from the stored table,
then from the journal of a run that may have been cut short; the counts it reports, and why
anything was done again."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

import pandas as pd
import pyarrow as pa
from pydantic import BaseModel

from ..store.journal import Journal
from ..store.stored import StoredTable
from ..store.tables import frame_from_rows, null_to_none


# -- the stored table and its journal ------------------------------------------------------------


@dataclass
class KnownWork:
    """Finished work of a version: the stored table's rows, then the journal's lines the table
    does not hold (later lines win where keys repeat). A stage that plans from a few columns
    has only those in `frame` and `stored`; its rows whole are `table`'s (the stored file,
    read when the stage's table is written) then `journaled`'s."""

    frame: pd.DataFrame
    stored: pd.DataFrame | None
    journal_state: tuple[int, int] | None
    table: StoredTable = field(default_factory=StoredTable)
    journaled: pd.DataFrame | None = None

    @property
    def stored_rows(self) -> int:
        return 0 if self.stored is None else len(self.stored)


def stored_keys(frame: pd.DataFrame | None, columns: list[str]) -> set[tuple]:
    if frame is None or frame.empty:
        return set()
    return set(zip(*(null_to_none(frame[column]) for column in columns)))


def journal_state(journal: Journal) -> tuple[int, int] | None:
    """The journal file's size and modification time: if unchanged after waiting for the
    sandbox, no other run appended to it meanwhile."""
    try:
        status = journal.path.stat()
    except FileNotFoundError:
        return None
    return status.st_size, status.st_mtime_ns


def journal_is_newer(journal: Journal, table: StoredTable) -> bool:
    """Whether the journal may hold lines its table does not: it was written after the table
    (a run cut short, or one still going), or there is no readable table. A table is written
    after all the lines of the run that made it, so otherwise the journal is not read at all."""
    state = journal_state(journal)
    if state is None:
        return False
    written = table.modified_ns
    return written is None or state[1] >= written


def known_work(
    table: StoredTable, journal: Journal, model: type[BaseModel], schema: pa.Schema, nested: Iterable[str], key_columns: list[str],
    plan_columns: Iterable[str] | None = None,
) -> KnownWork:
    """The stored table (nulls for cache keys it predates), then the journal's lines it lacks;
    only `plan_columns` of them in `frame` when given (the stored file is not read whole).
    A journal line that is no `model` is skipped with a warning naming it."""
    state = journal_state(journal)  # before reading it: any line added from now on is noticed
    names = schema.names if plan_columns is None else list(plan_columns)
    stored = table.columns(*names) if table.exists else None
    rows = journaled_rows(journal, model, stored, schema, nested, key_columns) if journal_is_newer(journal, table) else None
    if plan_columns is None:
        return KnownWork(frame=combined(stored, rows, schema, nested), stored=stored, journal_state=state, table=table)
    frame = combined(stored, None, schema, nested)[names] if rows is None else pd.concat(
        [part[names] for part in (stored, rows) if part is not None], ignore_index=True
    )
    return KnownWork(frame=frame, stored=stored, journal_state=state, table=table, journaled=rows)


def journaled_rows(
    journal: Journal, model: type[BaseModel], stored: pd.DataFrame | None, schema: pa.Schema, nested: Iterable[str],
    key_columns: list[str],
) -> pd.DataFrame | None:
    """The journal's lines whose keys the stored rows lack, as a table (None: no such line).
    Each line is made a row of the table as it is read (`frame_from_rows` batches them), so
    resuming a run cut short holds its lines as table columns, never all as values."""
    keys = stored_keys(stored, key_columns)
    lines = journal.lines_of(model)
    rows = frame_from_rows((row for row in lines if tuple(row.get(column) for column in key_columns) not in keys), schema, nested)
    return rows if len(rows) else None


def combined(stored: pd.DataFrame | None, journaled: pd.DataFrame | None, schema: pa.Schema, nested: Iterable[str]) -> pd.DataFrame:
    """The stored rows as they are (no copy when there is nothing else), then the journal's."""
    if journaled is None:
        return frame_from_rows([], schema, nested) if stored is None else stored
    frames = [frame for frame in (stored, journaled) if frame is not None]
    return pd.concat([frame.reindex(columns=schema.names) for frame in frames], ignore_index=True)


# -- counts and reasons ------------------------------------------------------------------------


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


@dataclass
class WorkCounts:
    """Counts for a materialization's metadata: work done now, reused, and failed; and why
    anything was done, as (what was done, why) with how many."""

    new: int = 0
    reused: int = 0
    failed: int = 0
    why: Counter = field(default_factory=Counter)

    def because(self, done: str, reason: str, count: int = 1) -> None:
        if count:
            self.why[(done, reason)] += count

    def reasons(self, noun: str) -> list[str]:
        """One line per reason, most frequent first: `12 cases re-recorded: system code changed (app.py)`."""
        return [f"{plural(count, noun)} {done}: {reason}" for (done, reason), count in self.why.most_common()]

    def as_metadata(self, prefix: str) -> dict[str, int]:
        return {f"{prefix}_{name}": int(getattr(self, name)) for name in ("new", "reused", "failed")}
