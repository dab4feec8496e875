"""Metamorphic copies of the cases: transforms, derived cases, people's validity labels.

Each source case gains one copy per transform of `oloproof.yaml` `metamorphic.transforms`
(id `<source>~<name>`, same starting state, expected and metadata, in the source's cluster).
A copy only counts as evidence when people have read its pair and kept it: a label counts
when its digest equals the pair's current digest, so editing a transform (or the source's
input) retires every label written for the old text. A transform is checked when the 95%
Clopper-Pearson lower bound of kept/pairs reaches its `minimum_validity`.
"""

from __future__ import annotations

import copy
import pickle
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, NamedTuple, Sequence

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from .cases import CaseRecord, CaseTexts, read_jsonl
from .config import PROJECT_FILE, Project, TransformConfig, read_yaml
from .digests import case_text_digest, json_text, object_text, pair_text_digest, transform_digest
from .errors import ProjectError, describe_validation_error, yaml_line
from .paths import ABSENT, path_keys, read_keys, write_keys

LabelStatus = Literal["kept", "rejected", "unlabelled"]


# -- transforms ----------------------------------------------------------------------------


def digest_of_transform(transform: TransformConfig) -> str:
    """The transform's identity: `replace` as JSON arrays of [old, new], nulls kept."""
    replace = None if transform.replace is None else [[old, new] for old, new in transform.replace]
    return transform_digest(
        name=transform.name,
        version=transform.version,
        field=transform.field,
        template=transform.template,
        replace=replace,
    )


def apply_transform(transform: TransformConfig, text: str) -> str:
    """The changed text (see `change_text`)."""
    return change_text(text, template=transform.template, replace=transform.replace)


def change_text(text: str, *, template: str | None, replace: list[tuple[str, str]] | None) -> str:
    """A template is plain substitution of `{value}` (never `str.format`, so
    `{value.__class__}` stays literal text); `replace` applies its pairs in order. Shared by
    transforms and by faults that change a tool's real result (model/faults.py)."""
    if template is not None:
        return template.replace("{value}", text)
    for old, new in replace or []:
        text = text.replace(old, new)
    return text


class TransformProblem(ValueError):
    """Why a transform cannot make a copy of one case (worded for the person fixing it)."""


# A field starting with this key points into the case's starting state (inline or its
# snapshot's tables): the world the agent reads, where an indirect injection is placed.
WORLD_FIELD = "initial_state"


def changes_world(transform: TransformConfig) -> bool:
    """The transform writes into the starting state, not the input."""
    keys = path_keys(transform.field)
    return len(keys) > 1 and keys[0] == WORLD_FIELD


def _field_name(transform: TransformConfig) -> str:
    if changes_world(transform):
        return transform.field
    return f"input.{transform.field}" if transform.field else "input"


def transformed_input(transform: TransformConfig, source_input: Any) -> Any:
    """The source's input with the transform applied to its field."""
    return _transformed(transform, source_input, path_keys(transform.field))


def transformed_world(transform: TransformConfig, source_state: dict[str, Any] | None) -> dict[str, Any] | None:
    """The source's starting state with the transform applied at its field, or None when the
    field names nothing there (that case gets no copy: the world holds no such text)."""
    keys = path_keys(transform.field)[1:]
    if source_state is None or read_keys(source_state, keys) is ABSENT:
        return None
    return _transformed(transform, source_state, keys)


def _transformed(transform: TransformConfig, data: Any, keys: Sequence[str]) -> Any:
    text = read_keys(data, keys)
    if text is ABSENT:
        raise TransformProblem(f"{_field_name(transform)} is not a string (it is absent)")
    if not isinstance(text, str):
        raise TransformProblem(f"{_field_name(transform)} is not a string (it is {_json_type(text)})")
    changed = apply_transform(transform, text)
    if changed == text:
        raise TransformProblem(f"{_field_name(transform)} is unchanged by the transform")
    return write_keys(data, keys, changed)


def field_text(transform: TransformConfig, case: CaseRecord) -> Any:
    """The text the transform reads (a source) or wrote (a copy); None when there is none."""
    keys = path_keys(transform.field)
    data = case.input
    if changes_world(transform):
        keys, data = keys[1:], case.initial_state
    value = read_keys(data, keys)
    return None if value is ABSENT else value


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


# -- derived cases -------------------------------------------------------------------------


class DerivedCaseRecord(CaseRecord):
    """A row of the `derived_cases` table: a copy, its digests and its label status."""

    transform_digest: str
    pair_digest: str
    label_status: LabelStatus = "unlabelled"
    # Labels naming this copy whose digest is not the pair's current one: they no longer count.
    stale_labels: int = 0
    minimum_validity: float

    def as_case(self) -> CaseRecord:
        return CaseRecord.model_validate(self.model_dump(include=set(CaseRecord.model_fields)))


def copy_id(source_id: str, transform_name: str) -> str:
    return f"{source_id}~{transform_name}"


@dataclass(frozen=True)
class CopyOfTexts:
    """A copy as its source's texts make it: the member the transform changed (its value),
    the copy's texts (the source's, that member encoded anew) and its two digests."""

    changed: Any
    texts: CaseTexts
    case_digest: str
    pair_digest: str


def copy_of_texts(
    transform: TransformConfig, source: CaseTexts, read: Any, *, group_id: str, declares_states: bool, transform_digest: str,
) -> CopyOfTexts | None:
    """The copy of a source given as its texts, `read` being the value of the member the
    transform reads (the input; the starting state for a transform into the world): only that
    member is changed and encoded, every other text and each digest's body is the source's
    own text (`object_text`). None when a transform into the world names nothing in this
    state (that case gets no copy). Raises TransformProblem."""
    world = changes_world(transform)
    if world:
        changed = transformed_world(transform, read)
        if changed is None:
            return None
        texts = replace(source, initial_state=json_text(changed))
    else:
        changed = transformed_input(transform, read)
        texts = replace(source, input=json_text(changed))
    return CopyOfTexts(
        changed=changed,
        texts=texts,
        # A copy sits in its source's cluster, and the cluster enters its digest.
        case_digest=case_text_digest(
            input=texts.input, expected=texts.expected, metadata=texts.metadata, group_id=group_id,
            initial_state=texts.initial_state, include_initial_state=declares_states,
        ),
        pair_digest=pair_text_digest(
            transform=transform_digest, source_input=_paired_text(world, source), derived_input=_paired_text(world, texts),
        ),
    )


def _paired_text(world: bool, texts: CaseTexts) -> str | None:
    """What a pair's digest covers on each side: the input (Oloproof's pair digest), and for a
    transform into the world the starting state too, so a label read for one world retires
    when the world (or the input beside it) changes."""
    return object_text({"input": texts.input, WORLD_FIELD: texts.initial_state}) if world else texts.input


def derive_copy(
    transform: TransformConfig, source: CaseRecord, *, declares_states: bool, known_digest: str | None = None
) -> DerivedCaseRecord | None:
    """One copy of `source` under `transform` (unlabelled); None when the transform points
    into the starting state and names nothing in this case's. Raises TransformProblem."""
    the_transform_digest = known_digest or digest_of_transform(transform)
    world = changes_world(transform)
    made = copy_of_texts(
        transform, CaseTexts.of(source), source.initial_state if world else source.input,
        group_id=source.group_id, declares_states=declares_states, transform_digest=the_transform_digest,
    )
    if made is None:
        return None
    derived_input, derived_state = (source.input, made.changed) if world else (made.changed, source.initial_state)
    # The copy owns its data (nothing it holds is the source's): one pickle round trip copies
    # the five parts several times faster than `copy.deepcopy` (JSON data only, so the same).
    owned_input, owned_state, expected, metadata, events = pickle.loads(pickle.dumps(
        (derived_input, derived_state, source.expected, source.metadata, source.events), pickle.HIGHEST_PROTOCOL
    ))
    return DerivedCaseRecord(
        case_id=copy_id(source.case_id, transform.name),
        case_digest=made.case_digest,
        source_id=source.case_id,
        transform=transform.name,
        group_id=source.group_id,
        input=owned_input,
        initial_state=owned_state,
        # The copy's world is no longer the named snapshot's content.
        snapshot=None if world else source.snapshot,
        expected=expected,
        metadata=metadata,
        events=events,
        file=source.file,
        line=source.line,
        transform_digest=the_transform_digest,
        pair_digest=made.pair_digest,
        minimum_validity=transform.minimum_validity,
    )


def as_the_copy_started(source_after: Any, source_start: Any, copy_start: Any) -> Any:
    """The source's state after, with the copy's starting text wherever a transform into the
    world changed it and the source's run left it as it started: a same-state relation then
    compares what the agents did, not the text the transform put there."""
    changed = source_after
    for keys in _differing_leaves(source_start, copy_start, []):
        if read_keys(changed, keys) == read_keys(source_start, keys):
            changed = write_keys(changed, keys, copy.deepcopy(read_keys(copy_start, keys)))
    return changed


def _differing_leaves(ours: Any, theirs: Any, keys: list[str]) -> list[list[str]]:
    """Paths (as keys) of the values that differ between two states of one shape."""
    if isinstance(ours, dict) and isinstance(theirs, dict) and ours.keys() == theirs.keys():
        return [found for key in ours for found in _differing_leaves(ours[key], theirs[key], [*keys, key])]
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        return [found for index, (a, b) in enumerate(zip(ours, theirs)) for found in _differing_leaves(a, b, [*keys, str(index)])]
    return [] if ours == theirs or not keys else [keys]


@dataclass
class _TransformPlace:
    """Where a transform is written, for error lines: `<file>:<line>: metamorphic.transforms[i] (name)`."""

    config_path: Path
    line: int | None
    index: int
    name: str

    def __str__(self) -> str:
        where = f"{self.config_path}:{self.line}" if self.line is not None else str(self.config_path)
        return f"{where}: metamorphic.transforms[{self.index}] ({self.name})"


def transform_places(project: Project) -> list[_TransformPlace]:
    config_path = project.root / PROJECT_FILE
    _, root_node = read_yaml(config_path) if config_path.is_file() else (None, None)
    return [
        _TransformPlace(config_path, yaml_line(root_node, ("metamorphic", "transforms", index)), index, transform.name)
        for index, transform in enumerate(project.config.metamorphic.transforms)
    ]


def case_place(case_id: str, file: str | None, line: int | None) -> str:
    """How a problem names its case: `case <id> (<file>:<line>)`."""
    return f"case {case_id} ({file}:{line})" if file else f"case {case_id}"


# -- validity labels -----------------------------------------------------------------------


class ValidityLabel(BaseModel):
    """One label line: a person read the pair and says whether the copy kept its meaning.
    Other keys (a note, who labelled) are allowed and ignored."""

    model_config = ConfigDict(extra="ignore")

    case: str
    digest: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    kept: StrictBool


class LabelSaid(NamedTuple):
    """What one label line says of the copy it names: a tuple, not the line's model (a label
    file of 100,000 lines held as models cost a launch 70 MiB)."""

    digest: str
    kept: bool


@dataclass
class LabelFile:
    """A transform's labels by copy id, and the lines that named no copy of the transform."""

    path: Path | None
    by_case: dict[str, list[LabelSaid]] = field(default_factory=dict)
    lines: int = 0
    unmatched: int = 0


def labels_path(project: Project, transform: TransformConfig) -> Path | None:
    return None if transform.validity_labels is None else project.root / transform.validity_labels


def load_labels(project: Project, transform: TransformConfig, place: object = None) -> LabelFile:
    """The transform's label file, every line validated (a bad line fails the whole file).
    `place` names the transform in errors (default: the file and the transform's name)."""
    path = labels_path(project, transform)
    if path is None:
        return LabelFile(path=None)
    if not path.is_file():
        where = place or f"{project.root / PROJECT_FILE}: metamorphic transform {transform.name}"
        raise ProjectError(f"{where}: validity_labels: no file {path}")
    labels, problems = LabelFile(path=path), []
    for line_number, data in read_jsonl(path):
        try:
            label = ValidityLabel.model_validate(data)
        except ValidationError as error:
            problems.extend(describe_validation_error(error, path, line=line_number))
            continue
        labels.lines += 1
        labels.by_case.setdefault(label.case, []).append(LabelSaid(label.digest, label.kept))
    if problems:
        raise ProjectError(problems)
    return labels


def label_copy(derived: DerivedCaseRecord, labels: LabelFile) -> DerivedCaseRecord:
    """The copy with its label status: only labels carrying the pair's current digest count,
    and several current labels keep the pair only if all of them say kept."""
    status, stale = label_of(labels, derived.case_id, derived.pair_digest)
    return derived.model_copy(update={"label_status": status, "stale_labels": stale})


def label_of(labels: LabelFile, copy_case_id: str, copy_pair_digest: str) -> tuple[LabelStatus, int]:
    """A copy's label status and its stale labels (those naming it under another digest)."""
    naming_this_copy = labels.by_case.get(copy_case_id, [])
    current = [label.kept for label in naming_this_copy if label.digest == copy_pair_digest]
    status: LabelStatus = "unlabelled" if not current else ("kept" if all(current) else "rejected")
    return status, len(naming_this_copy) - len(current)


# -- the derived case set ------------------------------------------------------------------


class LabelSummary(BaseModel):
    """What a transform's label file held, for the asset's metadata."""

    model_config = ConfigDict(extra="forbid")

    transform: str
    labels_file: str | None
    label_lines: int
    counted: int
    stale: int
    # Lines naming a case that is no copy of this transform (another transform's, or gone).
    unmatched: int
    # Copies made, and sources left without one: a transform into the starting state makes
    # no copy of a case whose world holds nothing at its field.
    copies: int = 0
    no_copy: int = 0


@dataclass
class DerivedCases:
    copies: list[DerivedCaseRecord]
    label_summaries: list[LabelSummary]


def declares_states(sources: list[CaseRecord]) -> bool:
    """As when the sources were loaded: the case set declares starting states if any case does."""
    return any(case.initial_state is not None for case in sources)


def derive_cases(project: Project, sources: list[CaseRecord]) -> DerivedCases:
    """Every copy of every source under every transform, labelled. Any case a transform cannot
    change (a field that is not a string, text left unchanged) is a configuration error; a
    transform into the starting state skips the cases whose world has nothing at its field."""
    sources = [case for case in sources if not case.is_derived]
    states = declares_states(sources)
    copies: list[DerivedCaseRecord] = []
    summaries: list[LabelSummary] = []
    problems: list[str] = []
    for transform, place in zip(project.config.metamorphic.transforms, transform_places(project)):
        made = derive_each(transform, place, sources, declares_states=states, problems=problems)
        if problems:
            continue
        labels = load_labels(project, transform, place)
        labelled = [label_copy(derived, labels) for derived in made]
        copies.extend(labelled)
        summaries.append(summarise_labels(
            transform, labels, [derived.case_id for derived in labelled], sum(derived.stale_labels for derived in labelled),
            sources=len(sources),
        ))
    if problems:
        raise ProjectError(problems)
    return DerivedCases(copies=copies, label_summaries=summaries)


def derive_each(
    transform: TransformConfig, place: object, sources: list[CaseRecord], *, declares_states: bool, problems: list[str]
) -> list[DerivedCaseRecord]:
    """The copies of `sources` under `transform`, unlabelled, in order; what it cannot change
    is added to `problems` (`<place>: case <id> (<file>:<line>): why`)."""
    the_digest = digest_of_transform(transform)
    made: list[DerivedCaseRecord] = []
    for source in sources:
        try:
            derived = derive_copy(transform, source, declares_states=declares_states, known_digest=the_digest)
        except TransformProblem as problem:
            problems.append(f"{place}: {case_place(source.case_id, source.file, source.line)}: {problem}")
            continue
        if derived is not None:
            made.append(derived)
    return made


def summarise_labels(
    transform: TransformConfig, labels: LabelFile, copy_ids: list[str], stale: int, *, sources: int
) -> LabelSummary:
    """What the transform's label file held, over its copies (their ids, their stale labels)."""
    ids = set(copy_ids)
    matched = sum(len(found) for case_id, found in labels.by_case.items() if case_id in ids)
    return LabelSummary(
        transform=transform.name,
        labels_file=transform.validity_labels,
        label_lines=labels.lines,
        counted=matched - stale,
        stale=stale,
        unmatched=labels.lines - matched,
        copies=len(copy_ids),
        no_copy=sources - len(copy_ids),
    )
