"""The metamorphic copies as a table, derived only where no stored copy holds: a copy is kept
while its source's row, its transform, whether the case set declares starting states and the
code that derives copies (`producer_code_version("copies")`) are those it was made from
(`copy_key`), so one case added derives that case's copies and no other. Label statuses are
read afresh for every copy (a label file is read whole anyway, and a relabelled pair changes
only its status). Sources are turned into models a slice at a time, never the whole suite."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from ..model.config import Project, TransformConfig
from ..model.errors import ProjectError
from ..model.fingerprints import producer_code_version, row_key
from ..model.transforms import LabelSummary, derive_each, label_of, load_labels, summarise_labels, transform_places
from .decoding import MODELS_AT_ONCE, collection_paused
from .tables import CASES_SCHEMA, DERIVED_CASES_SCHEMA, cases_from_table, derived_case_table, null_to_none


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
    with `source_position` (the source's row) and `copy_key`. The sources become models
    `MODELS_AT_ONCE` at a time; what a transform cannot change fails it all (`ProjectError`)."""
    transforms = project.config.metamorphic.transforms
    states = bool(sources["initial_state"].notna().any())
    missing = sorted({position for wanted in keys for position, key in enumerate(wanted) if key not in stored_at})
    pieces: list[list[pd.DataFrame]] = [[] for _ in transforms]
    problems: list[list[str]] = [[] for _ in transforms]
    for start in range(0, len(missing), MODELS_AT_ONCE):
        positions = missing[start : start + MODELS_AT_ONCE]
        # Models and copies make no reference cycle: the collector waits for the slice's end.
        with collection_paused():
            models = dict(zip(positions, cases_from_table(sources.iloc[positions])))
            for index, transform in enumerate(transforms):
                wanted = [position for position in positions if keys[index][position] not in stored_at]
                copies = derive_each(
                    transform, places[index], [models[position] for position in wanted], declares_states=states,
                    problems=problems[index],
                )
                made_from = {copy.source_id: copy for copy in copies}
                rows = [(position, made_from[models[position].case_id]) for position in wanted if models[position].case_id in made_from]
                pieces[index].append(derived_case_table([copy for _, copy in rows]).assign(
                    source_position=pd.Series([position for position, _ in rows], dtype="int64"),
                    copy_key=pd.Series([keys[index][position] for position, _ in rows], dtype=object),
                ))
    found = [problem for each in problems for problem in each]
    if found:
        raise ProjectError(found)
    return [pd.concat(each, ignore_index=True) if each else None for each in pieces]


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
