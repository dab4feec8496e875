"""The cases' table, checking again only the dataset lines not checked before.

Each launch validates the whole case set before its run (a bad line fails it with its
`file:line: field: what`), and at thousands of cases reading, validating, digesting and
encoding every line is most of a launch's own time, though a rerun changes a line or two.
The lines last checked are kept beside the tables (`case_lines_path`), each with the digest
of its text, its row of the cases' table and what the whole set's checks need of it. A line
whose text is among them, while what a line's check depends on beyond its text holds
(`case_lines_context`: the snapshots, the evaluators, the code), is taken from there; the
rest are checked as ever, and the whole set's checks (no id twice, `group_id` on all or none)
run over every line. The table comes out as `case_table(load_cases(project))` makes it.

The lines are checked `LINES_AT_ONCE` at a time (`CaseSetCheck`), each batch's rows made
Arrow before the next is read, so at no time does more than a batch of cases exist as Python
values: a new line's row carries its digest for either kind of case set until the whole set
says which it is (`declares_states`).
"""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..model.cases import LINES_AT_ONCE, CaseSetCheck, CheckedLine, LineFacts, NewCase, SourceLine, in_batches, source_lines
from ..model.config import Project
from ..model.fingerprints import case_lines_context
from .layout import StorageWriteError, case_lines_path, read_parquet, write_table_file
from .tables import BOOL, CASES_SCHEMA, TEXT, rows_at

# What the stored lines carry beside their row of the cases' table.
LINE_FACTS = pa.schema([("line_key", TEXT), ("declares_group", BOOL), ("declares_state", BOOL)])
# A new line's digests while its set is checked: without and with the starting state.
DIGESTS = pa.schema([("digest_without_states", TEXT), ("digest_with_states", TEXT)])


class LinesCheckedBefore:
    """The lines of the last check made under the same context: by the digest of their text,
    their facts and their row of the cases' table."""

    def __init__(self, table: pa.Table):
        self.table = table
        self.position = {key: index for index, key in enumerate(table.column("line_key").to_pylist())}
        self.case_ids = table.column("case_id").to_pylist()
        self.declares_group = table.column("declares_group").to_pylist()
        self.declares_state = table.column("declares_state").to_pylist()
        # Every case's digest covers its starting state only when some case of the set declares one.
        self.declares_states = any(self.declares_state)

    @classmethod
    def read(cls, project_root: Path, context: str) -> LinesCheckedBefore | None:
        """The lines checked under `context`; None when there are none (or the file cannot be
        read: it is only ever a shortcut, and is written again)."""
        path = case_lines_path(project_root)
        try:
            table = read_parquet(path)
        except (OSError, pa.ArrowException):
            return None
        if table.num_rows == 0 or "checked_with" not in table.column_names or table.column("checked_with")[0].as_py() != context:
            return None
        return cls(table)

    def facts_of(self, line: SourceLine) -> LineFacts | None:
        position = self.position.get(line.key)
        if position is None:
            return None
        return LineFacts(self.case_ids[position], self.declares_group[position], self.declares_state[position])

    def rows(self, lines: list[SourceLine]) -> pa.Table:
        """The stored rows of the cases' table of these lines (each checked before): a slice of
        the stored table, not a copy, when they follow each other there (a rerun's mostly do)."""
        return rows_at(self.table.select(CASES_SCHEMA.names), [self.position[line.key] for line in lines]).cast(CASES_SCHEMA)


def checked_case_table(project: Project) -> pd.DataFrame:
    """The dataset's cases as a table, every line checked (a bad one raises its
    `ProjectError`), those checked before under the same context taken as they were."""
    context = case_lines_context(project)
    before = LinesCheckedBefore.read(project.root, context)
    table, declares_states, new = checked_lines(project, before)
    if before is not None and declares_states != before.declares_states:
        before = None  # the kept lines' digests were made for the other kind of case set
        table, declares_states, new = checked_lines(project, None)
    if new or before is None:  # what was checked now is kept for the next launch
        stored = table.append_column("checked_with", pa.repeat(pa.scalar(context, TEXT), table.num_rows))
        with suppress(StorageWriteError):  # only a shortcut: a folder that cannot be written fails where the run writes
            write_table_file(case_lines_path(project.root), stored)
        del stored
    return table.select(CASES_SCHEMA.names).to_pandas()


def checked_lines(project: Project, before: LinesCheckedBefore | None) -> tuple[pa.Table, bool, int]:
    """Every valid line's row of the cases' table and its facts (`LINE_FACTS`), in line order;
    whether the set declares starting states; how many lines were checked now (not `before`)."""
    check = CaseSetCheck(project, before.facts_of if before is not None else None)
    parts, new = [], 0
    for lines in in_batches(source_lines(project), LINES_AT_ONCE):
        checked = check.checked(lines)
        new += sum(each.case is not None for each in checked)
        parts.append(_rows_of(checked, before))
        del checked
    declares_states = check.finish()
    table = pa.concat_tables(parts) if parts else pa.schema([*CASES_SCHEMA, *LINE_FACTS, *DIGESTS]).empty_table()
    del parts
    # A kept line's digest is as stored (made for this kind of set); a new one's as the set decides.
    chosen = table.column("digest_with_states" if declares_states else "digest_without_states")
    index = CASES_SCHEMA.get_field_index("case_digest")
    table = table.set_column(index, CASES_SCHEMA.field(index), pc.coalesce(table.column(index), chosen))
    return table.drop_columns(DIGESTS.names), declares_states, new


def _rows_of(checked: list[CheckedLine], before: LinesCheckedBefore | None) -> pa.Table:
    """A batch's rows in line order: the kept lines' stored rows and the new ones', each row's
    file and line as they are now, then the lines' facts and the new lines' digests."""
    new = [each.case for each in checked if each.case is not None]
    if checked and not new:  # a rerun's batch: every line checked before
        rows = before.rows([each.line for each in checked])
    else:
        rows = pa.Table.from_pylist([_row_of(case) for case in new], schema=CASES_SCHEMA)
        if len(new) < len(checked):
            kept = before.rows([each.line for each in checked if each.case is None])
            rows = _interleaved(kept, rows, [each.case is None for each in checked])
    for name, values in (("file", [each.line.file for each in checked]), ("line", [each.line.number for each in checked])):
        index = CASES_SCHEMA.get_field_index(name)
        rows = rows.set_column(index, CASES_SCHEMA.field(index), pa.array(values, CASES_SCHEMA.field(index).type))
    extra = {
        "line_key": [each.line.key for each in checked],
        "declares_group": [each.facts.declares_group for each in checked],
        "declares_state": [each.facts.declares_state for each in checked],
    }
    for name in DIGESTS.names:
        extra[name] = [None if each.case is None else getattr(each.case, name) for each in checked] if new else None
    for field in [*LINE_FACTS, *DIGESTS]:
        values = extra[field.name]
        rows = rows.append_column(field, pa.nulls(len(checked), field.type) if values is None else pa.array(values, field.type))
    return rows


def _row_of(case: NewCase) -> dict:
    """A new line's row of the cases' table (its digest left to the set, the rest null)."""
    record = case.record
    return {
        "case_id": record.case_id, "group_id": record.group_id, "snapshot": record.snapshot, **case.texts.as_row(),
    }


def _interleaved(kept: pa.Table, new: pa.Table, is_kept: list[bool]) -> pa.Table:
    """Row i is the next kept row or the next new one, as line i was."""
    order, next_kept, next_new = [], 0, kept.num_rows
    for each in is_kept:
        if each:
            order.append(next_kept)
            next_kept += 1
        else:
            order.append(next_new)
            next_new += 1
    return pa.concat_tables([kept, new]).take(order)
