"""The metamorphic copies as a table, derived only where no stored copy holds: a copy is kept
while its source's row, its transform, whether the case set declares starting states and the
code that derives copies (`producer_code_version("copies")`) are those it was made from
(`copy_key`), so one case added derives that case's copies and no other. Label statuses are
read afresh for every copy (a label file is read whole anyway, and a relabelled pair changes
only its status). A copy is made from its source's stored texts, a slice of sources at a time:
only the member its transform reads is decoded, and only the one it changes encoded again."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ..model.cases import CaseTexts
from ..model.config import Project, TransformConfig
from ..model.errors import ProjectError
from ..model.fingerprints import producer_code_version, row_key
from ..model.transforms import (
    DerivedCaseRecord,
    LabelSummary,
    TransformProblem,
    case_place,
    changes_world,
    copy_id,
    copy_of_texts,
    digest_of_transform,
    label_of,
    load_labels,
    summarise_labels,
    transform_places,
)
from .assembly import AssembledTable
from .decoding import MODELS_AT_ONCE, collection_paused
from .spill import SpilledRowBatches
from .stored import StoredTable
from .tables import CASES_SCHEMA, DERIVED_CASES_SCHEMA, VALIDITY_COLUMNS, arrow_columns, from_json_text, null_to_none, rows_at

# The copies' columns held whole: those transform validity counts, and those not text (an
# assembled table leaves only text in its sources).
COPY_WHOLE_COLUMNS = tuple(
    column.name for column in DERIVED_CASES_SCHEMA if column.name in VALIDITY_COLUMNS or not pa.types.is_string(column.type)
)


def copy_keys(project: Project, cases: pd.DataFrame) -> list[list[str]]:
    """Per transform (in `metamorphic.transforms` order), per source (in table order), the key
    its copy is stored under: the source's whole row, the transform, whether the case set
    declares starting states, and the version of the code that derives copies."""
    code = producer_code_version("copies")
    states = bool(cases["initial_state"].notna().any())
    sources = [  # a slice of rows made Python values at a time: never every source's texts at once
        row_key("source", *values)
        for start in range(0, len(cases), MODELS_AT_ONCE)
        for values in zip(*(null_to_none(cases[name].iloc[start : start + MODELS_AT_ONCE]) for name in CASES_SCHEMA.names))
    ]
    return [
        [row_key("copy", source, transform_key, states, code) for source in sources]
        for transform_key in (transform.model_dump_json() for transform in project.config.metamorphic.transforms)
    ]


def kept_or_derived(
    project: Project, sources: pd.DataFrame, stored: StoredTable | None, inputs_digest: str
) -> tuple[AssembledTable, list[LabelSummary]]:
    """The copies of `sources` (the cases' table, sources only), transform by transform and in
    source order: the stored copy where its key holds, else derived now; every copy labelled
    from its transform's label file now, all marked made from `inputs_digest`. Kept copies stay
    in the stored file (their keys, ids and pair digests read, and the columns held whole),
    so one case added to 100,000 does not read the copies whole. A transform that cannot change
    a source fails the whole derivation with every such problem (a `ProjectError`), as
    `derive_cases` does."""
    sources = sources.reset_index(drop=True)
    keys = copy_keys(project, sources)
    found = StoredCopies.of(stored)
    places = transform_places(project)
    made = derive_missing(project, sources, keys, found.row_of, places)
    parts: list[tuple[Any, np.ndarray, np.ndarray]] = []
    kept_rows: list[np.ndarray] = []
    kept_slots: list[np.ndarray] = []
    labelled = LabelColumns()
    for index, (transform, place, wanted) in enumerate(zip(project.config.metamorphic.transforms, places, keys)):
        kept = [(position, found.row_of[key]) for position, key in enumerate(wanted) if key in found.row_of]
        new, made[index] = made[index], None
        rows = np.array([row for _, row in kept], dtype=np.int64)
        slots = source_order_slots([position for position, _ in kept], new.positions, first=labelled.count)
        kept_rows.append(rows)
        kept_slots.append(slots[: len(kept)])
        if new.positions:
            parts.append((new.rows.rows(), np.arange(len(new.positions)), slots[len(kept) :]))
        in_order = np.argsort(slots, kind="stable")
        ids = [*found.case_ids(rows), *new.case_ids]
        pairs = [*found.pair_digests(rows), *new.pair_digests]
        labelled.add(
            project, transform, place, [ids[at] for at in in_order], [pairs[at] for at in in_order], sources=len(sources)
        )
    if stored is not None and found.row_of and kept_rows:  # kept_rows: none when no transform is left
        parts.insert(0, (stored, np.concatenate(kept_rows), np.concatenate(kept_slots)))
    column_values = {**labelled.columns(), "inputs_digest": [inputs_digest] * labelled.count}
    return AssembledTable(DERIVED_CASES_SCHEMA, parts, COPY_WHOLE_COLUMNS, column_values=column_values), labelled.summaries


class StoredCopies:
    """The stored copies' keys (copy key -> row), and their ids and pair digests by row: the
    columns a launch reads to keep them (none for a table stored before the key)."""

    def __init__(self, copy_keys: list, case_ids: list, pair_digests: list):
        self.row_of = {key: row for row, key in enumerate(copy_keys) if key is not None}
        self._case_ids = case_ids
        self._pair_digests = pair_digests

    @classmethod
    def of(cls, stored: StoredTable | None) -> "StoredCopies":
        if stored is None or not stored.exists or "copy_key" not in stored.names:
            return cls([], [], [])
        columns = stored.columns("copy_key", "case_id", "pair_digest")
        stored.forget()  # the assembled table reads what it keeps again, a column at a time
        return cls(*(null_to_none(columns[name]) for name in ("copy_key", "case_id", "pair_digest")))

    def case_ids(self, rows: np.ndarray) -> list:
        return [self._case_ids[row] for row in rows]

    def pair_digests(self, rows: np.ndarray) -> list:
        return [self._pair_digests[row] for row in rows]


def source_order_slots(kept_positions: list[int], made_positions: list[int], *, first: int) -> np.ndarray:
    """The slot of each copy (kept ones, then made ones, as given) when one transform's copies
    are put in their sources' order from slot `first` on."""
    positions = np.array([*kept_positions, *made_positions], dtype=np.int64)
    slots = np.empty(len(positions), dtype=np.int64)
    slots[np.argsort(positions, kind="stable")] = np.arange(first, first + len(positions))
    return slots


class LabelColumns:
    """The copies' label statuses and stale labels in slot order, read afresh from each
    transform's label file, and each file's summary."""

    def __init__(self) -> None:
        self.statuses: list[str] = []
        self.stale: list[int] = []
        self.summaries: list[LabelSummary] = []

    @property
    def count(self) -> int:
        return len(self.statuses)

    def add(
        self, project: Project, transform: TransformConfig, place: object, case_ids: list, pair_digests: list, *, sources: int
    ) -> None:
        """One transform's copies (ids and pair digests in slot order) labelled from its file."""
        labels = load_labels(project, transform, place)
        labelled = [label_of(labels, case_id, pair) for case_id, pair in zip(case_ids, pair_digests)]
        self.statuses.extend(status for status, _ in labelled)
        stale = [count for _, count in labelled]
        self.stale.extend(stale)
        self.summaries.append(summarise_labels(transform, labels, case_ids, sum(stale), sources=sources))

    def columns(self) -> dict[str, list]:
        return {"label_status": self.statuses, "stale_labels": self.stale}


class MadeCopies:
    """One transform's copies derived now: their rows (with `copy_key`; written to a file of
    their own as each batch fills, read back as the table is written: 200,000 copies of a cold
    run at 100,000 source cases are never all held), and each one's source position, id and
    pair digest."""

    def __init__(self) -> None:
        self.rows = SpilledRowBatches(DERIVED_CASES_SCHEMA)
        self.positions: list[int] = []
        self.case_ids: list[str] = []
        self.pair_digests: list[str] = []

    def add(self, row: dict[str, Any], position: int) -> None:
        self.rows.add_encoded(row)
        self.positions.append(position)
        self.case_ids.append(row["case_id"])
        self.pair_digests.append(row["pair_digest"])


def derive_missing(
    project: Project, sources: pd.DataFrame, keys: list[list[str]], stored_at: dict[str, int], places: list
) -> list[MadeCopies]:
    """Per transform, the copies derived now: of each source whose copy under it is not
    stored. A copy is made from its source's
    stored texts (`copy_of_texts`): only the member its transform reads is decoded, and only the
    changed one encoded; sources are read `MODELS_AT_ONCE` rows at a time. What a transform
    cannot change fails it all (`ProjectError`)."""
    transforms = project.config.metamorphic.transforms
    digests = [digest_of_transform(transform) for transform in transforms]
    states = bool(sources["initial_state"].notna().any())
    missing = sorted({position for wanted in keys for position, key in enumerate(wanted) if key not in stored_at})
    made = [MadeCopies() for _ in transforms]
    problems: list[list[str]] = [[] for _ in transforms]
    source_rows = arrow_columns(sources, CASES_SCHEMA)  # the frame's own columns, not copied
    for start in range(0, len(missing), MODELS_AT_ONCE):
        positions = missing[start : start + MODELS_AT_ONCE]
        # Values and copies make no reference cycle: the collector waits for the slice's end.
        with collection_paused():
            for position, source in zip(positions, rows_at(source_rows, positions).to_pylist()):
                reads = SourceReads(source)
                for index, transform in enumerate(transforms):
                    if keys[index][position] in stored_at:
                        continue
                    try:
                        row = copy_row(transform, source, reads, declares_states=states, transform_digest=digests[index])
                    except TransformProblem as problem:
                        where = case_place(source["case_id"], source["file"], source["line"])
                        problems[index].append(f"{places[index]}: {where}: {problem}")
                        continue
                    if row is not None:
                        made[index].add({**row, "copy_key": keys[index][position]}, position)
    found = [problem for each in problems for problem in each]
    if found:
        raise ProjectError(found)
    return made


class SourceReads:
    """A source's input and starting state as values, each decoded from its text at most once
    however many transforms read it (a transform changes a copy of what it reads, never it)."""

    def __init__(self, source: dict[str, Any]):
        self.source = source
        self._values: dict[str, Any] = {}

    def value(self, name: str) -> Any:
        if name not in self._values:
            self._values[name] = from_json_text(self.source[name])
        return self._values[name]


# A new copy's label columns as the model starts them (`with_labels` reads them afresh).
UNLABELLED = {name: DerivedCaseRecord.model_fields[name].default for name in ("label_status", "stale_labels")}


def copy_row(
    transform: TransformConfig, source: dict[str, Any], reads: SourceReads, *, declares_states: bool, transform_digest: str,
) -> dict[str, Any] | None:
    """The `derived_cases` row of `source`'s copy under `transform` (its stored row, nested
    members as text), as `derive_copy` would make it; None when it gets no copy."""
    world = changes_world(transform)
    made = copy_of_texts(
        transform, CaseTexts.of_row(source), reads.value("initial_state" if world else "input"),
        group_id=source["group_id"], declares_states=declares_states, transform_digest=transform_digest,
    )
    if made is None:
        return None
    return {
        **source,
        **made.texts.as_row(),
        "case_id": copy_id(source["case_id"], transform.name),
        "case_digest": made.case_digest,
        "source_id": source["case_id"],
        "transform": transform.name,
        # The copy's world is no longer the named snapshot's content.
        "snapshot": None if world else source["snapshot"],
        "transform_digest": transform_digest,
        "pair_digest": made.pair_digest,
        **UNLABELLED,
        "minimum_validity": transform.minimum_validity,
        "inputs_digest": None,
    }
