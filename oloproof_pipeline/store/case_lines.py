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
"""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path

import pandas as pd
import pyarrow as pa

from ..model.cases import CheckedLines, LineFacts, SourceLine, load_case_lines, source_lines
from ..model.config import Project
from ..model.fingerprints import case_lines_context
from .layout import StorageWriteError, case_lines_path, read_parquet, write_table_file
from .tables import CASES_SCHEMA, case_table


class LinesCheckedBefore:
    """The lines of the last check made under the same context: by the digest of their text,
    their facts and their row of the cases' table."""

    def __init__(self, table: pa.Table):
        self.table = table
        self.position = {key: index for index, key in enumerate(table.column("line_key").to_pylist())}
        self.facts = [
            LineFacts(case_id, declares_group, declares_state)
            for case_id, declares_group, declares_state in zip(
                table.column("case_id").to_pylist(), table.column("declares_group").to_pylist(),
                table.column("declares_state").to_pylist(),
            )
        ]
        # Every case's digest covers its starting state only when some case of the set declares one.
        self.declares_states = any(each.declares_state for each in self.facts)

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
        return None if position is None else self.facts[position]


def checked_case_table(project: Project) -> pd.DataFrame:
    """The dataset's cases as a table, every line checked (a bad one raises its
    `ProjectError`), those checked before under the same context taken as they were."""
    lines = source_lines(project)
    context = case_lines_context(project)
    before = LinesCheckedBefore.read(project.root, context)
    checked = load_case_lines(project, lines, before.facts_of if before is not None else None)
    if before is not None and checked.declares_states != before.declares_states:
        before = None  # the kept lines' digests were made for the other kind of case set
        checked = load_case_lines(project, lines)
    new_cases = checked.new_cases()
    if before is None or len(new_cases) == len(checked.cases):
        frame = case_table(new_cases)
    else:
        frame = _combined(checked, before, new_cases)
    if new_cases or before is None:  # what was checked now is kept for the next launch
        with suppress(StorageWriteError):  # only a shortcut: a folder that cannot be written fails where the run writes
            write_table_file(case_lines_path(project.root), _with_line_facts(frame, checked, context))
    return frame


def _combined(checked: CheckedLines, before: LinesCheckedBefore, new_cases: list) -> pd.DataFrame:
    """The table in line order: the kept lines' rows and the new ones', each row's file and
    line as they are now."""
    kept_positions = [before.position[line.key] for line, case in zip(checked.lines, checked.cases) if case is None]
    kept = before.table.select(CASES_SCHEMA.names).take(kept_positions).cast(CASES_SCHEMA)
    new = (pa.Table.from_pandas(case_table(new_cases), schema=CASES_SCHEMA, preserve_index=False) if new_cases
           else CASES_SCHEMA.empty_table())
    stacked = pa.concat_tables([kept, new])
    # Row i of the set is the next kept row or the next new one, as its line was.
    order, next_kept, next_new = [], 0, len(kept_positions)
    for case in checked.cases:
        if case is None:
            order.append(next_kept)
            next_kept += 1
        else:
            order.append(next_new)
            next_new += 1
    table = stacked.take(order)
    for name, values in (("file", [line.file for line in checked.lines]), ("line", [line.number for line in checked.lines])):
        index = CASES_SCHEMA.get_field_index(name)
        table = table.set_column(index, CASES_SCHEMA.field(index), pa.array(values, CASES_SCHEMA.field(index).type))
    return table.to_pandas()


def _with_line_facts(frame: pd.DataFrame, checked: CheckedLines, context: str) -> pd.DataFrame:
    return frame.assign(
        line_key=[line.key for line in checked.lines],
        declares_group=[each.declares_group for each in checked.facts],
        declares_state=[each.declares_state for each in checked.facts],
        checked_with=context,
    )
