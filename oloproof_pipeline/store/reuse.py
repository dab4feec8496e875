"""Reusing a stored table made from the same inputs: the derived copies, the slices and the
gate each carry the digest of what they were made from, and are made again only when it
changed. One rule for the three, and one skeleton for the stages that follow it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..model.config import Project
from ..model.fingerprints import copies_inputs_digest
from ..model.transforms import LabelSummary
from .assembly import AssembledTable
from .copies import COPY_WHOLE_COLUMNS, kept_or_derived
from .stored import StoredTable
from .tables import DERIVED_CASES_SCHEMA

# The per-version tables the stages read back from storage (by column, see `StoredTable`).
PER_VERSION_TABLES = ("recorded_runs", "fault_replays", "verdicts", "slices", "gate", "trial_runs", "trial_verdicts")


def stored_tables(project: Project, version: str | None = None) -> dict[str, StoredTable]:
    """The project's stored tables as the stages read them: by column, as needed. `cases` is
    the sources and their copies stacked."""
    found = {
        "cases": StoredTable.at(project.root, "cases", "derived_cases"),
        "derived_cases": StoredTable.at(project.root, "derived_cases"),
    }
    if version is not None:
        found.update({name: StoredTable.at(project.root, name, partition=version) for name in PER_VERSION_TABLES})
    return found


def previous(table: StoredTable, what: str) -> pd.DataFrame | None:
    """A stage's own stored output, to reuse: none when there is none or it cannot be read
    (a warning says so, and the stage computes it again)."""
    table = table.readable(f"{what} again")
    return table.whole() if table.exists else None


def previous_at(project_root: Path, table: str, what: str) -> pd.DataFrame | None:
    """`previous` of an unpartitioned table of the project."""
    return previous(StoredTable.at(project_root, table), what)


def made_from(stored: StoredTable, inputs_digest: str) -> bool:
    """Whether the stored table has rows and every one was made from these inputs (its
    digests read alone): reused, else made again."""
    if not stored.exists or "inputs_digest" not in stored.names or len(stored) == 0:
        return False
    digests = stored.columns("inputs_digest")["inputs_digest"]
    stored.forget()
    return bool((digests == inputs_digest).all())


@dataclass(frozen=True)
class Copies:
    """The cases' metamorphic copies as a table, the digest of what they were made from, and
    the labels' summaries when they were derived now (None: the stored table was reused). The
    table holds whole only the columns its metadata counts (`COPY_WHOLE_COLUMNS`); reused, its
    rows stay in the stored file, which is kept as it is: at 100,000 source cases reading it
    whole cost every launch whose cases had not changed 240 MiB."""

    table: AssembledTable
    inputs_digest: str
    label_summaries: list[LabelSummary] | None = None


def derived_copies(project: Project, cases: pd.DataFrame) -> Copies:
    """The copies of `cases` (the sources' table): the stored table when made from these
    inputs (its digests read, not its rows); else each stored copy whose own key holds, the
    rest derived now, all labelled now (store/copies.py; a bad transform or label file raises
    its `ProjectError`)."""
    inputs_digest = copies_inputs_digest(project, cases)
    stored = StoredTable.at(project.root, "derived_cases").readable("copies derived again")
    if made_from(stored, inputs_digest):
        return Copies(copies_table(stored), inputs_digest)
    table, summaries = kept_or_derived(project, cases, stored, inputs_digest)
    return Copies(table, inputs_digest, summaries)


def copies_table(rows: StoredTable) -> AssembledTable:
    """The stored copies' table, each row in place."""
    every = range(len(rows))
    return AssembledTable(DERIVED_CASES_SCHEMA, [(rows, every, every)], COPY_WHOLE_COLUMNS)


@dataclass(frozen=True)
class Reuse:
    """A stage's stored table when made from the same inputs (`frame`), else None and why it
    is made now: the one skeleton of the slices' and the gate's reuse."""

    frame: pd.DataFrame | None
    reasons: list[str] = field(default_factory=list)

    @property
    def reused(self) -> bool:
        return self.frame is not None


def stored_if_digest(stored: StoredTable, inputs_digest: str, *, table: str, made: str, again_because: str) -> Reuse:
    """The stored table when every row was made from `inputs_digest`, else why it is made:
    `<made>: first <table> of this version` or `<made> again: <again_because>`."""
    stored = stored.readable(f"{made} again")
    if made_from(stored, inputs_digest):
        return Reuse(stored.whole())
    return Reuse(None, [f"{made}: first {table} of this version" if not stored.exists else f"{made} again: {again_because}"])
