"""People's validity labels, round trip: the pairs nobody has labelled written out for a person
to fill in (`pending`), the filled file checked against the current pairs and appended to the
transform's labels file (`import_labels`), and each transform's counts with the number of
further kept labels that would check it (`label_status`).

The current pairs are derived from the project's files as they are now (never from stored
tables, which may predate an edit), so a digest in a filled file is checked against the text a
run would judge. Label lines are written in the project's label format and validated by the
model that reads them (`ValidityLabel`); existing lines are never rewritten, only appended to.
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from ..decide.statistics import clopper_pearson
from ..decide.validity import VALIDITY_CONFIDENCE, TransformValidity, transform_validity
from ..model.cases import CaseRecord, load_cases, parse_json, read_text_file
from ..model.config import PROJECT_FILE, Project, TransformConfig
from ..model.errors import ProjectError, format_location
from ..model.transforms import (
    DerivedCaseRecord,
    LabelFile,
    LabelSaid,
    TransformProblem,
    ValidityLabel,
    derive_copy,
    digest_of_transform,
    field_text,
    label_copy,
    labels_path,
    load_labels,
)
from ..store.journal import file_lock
from ..store.layout import labels_lock_path
from ..store.tables import derived_case_table

PendingFormat = Literal["jsonl", "csv"]
PENDING_FORMATS: tuple[PendingFormat, ...] = ("jsonl", "csv")
# The columns of a pending file, in the order a person reads them: what to fill in first.
PENDING_COLUMNS = ("case", "kept", "note", "source_text", "copy_text", "digest")
# What a person may write in `kept` (any case); blank means "not labelled yet".
KEPT_WORDS = {"true": True, "yes": True, "y": True, "1": True, "kept": True,
              "false": False, "no": False, "n": False, "0": False, "rejected": False}


# -- the current pairs ---------------------------------------------------------------------


@dataclass
class TransformPairs:
    """One transform's copies of the current sources, each with its current label status."""

    transform: TransformConfig
    copies: list[DerivedCaseRecord]
    labels: LabelFile
    sources: dict[str, CaseRecord] = field(default_factory=dict)

    @property
    def labels_file(self) -> Path | None:
        """Where its labels are appended (None: `oloproof.yaml` names no validity_labels)."""
        return self.labels.path

    def source_text(self, derived: DerivedCaseRecord) -> Any:
        return field_text(self.transform, self.sources[derived.source_id])

    def current_labels(self, derived: DerivedCaseRecord) -> list[LabelSaid]:
        return [label for label in self.labels.by_case.get(derived.case_id, []) if label.digest == derived.pair_digest]


def current_pairs(project: Project) -> list[TransformPairs]:
    """Every transform's pairs as a run would derive them now. A labels file named in
    `oloproof.yaml` but not written yet holds no labels here (the first import creates it)."""
    sources = [case for case in load_cases(project) if not case.is_derived]
    # As the derived_cases asset does: the case set declares starting states if any case does.
    declares_states = any(case.initial_state is not None for case in sources)
    found, problems = [], []
    for transform in project.config.metamorphic.transforms:
        the_digest = digest_of_transform(transform)
        path = labels_path(project, transform)
        labels = load_labels(project, transform) if path is not None and path.is_file() else LabelFile(path=path)
        copies = []
        for source in sources:
            try:
                made = derive_copy(transform, source, declares_states=declares_states, known_digest=the_digest)
            except TransformProblem as problem:
                problems.append(f"{project.root / PROJECT_FILE}: metamorphic transform {transform.name}: "
                                f"case {source.case_id}: {problem}")
                continue
            if made is not None:  # None: a transform into the world that names nothing in this case's
                copies.append(label_copy(made, labels))
        found.append(TransformPairs(transform, copies, labels, {source.case_id: source for source in sources}))
    if problems:
        raise ProjectError(problems)
    return found


def pairs_of(project: Project, transform_name: str) -> TransformPairs:
    every = current_pairs(project)
    for pairs in every:
        if pairs.transform.name == transform_name:
            return pairs
    names = ", ".join(pairs.transform.name for pairs in every) or "none"
    raise ProjectError(f"{project.root / PROJECT_FILE}: no metamorphic transform {transform_name!r} (transforms: {names})")


# -- pending -------------------------------------------------------------------------------


class PendingPair(BaseModel):
    """A line of a pending file: a pair with no current label, `kept` left for a person."""

    model_config = ConfigDict(extra="forbid")

    case: str
    kept: bool | None = None
    note: str = ""
    source_text: Any
    copy_text: Any
    digest: str


def pending_pairs(pairs: TransformPairs) -> list[PendingPair]:
    """The pairs with no current label (a stale label does not count as one)."""
    return [
        PendingPair(
            case=derived.case_id,
            source_text=pairs.source_text(derived),
            copy_text=field_text(pairs.transform, derived),
            digest=derived.pair_digest,
        )
        for derived in pairs.copies
        if derived.label_status == "unlabelled"
    ]


def pending_text(pending: list[PendingPair], format: PendingFormat) -> str:
    """The file a person fills in: JSON lines, or CSV with a header (a text that is not a
    string is written as JSON)."""
    rows = [item.model_dump() for item in pending]
    if format == "jsonl":
        return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=PENDING_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({name: _csv_cell(row[name]) for name in PENDING_COLUMNS})
    return buffer.getvalue()


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def write_pending(path: Path, text: str) -> None:
    """A new file only: an earlier pending file may hold a person's labels not imported yet,
    and nothing they wrote is ever overwritten."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with path.open("x", encoding="utf-8") as handle:
            handle.write(text)
    except FileExistsError:
        raise ProjectError(
            f"{path}: already exists (it may hold labels not imported yet); import it with "
            f"`oloproof labels import {path}`, delete it, or name another file with --out"
        ) from None


def default_pending_path(project: Project, transform_name: str, format: PendingFormat) -> Path:
    return project.root / "labels" / f"{transform_name}.pending.{format}"


# -- import --------------------------------------------------------------------------------


@dataclass
class FilledLine:
    """A line of a filled-in file, as read: its line number and its fields."""

    line: int
    fields: dict[str, Any]


@dataclass
class ImportOutcome:
    """What an import did: labels appended per labels file, and why any line was not."""

    appended: dict[Path, int] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)  # one line each: `file:line: field: why`
    unfilled: int = 0  # `kept` left blank: nothing to import yet
    already_labelled: int = 0  # the same label already counts (a file imported twice)
    disagreeing: int = 0  # appended against an earlier label saying otherwise: the pair is rejected

    @property
    def appended_total(self) -> int:
        return sum(self.appended.values())


def filled_lines(path: Path) -> tuple[list[FilledLine], list[tuple[int, str]]]:
    """The lines of a filled-in file (CSV by its `.csv` suffix, else JSON lines), and the
    lines that could not be read at all, one problem each."""
    if not path.is_file():
        raise ProjectError(f"{path}: no such file")
    text = read_text_file(path)
    return _csv_lines(path, text) if path.suffix.lower() == ".csv" else _json_lines(path, text)


def _json_lines(path: Path, text: str) -> tuple[list[FilledLine], list[tuple[int, str]]]:
    lines, problems = [], []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            value = parse_json(line)
        except ValueError as error:
            problems.append((number, f"{path}:{number}: invalid JSON: {error}"))
            continue
        if not isinstance(value, dict):
            problems.append((number, f"{path}:{number}: expected a JSON object, got {type(value).__name__}"))
            continue
        lines.append(FilledLine(number, value))
    return lines, problems


def _csv_lines(path: Path, text: str) -> tuple[list[FilledLine], list[tuple[int, str]]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = [name for name in ("digest", "kept") if name not in (reader.fieldnames or [])]
    if missing:
        raise ProjectError(f"{path}:1: header: no column {', '.join(missing)} (a pending file's columns: "
                           f"{', '.join(PENDING_COLUMNS)})")
    lines, start = [], reader.line_num + 1
    for row in reader:
        lines.append(FilledLine(start, {name: value for name, value in row.items() if name is not None}))
        start = reader.line_num + 1
    return lines, []


def kept_value(raw: Any) -> bool | None:
    """A person's answer: true/false (or yes/no, kept/rejected, 1/0); blank is no answer yet."""
    if raw is None or isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        if not raw.strip():
            return None
        if raw.strip().lower() in KEPT_WORDS:
            return KEPT_WORDS[raw.strip().lower()]
    raise ValueError(f"{raw!r} is not true or false (or blank while not labelled)")


@dataclass
class _Pairs:
    """The current pairs by digest and by copy id, across every transform."""

    by_digest: dict[str, tuple[TransformPairs, DerivedCaseRecord]]
    by_case: dict[str, tuple[TransformPairs, DerivedCaseRecord]]

    @classmethod
    def of(cls, every: list[TransformPairs]) -> "_Pairs":
        by_digest, by_case = {}, {}
        for pairs in every:
            for derived in pairs.copies:
                by_digest[derived.pair_digest] = by_case[derived.case_id] = (pairs, derived)
        return cls(by_digest, by_case)


class NotFilledIn(Exception):
    """A line whose `kept` is still blank: left for later, not refused."""


@dataclass
class _Accepted:
    """A filled line that is a label of a current pair, as the line to append."""

    pairs: TransformPairs
    derived: DerivedCaseRecord
    kept: bool
    line: str


def _checked_label(fields: dict[str, Any], pairs: _Pairs) -> _Accepted:
    """The line as a label line of a current pair, validated by the model that reads labels;
    ValueError with `field: why` when it is not one, NotFilledIn when `kept` is blank."""
    try:
        kept = kept_value(fields.get("kept"))
    except ValueError as error:
        raise ValueError(f"kept: {error}") from None
    if kept is None:
        raise NotFilledIn
    digest, case = fields.get("digest"), fields.get("case") or None
    found = pairs.by_digest.get(digest) if isinstance(digest, str) else None
    if found is None:
        raise ValueError(_why_not_current(digest, case, pairs))
    transform_pairs, derived = found
    if case is not None and case != derived.case_id:
        raise ValueError(f"case: {case!r} does not match the digest, which is the pair of {derived.case_id!r}")
    if transform_pairs.labels_file is None:
        name = transform_pairs.transform.name
        raise ValueError(f"case: transform {name!r} has no validity_labels file in {PROJECT_FILE} "
                         f"(add e.g. `validity_labels: labels/{name}.jsonl`)")
    data = {"case": derived.case_id, "digest": derived.pair_digest, "kept": kept}
    if isinstance(fields.get("note"), str) and fields["note"].strip():
        data["note"] = fields["note"].strip()
    return _Accepted(transform_pairs, derived, kept, label_line(data))


def _why_not_current(digest: Any, case: Any, pairs: _Pairs) -> str:
    if not isinstance(digest, str) or not digest:
        return "digest: missing (copy it unchanged from the pending file)"
    named = pairs.by_case.get(case) if isinstance(case, str) else None
    if named is not None:
        transform_pairs, derived = named
        return (f"digest: stale: not the current digest of {derived.case_id}'s pair (its transform or its "
                f"source's input changed since the file was written); label it again from `oloproof labels "
                f"pending {transform_pairs.transform.name}`")
    return f"digest: unknown: {digest} is no current pair's digest{f' and {case!r} is no current copy' if case else ''}"


def import_labels(project: Project, path: Path) -> ImportOutcome:
    """Append the filled-in labels of current pairs to their transforms' labels files.

    Each line stands alone, as a person labels each pair alone: a stale, unknown or unreadable
    line is refused with one line saying why and the others are still imported (a file with
    no digest or kept column is refused whole). Nothing already in a labels file is rewritten:
    a label that already counts is not written twice (importing one file twice changes
    nothing), and one that disagrees with an earlier label is appended, so the pair counts as
    rejected as the label format says. The whole check and append hold the project's labels
    lock, so two imports at once cannot both append the same label."""
    lines, refused = filled_lines(path)
    outcome = ImportOutcome()
    with file_lock(labels_lock_path(project.root)):
        pairs = _Pairs.of(current_pairs(project))
        to_append: dict[Path, list[str]] = {}
        said: dict[str, set[bool]] = {}  # pair digest -> what counts for it so far
        for filled in lines:
            where = f"{path}:{filled.line}"
            try:
                accepted = _checked_label(filled.fields, pairs)
            except NotFilledIn:
                outcome.unfilled += 1
                continue
            except ValueError as problem:
                refused.append((filled.line, f"{where}: {problem}"))
                continue
            digest = accepted.derived.pair_digest
            counted = said.setdefault(digest, {old.kept for old in accepted.pairs.current_labels(accepted.derived)})
            if accepted.kept in counted:
                outcome.already_labelled += 1
                continue
            outcome.disagreeing += bool(counted)
            counted.add(accepted.kept)
            to_append.setdefault(accepted.pairs.labels_file, []).append(accepted.line)
        for labels_file, labels in to_append.items():
            append_labels(labels_file, labels)
            outcome.appended[labels_file] = len(labels)
    outcome.refused = [line for _, line in sorted(refused)]
    return outcome


def label_line(data: dict[str, Any]) -> str:
    """A line in the project's label format (`{"case", "digest", "kept"}`, and a note, which
    the format allows), validated by the model that reads labels before it is written."""
    try:
        ValidityLabel.model_validate(data)
    except ValidationError as error:  # never for a current pair's digest; said plainly if it is
        first = error.errors()[0]
        raise ValueError(f"{format_location(first['loc'])}: {first['msg']}") from None
    return json.dumps(data, ensure_ascii=False) + "\n"


def append_labels(path: Path, lines: list[str]) -> None:
    """Append whole lines (after a newline if the file's last line lacks one), synced to disk."""
    text = "".join(lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+b") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell() > 0:
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) != b"\n":
                text = "\n" + text
        handle.write(text.encode("utf-8"))
        handle.flush()
        os.fsync(handle.fileno())


# -- status --------------------------------------------------------------------------------


class TransformLabelStatus(BaseModel):
    """A transform's labels against its pairs, and what it takes to check it."""

    model_config = ConfigDict(extra="forbid")

    transform: str
    labels_file: str | None
    pairs: int
    kept: int
    rejected: int
    unlabelled: int
    stale: int  # label lines naming a current copy with an old digest: they no longer count
    unmatched: int  # label lines naming no current copy of the transform
    lower_bound: float
    minimum_validity: float
    checked: bool
    # Kept labels on unlabelled pairs that would check it (0 when checked); None when even
    # every unlabelled pair kept would not (more cases are needed, or rejected pairs fixed).
    kept_to_check: int | None
    validity_summary: str  # decide/validity.py's own line: kept of pairs, the bound against the minimum

    def explanation(self) -> str:
        """One line: the validity rule's figures, then what it takes to check the transform."""
        if self.checked:
            then = "checked"
        elif self.pairs == 0:
            then = "no pairs (no source cases), so nothing can check it"
        elif self.kept_to_check is None:
            then = (f"even all {self.unlabelled} unlabelled pairs kept would not check it: it needs more cases, "
                    "or rejected pairs fixed by a new transform version")
        else:
            then = f"{self.kept_to_check} more kept labels would check it"
        unmatched = f"; {self.unmatched} label lines name no current copy" if self.unmatched else ""
        return f"{self.validity_summary}: {then}{unmatched}"


def checks(kept: int, pairs: int, minimum_validity: float) -> bool:
    """decide/validity.py's rule: the 95% Clopper-Pearson lower bound reaches the minimum."""
    return clopper_pearson(kept, pairs, VALIDITY_CONFIDENCE)[0] >= minimum_validity


def kept_labels_to_check(validity: TransformValidity) -> int | None:
    """The fewest further kept labels that check the transform. Only unlabelled pairs can
    take one (a rejected pair stays rejected whatever is added), and the lower bound rises
    with each kept pair, so a bisection over 0..unlabelled finds the exact number."""
    if validity.checked:
        return 0
    kept, pairs, minimum = validity.kept, validity.pairs, validity.minimum_validity
    if not checks(kept + validity.unlabelled, pairs, minimum):
        return None
    too_few, enough = 0, validity.unlabelled
    while enough - too_few > 1:
        middle = (too_few + enough) // 2
        too_few, enough = (too_few, middle) if checks(kept + middle, pairs, minimum) else (middle, enough)
    return enough


def label_status(project: Project) -> list[TransformLabelStatus]:
    """Each transform's counts, read from the project's files as they are now."""
    statuses = []
    for pairs in current_pairs(project):
        validity = transform_validity(derived_case_table(pairs.copies)).get(pairs.transform.name)
        copy_ids = {derived.case_id for derived in pairs.copies}
        matched = sum(len(found) for case_id, found in pairs.labels.by_case.items() if case_id in copy_ids)
        if validity is None:  # no source cases, so no pairs: nothing can check it
            validity = TransformValidity(
                transform=pairs.transform.name, transform_digest=digest_of_transform(pairs.transform), pairs=0,
                kept=0, rejected=0, unlabelled=0, stale_labels=0, lower_bound=0.0,
                minimum_validity=pairs.transform.minimum_validity, checked=False,
            )
        statuses.append(TransformLabelStatus(
            transform=validity.transform,
            labels_file=pairs.transform.validity_labels,
            pairs=validity.pairs,
            kept=validity.kept,
            rejected=validity.rejected,
            unlabelled=validity.unlabelled,
            stale=validity.stale_labels,
            unmatched=pairs.labels.lines - matched,
            lower_bound=validity.lower_bound,
            minimum_validity=validity.minimum_validity,
            checked=validity.checked,
            kept_to_check=kept_labels_to_check(validity) if validity.pairs else None,
            validity_summary=validity.summary(),
        ))
    return statuses
