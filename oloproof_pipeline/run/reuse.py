"""What a materialization can reuse: finished work of this version from the stored table,
then from the journal of a run that may have been cut short; and the counts it reports."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Hashable, Iterable, TypeVar

from pydantic import BaseModel

from ..store.journal import Journal

Record = TypeVar("Record", bound=BaseModel)


def reusable(
    stored: Iterable[Record],
    journal: Journal,
    model: type[Record],
    *,
    key: Callable[[Record], Hashable],
    keep: Callable[[Record], bool],
) -> dict[Hashable, Record]:
    """Finished records by cache key: the stored table first, then the journal (a later line
    replaces an earlier one of the same key); only those `keep` accepts."""
    journaled = journal.records(model)  # lines that are no such record are skipped, with a warning
    return {key(record): record for record in [*stored, *journaled] if keep(record)}


@dataclass
class WorkCounts:
    """Counts for a materialization's metadata: work done now, reused, and failed."""

    new: int = 0
    reused: int = 0
    failed: int = 0

    def as_metadata(self, prefix: str) -> dict[str, int]:
        return {f"{prefix}_{name}": value for name, value in asdict(self).items()}
