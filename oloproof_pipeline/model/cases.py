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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from .config import PROJECT_FILE, Project, StrictModel, read_text_file
from .digests import case_digest
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
    """(line number, text) of each non-blank line of a JSON-lines file."""
    # Split on newlines only, as a file is read by lines (a JSON string may hold U+2028).
    for line_number, text in enumerate(read_text_file(path).split("\n"), start=1):
        if text.strip():
            yield line_number, text


def read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; a bad line fails the whole file."""
    return [(line_number, _json_object_line(path, line_number, text)) for line_number, text in non_blank_lines(path)]


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

    @property
    def key(self) -> str:
        """The line's text as a digest: a line whose text is unchanged is the case it was."""
        return hashlib.sha256(self.text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class LineFacts:
    """What the checks of the whole case set need of a valid line."""

    case_id: str
    declares_group: bool  # a `group_id` of its own
    declares_state: bool  # an `initial_state` or a `snapshot`

    @classmethod
    def of(cls, row: CaseRow) -> "LineFacts":
        return cls(row.id, row.group_id is not None, row.initial_state is not None or row.snapshot is not None)


@dataclass
class CheckedLines:
    """Every line of the dataset, checked: each line with its facts and, unless it was known
    (`load_case_lines`' `known`), its case. The case digests of known lines hold while
    `declares_states` is what it was when they were made."""

    lines: list[SourceLine]
    facts: list[LineFacts]
    cases: list[CaseRecord | None]
    declares_states: bool

    def new_cases(self) -> list[CaseRecord]:
        return [case for case in self.cases if case is not None]


def source_lines(project: Project) -> list[SourceLine]:
    """The non-blank lines of every dataset file, in order."""
    lines = []
    for path in dataset_files(project):
        file = str(path.relative_to(project.root))
        lines.extend(SourceLine(path, file, number, text) for number, text in non_blank_lines(path))
    return lines


def _check_group_ids_all_or_none(lines: list[SourceLine], facts: list[LineFacts]) -> None:
    """As in Oloproof: a dataset declares `group_id` on every case or on none, since a case
    without one would silently be a cluster of its own."""
    declared = [each.declares_group for each in facts]
    if any(declared) and not all(declared):
        line = next(line for line, has_one in zip(lines, declared) if not has_one)
        raise ProjectError(
            f"{line.path}:{line.number}: group_id: {sum(declared)} of {len(lines)} cases declare group_id; "
            "declare it on every case or on none"
        )


def load_cases(project: Project) -> list[CaseRecord]:
    """Every source case of the dataset, validated, with its digest. Nothing is returned
    from a half-read dataset: the first bad file fails the load."""
    return load_case_lines(project, source_lines(project)).new_cases()


def load_case_lines(
    project: Project, lines: list[SourceLine], known: Callable[[SourceLine], LineFacts | None] | None = None
) -> CheckedLines:
    """`lines` checked as one case set: each line's JSON and fields, no id twice, `group_id` on
    all or none, the evaluators' paths; each a case with its digest. A line `known` gives the
    facts of (a line checked before, with the evaluators as they are) is checked only with the
    set, and made no case. Every bad line is a `file:line: field: what` problem; nothing is
    returned from a half-read dataset."""
    kept: list[SourceLine] = []
    facts: list[LineFacts] = []
    rows: list[CaseRow | None] = []
    first_seen: dict[str, SourceLine] = {}
    problems: list[str] = []
    for line in lines:
        facts_of_line = known(line) if known is not None else None
        row = None
        if facts_of_line is None:
            data = _json_object_line(line.path, line.number, line.text)
            try:
                row = CaseRow.model_validate(data)
            except ValidationError as error:
                problems.extend(describe_validation_error(error, line.path, line=line.number))
                continue
            facts_of_line = LineFacts.of(row)
        if facts_of_line.case_id in first_seen:
            other = first_seen[facts_of_line.case_id]
            problems.append(f"{line.path}:{line.number}: id: {facts_of_line.case_id!r} repeats the case at {other.path}:{other.number}")
            continue
        first_seen[facts_of_line.case_id] = line
        kept.append(line)
        facts.append(facts_of_line)
        rows.append(row)
    if problems:
        raise ProjectError(problems)
    _check_group_ids_all_or_none(kept, facts)

    declares_states = any(each.declares_state for each in facts)
    cases = [None if row is None else _case_of(project, line, row, declares_states) for line, row in zip(kept, rows)]
    checked = CheckedLines(kept, facts, cases, declares_states)
    _check_evaluators_over(project, checked.new_cases())
    return checked


def _case_of(project: Project, line: SourceLine, row: CaseRow, declares_states: bool) -> CaseRecord:
    try:
        initial_state = load_snapshot(project, row.snapshot) if row.snapshot else row.initial_state
    except ProjectError as error:
        raise ProjectError(f"{line.path}:{line.number}: snapshot: {error}") from None
    return CaseRecord(
        case_id=row.id,
        case_digest=case_digest(
            input=row.input,
            expected=row.expected,
            metadata=row.metadata,
            group_id=row.group_id,
            initial_state=initial_state,
            include_initial_state=declares_states,
        ),
        group_id=row.group_id or row.id,
        input=row.input,
        initial_state=initial_state,
        snapshot=row.snapshot,
        expected=row.expected,
        metadata=row.metadata,
        events=row.events,
        file=line.file,
        line=line.number,
    )


def _check_evaluators_over(project: Project, cases: list[CaseRecord]) -> None:
    """What each evaluator finds wrong with these cases (a path naming nothing in them)."""
    problems = [problem for evaluator in project.evaluators for problem in evaluator.case_problems(cases)]
    if problems:
        raise ProjectError(problems)


