"""The metamorphic copies as a table, derived only where no stored copy holds: a copy is kept
while its source's row, its transform, whether the case set declares starting states and the
code that derives copies (`producer_code_version("copies")`) are those it was made from
(`copy_key`), so one case added derives that case's copies and no other. Label statuses are
read afresh for every copy (a label file is read whole anyway, and a relabelled pair changes
only its status). A copy is made from its source's stored texts, a slice of sources at a time:
only the member its transform reads is decoded, and only the one it changes encoded again."""

from __future__ import annotations

from typing import Any

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
from .decoding import MODELS_AT_ONCE, collection_paused
from .tables import CASES_SCHEMA, DERIVED_CASES_SCHEMA, RowBatches, arrow_columns, derived_case_table, from_json_text, null_to_none


def copy_keys(project: Project, cases: pd.DataFrame) -> list[list[str]]:
    """Per transform (in `metamorphic.transforms` order), per source (in table order), the key
    its copy is stored under: the source's whole row, the transform, whether the case set
    declares starting states, and the version of the code that derives copies."""
    code = producer_code_version("copies")
    states = bool(cases["initial_state"].notna().any())
    sources = [row_key("source", *values) for values in zip(*(null_to_none(cases[name]) for name in CASES_SCHEMA.names))]
    return [
        [row_key("copy", source, transform_key, states, code) for source in sources]
        for transform_key in (transform.model_dump_json() for transform in project.config.metamorphic.transforms)
    ]


def kept_or_derived(project: Project, sources: pd.DataFrame, stored: pd.DataFrame | None) -> tuple[pd.DataFrame, list[LabelSummary]]:
    """The copies of `sources` (the cases' table, sources only), transform by transform and in
    source order: the stored copy where its key holds, else derived now; every copy labelled
    from its transform's label file now. A transform that cannot change a source fails the
    whole derivation with every such problem (a `ProjectError`), as `derive_cases` does."""
    sources = sources.reset_index(drop=True)
    keys = copy_keys(project, sources)
    stored_at = stored_positions(stored)
    places = transform_places(project)
    made = derive_missing(project, sources, keys, stored_at, places)
    frames: list[pd.DataFrame] = []
    summaries: list[LabelSummary] = []
    for index, (transform, place, wanted) in enumerate(zip(project.config.metamorphic.transforms, places, keys)):
        kept = [(position, stored_at[key]) for position, key in enumerate(wanted) if key in stored_at]
        new, made[index] = made[index], None  # each transform's copies held once: in order, not also as made
        labelled, summary = with_labels(project, transform, place, in_source_order(stored, kept, new), sources=len(sources))
        del new
        frames.append(labelled)
        summaries.append(summary)
    whole = pd.concat(frames, ignore_index=True) if frames else derived_case_table([])
    del frames  # the whole table's rows are its own now
    # Through the table's schema: kept and new rows come out with the same column types.
    table = pa.Table.from_pandas(whole, schema=DERIVED_CASES_SCHEMA, preserve_index=False)
    del whole
    return table.to_pandas(), summaries


def stored_positions(stored: pd.DataFrame | None) -> dict[str, int]:
    """copy key -> its row in the stored copies (none for a table stored before the key)."""
    if stored is None or "copy_key" not in stored.columns:
        return {}
    return {key: position for position, key in enumerate(null_to_none(stored["copy_key"])) if key is not None}


def derive_missing(
    project: Project, sources: pd.DataFrame, keys: list[list[str]], stored_at: dict[str, int], places: list
) -> list[pd.DataFrame]:
    """Per transform, the copies derived now: of each source whose copy under it is not stored,
    with `source_position` (the source's row) and `copy_key`. A copy is made from its source's
    stored texts (`copy_of_texts`): only the member its transform reads is decoded, and only the
    changed one encoded; sources are read `MODELS_AT_ONCE` rows at a time. What a transform
    cannot change fails it all (`ProjectError`)."""
    transforms = project.config.metamorphic.transforms
    digests = [digest_of_transform(transform) for transform in transforms]
    states = bool(sources["initial_state"].notna().any())
    missing = sorted({position for wanted in keys for position, key in enumerate(wanted) if key not in stored_at})
    pieces: list[RowBatches] = [RowBatches(DERIVED_CASES_SCHEMA) for _ in transforms]
    made_at: list[list[int]] = [[] for _ in transforms]
    problems: list[list[str]] = [[] for _ in transforms]
    source_rows = arrow_columns(sources, CASES_SCHEMA)  # the frame's own columns, not copied
    for start in range(0, len(missing), MODELS_AT_ONCE):
        positions = missing[start : start + MODELS_AT_ONCE]
        # Values and copies make no reference cycle: the collector waits for the slice's end.
        with collection_paused():
            for position, source in zip(positions, rows_at(source_rows, positions)):
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
                        pieces[index].add_encoded({**row, "copy_key": keys[index][position]})
                        made_at[index].append(position)
    found = [problem for each in problems for problem in each]
    if found:
        raise ProjectError(found)
    return [
        rows.frame().assign(source_position=pd.Series(at, dtype="int64")) if at else None
        for rows, at in zip(pieces, made_at)
    ]


def rows_at(table: pa.Table, positions: list[int]) -> list[dict[str, Any]]:
    """The rows at `positions` (ascending) as plain values: consecutive ones (every source of a
    first run) a slice of the table, no copy; others taken (a take from a column of many
    chunks costs about as much as the rows' values themselves)."""
    if positions and positions[-1] - positions[0] == len(positions) - 1:
        return table.slice(positions[0], len(positions)).to_pylist()
    return table.take(positions).to_pylist()


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



def in_source_order(stored: pd.DataFrame | None, kept: list[tuple[int, int]], made: pd.DataFrame | None) -> pd.DataFrame:
    """One transform's copies in source order: `kept` as (source position, stored row), and
    `made` (with their `source_position`)."""
    parts = []
    if kept:
        rows = stored.iloc[[row for _, row in kept]].reindex(columns=DERIVED_CASES_SCHEMA.names)
        parts.append(rows.assign(source_position=[position for position, _ in kept]))
    if made is not None and len(made):
        parts.append(made.reindex(columns=[*DERIVED_CASES_SCHEMA.names, "source_position"]))
    if not parts:
        return derived_case_table([])
    frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0].reset_index(drop=True)
    return frame.sort_values("source_position", kind="stable").drop(columns="source_position").reset_index(drop=True)


def with_labels(
    project: Project, transform: TransformConfig, place: object, copies: pd.DataFrame, *, sources: int
) -> tuple[pd.DataFrame, LabelSummary]:
    """The transform's copies with their label status read from its label file now, and the summary."""
    labels = load_labels(project, transform, place)
    ids = null_to_none(copies["case_id"])
    labelled = [label_of(labels, case_id, pair) for case_id, pair in zip(ids, null_to_none(copies["pair_digest"]))]
    stale = [count for _, count in labelled]
    frame = copies.assign(
        label_status=pd.Series([status for status, _ in labelled], index=copies.index, dtype=object),
        stale_labels=pd.Series(stale, index=copies.index, dtype="int64"),
    )
    return frame, summarise_labels(transform, labels, ids, sum(stale), sources=sources)
