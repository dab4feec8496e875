"""Cases: the dataset's JSON lines, validated, with their digests and starting states.

Nothing is returned from a half-read dataset: every bad line is a `file:line: field: what`
problem, and the first bad file fails the load.
"""

from __future__ import annotations

import glob
import hashlib
import json
import math
import re
from dataclasses import dataclass, fields
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from .config import PROJECT_FILE, Project, StrictModel, not_utf8, read_text_file
from .digests import case_text_digest, json_text
from .errors import ProjectError, describe_validation_error
from .paths import split_path

CASE_ID_PATTERN = re.compile(r"^[^~\s]+$")


class CaseRow(StrictModel):
    """One line of a dataset file, as written."""

    id: str
    input: Any
    initial_state: dict[str, Any] | None = None
    snapshot: str | None = None
    expected: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    events: list[dict[str, Any]] | None = None
    # Oloproof's key: the cluster the case belongs to (cases of one cluster are not independent).
    group_id: str | int | None = None

    @field_validator("group_id")
    @classmethod
    def _group_id_as_text(cls, group_id: str | int | None) -> str | None:
        if isinstance(group_id, bool) or group_id == "":
            raise ValueError("must be a non-empty string or an integer")
        return None if group_id is None else str(group_id)

    @field_validator("id")
    @classmethod
    def _id_usable(cls, case_id: str) -> str:
        if not CASE_ID_PATTERN.match(case_id):
            raise ValueError("must be non-empty with no '~' or spaces ('~' joins a source id and a transform)")
        return case_id

    @field_validator("expected")
    @classmethod
    def _expected_state_is_object(cls, expected: dict[str, Any] | None) -> dict[str, Any] | None:
        if expected is not None and "state" in expected and not isinstance(expected["state"], dict):
            raise ValueError("expected.state must be an object")
        return expected

    @field_validator("expected")
    @classmethod
    def _unchanged_are_paths(cls, expected: dict[str, Any] | None) -> dict[str, Any] | None:
        unchanged = (expected or {}).get("unchanged")
        if unchanged is None:
            return expected
        if not isinstance(unchanged, list) or not all(isinstance(path, str) and path for path in unchanged):
            raise ValueError("expected.unchanged must be a list of paths, e.g. [\"orders.ord-999\"]")
        for index, path in enumerate(unchanged):
            try:
                split_path(path)
            except ValueError as error:
                raise ValueError(f"expected.unchanged[{index}]: {error}") from None
        return expected

    @field_validator("events")
    @classmethod
    def _events_have_steps(cls, events: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for index, event in enumerate(events or []):
            at_step = event.get("at_step")
            # A step is a completed tool call; what holds before the first belongs in the starting state.
            if not isinstance(at_step, int) or isinstance(at_step, bool) or at_step < 1 or "event" not in event:
                raise ValueError(f"events[{index}] needs an integer 'at_step' (1 or more) and an 'event' name")
        return events

    @model_validator(mode="after")
    def _one_starting_state(self) -> "CaseRow":
        if self.initial_state is not None and self.snapshot is not None:
            raise ValueError("give 'initial_state' or 'snapshot', not both")
        return self


class CaseRecord(BaseModel):
    """A validated case with its digest: a row of the `cases` table.

    `group_id` is the cluster a case belongs to (a source's own id; a copy's source id).
    """

    model_config = ConfigDict(extra="forbid")

    case_id: str
    case_digest: str
    source_id: str | None = None
    transform: str | None = None
    group_id: str
    input: Any
    initial_state: dict[str, Any] | None = None
    snapshot: str | None = None
    expected: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    events: list[dict[str, Any]] | None = None
    file: str | None = None
    line: int | None = None

    @property
    def is_derived(self) -> bool:
        return self.source_id is not None


def unchanged_paths_of(case: CaseRecord) -> list[str]:
    """The case's own bystanders (`expected.unchanged`): paths it must leave as they started."""
    return list((case.expected or {}).get("unchanged") or [])


def dataset_files(project: Project) -> list[Path]:
    patterns = [project.config.dataset] if isinstance(project.config.dataset, str) else project.config.dataset
    files: list[Path] = []
    for pattern in patterns:
        matches = sorted(Path(match) for match in glob.glob(str(project.root / pattern)))
        if not matches:
            raise ProjectError(f"{project.root / PROJECT_FILE}: dataset: no file matches {pattern!r}")
        files.extend(match for match in matches if match not in files)
    return files


# Deeper values overflow the recursion of copying, validating and hashing a case; no
# real case nests anywhere near this.
MAX_JSON_DEPTH = 100


def parse_json(text: str) -> Any:
    """JSON as the project files allow it: finite numbers only (`NaN`, `Infinity` and `1e999`
    have no canonical form to digest), at most MAX_JSON_DEPTH levels deep. ValueError says why."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep") from None
    # Each level opens a bracket: text with few of them (those inside strings counted too)
    # cannot nest too deep, so only a value with many is walked.
    if text.count("{") + text.count("[") > MAX_JSON_DEPTH and _depth(value) > MAX_JSON_DEPTH:
        raise ValueError(f"nested more than {MAX_JSON_DEPTH} levels deep")
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"the number {text} is too large to represent")
    return number


def _depth(value: Any) -> int:
    """How many arrays and objects deep `value` nests (0 for a plain value), without recursion."""
    deepest, pending = 0, [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth + 1)
            pending.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _json_object_line(path: Path, line_number: int, text: str) -> dict[str, Any]:
    try:
        value = parse_json(text)
    except ValueError as error:
        raise ProjectError(f"{path}:{line_number}: invalid JSON: {error}") from None
    if not isinstance(value, dict):
        raise ProjectError(f"{path}:{line_number}: expected a JSON object, got {type(value).__name__}")
    return value


def non_blank_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each non-blank line of a JSON-lines file, read a line at a time
    (a dataset of 100,000 cases is 70 MB of text: never held whole). The file is checked to be
    UTF-8 first, so one that is not fails before any of its lines is taken."""
    check_utf8(path)
    return _non_blank_file_lines(path)


def check_utf8(path: Path) -> None:
    """A file whose bytes are not UTF-8 fails with a one-line error naming the line."""
    with path.open("rb") as file:
        for number, raw in enumerate(file, 1):
            _decoded(path, number, raw)


def _non_blank_file_lines(path: Path) -> Iterator[tuple[int, str]]:
    # Split on newlines only (a JSON string may hold U+2028), the newline not part of the line.
    with path.open("rb") as file:
        for number, raw in enumerate(file, 1):
            if (line := _decoded(path, number, raw[:-1] if raw.endswith(b"\n") else raw)).strip():
                yield number, line


def _decoded(path: Path, number: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise not_utf8(path, number, raw[error.start]) from None


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line, parsed as it is taken (a label file's
    lines never exist as one list); a line that is not a JSON object fails the whole file."""
    return ((line_number, _json_object_line(path, line_number, text)) for line_number, text in non_blank_lines(path))


def load_snapshot(project: Project, name: str) -> dict[str, Any]:
    path = project.root / "snapshots" / f"{name}.json"
    if not re.match(r"^[A-Za-z0-9._-]+$", name) or not path.is_file():
        raise ProjectError(f"snapshot {name!r}: no file {path}")
    try:
        state = parse_json(read_text_file(path))
    except ValueError as error:
        raise ProjectError(f"{path}: invalid JSON: {error}") from None
    if not isinstance(state, dict):
        raise ProjectError(f"{path}: a snapshot must be a JSON object of record tables")
    return state


@dataclass(frozen=True)
class SourceLine:
    """A non-blank line of a dataset file, where it is and what it says."""

    path: Path
    file: str  # as the cases' table names it: relative to the project
    number: int
    text: str
    # The line's text as a digest: a line whose text is unchanged is the case it was.
    key: str

    @classmethod
    def of(cls, path: Path, file: str, number: int, text: str) -> "SourceLine":
        return cls(path, file, number, text, hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest())


@dataclass(frozen=True)
class LineFacts:
    """What the checks of the whole case set need of a valid line."""

    case_id: str
    declares_group: bool  # a `group_id` of its own
    declares_state: bool  # an `initial_state` or a `snapshot`

    @classmethod
    def of(cls, row: CaseRow) -> "LineFacts":
        return cls(row.id, row.group_id is not None, row.initial_state is not None or row.snapshot is not None)


@dataclass(frozen=True)
class CaseTexts:
    """A case's JSON members as the cases table stores them: canonical JSON text, None for null."""

    input: str | None
    initial_state: str | None
    expected: str | None
    metadata: str | None
    events: str | None

    @classmethod
    def of(cls, case: CaseRecord) -> "CaseTexts":
        return cls(*(json_text(getattr(case, name)) for name in CASE_TEXTS))

    @classmethod
    def of_row(cls, row: dict[str, Any]) -> "CaseTexts":
        """The texts of a stored row (the cases table's columns of the same names)."""
        return cls(*(row[name] for name in CASE_TEXTS))

    def as_row(self) -> dict[str, str | None]:
        return {name: getattr(self, name) for name in CASE_TEXTS}


# CaseTexts' fields, in order: the members a case stores as JSON text.
CASE_TEXTS = tuple(member.name for member in fields(CaseTexts))

# A line's case before the whole set is checked: its digest depends on whether any case of
# the set declares a starting state (`NewCase.digest`). The evaluators' checks read a case's
# members, never its digest.
UNDECIDED_DIGEST = ""


@dataclass(frozen=True)
class NewCase:
    """A line checked now, made a case: its record (members as values, for the evaluators'
    checks), its members' texts as the cases' table stores them, and its digest for either
    kind of case set, each digest's body put together from those texts (`object_text`)."""

    record: CaseRecord
    texts: CaseTexts
    digest_without_states: str
    digest_with_states: str

    def digest(self, declares_states: bool) -> str:
        return self.digest_with_states if declares_states else self.digest_without_states

    def as_record(self, declares_states: bool) -> CaseRecord:
        return self.record.model_copy(update={"case_digest": self.digest(declares_states)})


@dataclass(frozen=True)
class CheckedLine:
    """A valid line of the case set: where it is, its facts and, unless it was known (a line
    checked before), its case."""

    line: SourceLine
    facts: LineFacts
    case: NewCase | None


def source_lines(project: Project) -> Iterator[SourceLine]:
    """The non-blank lines of every dataset file, in order, each read as it is taken. Every
    file is checked first: one that is not UTF-8 fails before any line is checked."""
    files = [(path, str(path.relative_to(project.root))) for path in dataset_files(project)]
    for path, _ in files:
        check_utf8(path)
    return (SourceLine.of(path, file, number, text) for path, file in files for number, text in _non_blank_file_lines(path))


# Lines checked at once: each is a few KiB as Python values (its row, its record, its texts).
LINES_AT_ONCE = 1024

Item = TypeVar("Item")


def in_batches(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


class CaseSetCheck:
    """The checks of one case set, fed a batch of lines at a time (`checked`), so a large set
    never exists as Python values at once: each line's JSON and fields, its starting state,
    no id twice, `group_id` on all or none, the evaluators' paths. A line `known` gives the
    facts of (a line checked before, with the evaluators as they are) is checked only with the
    set, and made no case. A line that is not JSON fails at once; every other problem is
    gathered over all batches and raised by `finish` (a `ProjectError`), in the order a check
    of the whole set meets them: the lines' problems together, then `group_id`, then a
    snapshot, then the evaluators' problems together."""

    def __init__(self, project: Project, known: Callable[[SourceLine], LineFacts | None] | None = None):
        self.project = project
        self.known = known
        self.problems: list[str] = []
        self.first_seen: dict[str, tuple[Path, int]] = {}
        self.kept = 0
        self.declared_groups = 0
        self.first_without_group: SourceLine | None = None
        self.declares_states = False
        self.snapshot_problem: str | None = None
        self.snapshots: dict[str, tuple[dict[str, Any], str]] = {}  # by name: the state and its text, read once
        self.findings = [evaluator.case_findings() for evaluator in project.evaluators]

    def checked(self, lines: Iterable[SourceLine]) -> list[CheckedLine]:
        """The valid lines among `lines`, each with its facts and (unless known) its case."""
        batch: list[CheckedLine] = []
        for line in lines:
            facts = self.known(line) if self.known is not None else None
            row = None
            if facts is None:
                data = _json_object_line(line.path, line.number, line.text)
                try:
                    row = CaseRow.model_validate(data)
                except ValidationError as error:
                    self.problems.extend(describe_validation_error(error, line.path, line=line.number))
                    continue
                facts = LineFacts.of(row)
            if self._counted(line, facts):
                case = None if row is None else self._case_of(line, row)
                if row is None or case is not None:
                    batch.append(CheckedLine(line, facts, case))
        new = [each.case.record for each in batch if each.case is not None]
        for findings in self.findings:
            findings.add(new)
        return batch

    def _counted(self, line: SourceLine, facts: LineFacts) -> bool:
        """Count a line into the set's checks; False for one repeating an id (a problem)."""
        other = self.first_seen.get(facts.case_id)
        if other is not None:
            self.problems.append(f"{line.path}:{line.number}: id: {facts.case_id!r} repeats the case at {other[0]}:{other[1]}")
            return False
        self.first_seen[facts.case_id] = (line.path, line.number)
        self.kept += 1
        self.declared_groups += facts.declares_group
        if not facts.declares_group and self.first_without_group is None:
            self.first_without_group = line
        self.declares_states = self.declares_states or facts.declares_state
        return True

    def _case_of(self, line: SourceLine, row: CaseRow) -> NewCase | None:
        """The line's case; None when its snapshot cannot be read (the first such is a problem)."""
        try:
            initial_state, state_text = self._starting_state(row)
        except ProjectError as error:
            self.snapshot_problem = self.snapshot_problem or f"{line.path}:{line.number}: snapshot: {error}"
            return None
        texts = CaseTexts(json_text(row.input), state_text, json_text(row.expected), json_text(row.metadata), json_text(row.events))
        members = {"input": texts.input, "expected": texts.expected, "metadata": texts.metadata, "group_id": row.group_id}
        # Validated as the row was: its members as they are, not copied again.
        record = CaseRecord.model_construct(
            case_id=row.id, case_digest=UNDECIDED_DIGEST, group_id=row.group_id or row.id, input=row.input,
            initial_state=initial_state, snapshot=row.snapshot, expected=row.expected, metadata=row.metadata,
            events=row.events, file=line.file, line=line.number,
        )
        return NewCase(
            record, texts, case_text_digest(**members),
            case_text_digest(**members, initial_state=texts.initial_state, include_initial_state=True),
        )

    def _starting_state(self, row: CaseRow) -> tuple[dict[str, Any] | None, str | None]:
        if not row.snapshot:
            return row.initial_state, json_text(row.initial_state)
        if row.snapshot not in self.snapshots:
            state = load_snapshot(self.project, row.snapshot)
            self.snapshots[row.snapshot] = (state, json_text(state))
        return self.snapshots[row.snapshot]

    def finish(self) -> bool:
        """Whether the set declares starting states; raises what the set's checks found."""
        if self.problems:
            raise ProjectError(self.problems)
        if self.declared_groups and self.first_without_group is not None:
            # As in Oloproof: a dataset declares `group_id` on every case or on none, since a
            # case without one would silently be a cluster of its own.
            line = self.first_without_group
            raise ProjectError(
                f"{line.path}:{line.number}: group_id: {self.declared_groups} of {self.kept} cases declare group_id; "
                "declare it on every case or on none"
            )
        if self.snapshot_problem is not None:
            raise ProjectError(self.snapshot_problem)
        problems = [problem for findings in self.findings for problem in findings.problems()]
        if problems:
            raise ProjectError(problems)
        return self.declares_states


def load_cases(project: Project) -> list[CaseRecord]:
    """Every source case of the dataset, validated, with its digest. Nothing is returned
    from a half-read dataset: every bad line is a `file:line: field: what` problem."""
    check = CaseSetCheck(project)
    new = [each.case for lines in in_batches(source_lines(project), LINES_AT_ONCE) for each in check.checked(lines)]
    declares_states = check.finish()
    return [case.as_record(declares_states) for case in new if case is not None]
