"""What a materialization can reuse: finished work of this version from the stored table,
then from the journal of a run that may have been cut short; the counts it reports, and why
anything was done again."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import pandas as pd
import pyarrow as pa

from ..store.journal import Journal, sandbox_lock
from ..store.tables import frame_from_rows, null_to_none

Row = dict[str, Any]


# -- the journal beside a stored table ---------------------------------------------------------


def stored_keys(frame: pd.DataFrame | None, columns: list[str]) -> set[tuple]:
    if frame is None or frame.empty:
        return set()
    return set(zip(*(null_to_none(frame[column]) for column in columns)))


def row_key_of(row: Row, columns: list[str]) -> tuple:
    return tuple(row.get(column) for column in columns)


def unstored_journal_rows(journal: Journal, stored: set[tuple], key_columns: list[str]) -> list[Row]:
    """The journal's lines that the stored table does not hold yet: work of a run that was cut
    short (or is still going), which this one reuses instead of redoing."""
    return [row for row in journal.rows() if row_key_of(row, key_columns) not in stored]


def known_work(stored: pd.DataFrame | None, journaled: list[Row], schema: pa.Schema, nested: Iterable[str]) -> pd.DataFrame:
    """The stored table, then the journal's own lines (later lines win where keys repeat)."""
    if not journaled:
        return frame_from_rows([], schema, nested) if stored is None else stored
    frames = [frame for frame in (stored, frame_from_rows(journaled, schema, nested)) if frame is not None]
    return pd.concat([frame.reindex(columns=schema.names) for frame in frames], ignore_index=True)


def journal_state(journal: Journal) -> tuple[int, int] | None:
    """The journal file's size and modification time: if unchanged after waiting for the
    sandbox, no other run appended to it (or emptied it) meanwhile."""
    try:
        status = journal.path.stat()
    except FileNotFoundError:
        return None
    return status.st_size, status.st_mtime_ns


def settle_journal(
    project_root: Path, journal: Journal, journaled: list[Row], stored: set[tuple], key_columns: list[str], wanted: Callable[[Row], bool]
) -> None:
    """Empty the journal once the stored table holds every line still wanted (`journaled`: the
    lines it does not hold), so a rerun never reads it again. Journals are appended under the
    sandbox lock, so they are emptied under it too, after reading them once more: a line a
    running recording adds is never lost."""
    if not journal.path.exists() or any(wanted(row) for row in journaled):
        return
    with sandbox_lock(project_root):
        if not any(row_key_of(row, key_columns) not in stored and wanted(row) for row in journal.rows()):
            journal.clear()


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
