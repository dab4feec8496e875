"""An evaluation project on disk: `oloproof.yaml`, `release.yaml`, cases, labels, snapshots.

pydantic models mirror the files; loading turns every problem into a line naming the file,
the line where known, and the field.
"""

from __future__ import annotations

import glob
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .digests import case_digest
from .errors import ProjectError, describe_validation_error

PROJECT_FILE = "oloproof.yaml"
RELEASE_FILE = "release.yaml"
OUTPUT_DIR = ".oloproof"
# Partition keys become file names and UI selections: commas and `|` break Dagster's UI.
VERSION_PATTERN = re.compile(r"^[A-Za-z0-9._-]+$")
CASE_ID_PATTERN = re.compile(r"^[^~\s]+$")


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


def require_unique(names: list[str], what: str) -> None:
    """A validator's check that no name repeats (pydantic reports the ValueError by field)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{what} {name!r} repeats")
        seen.add(name)


# -- oloproof.yaml -------------------------------------------------------------------------


class SystemConfig(StrictModel):
    name: str
    version: str | None = None
    callable: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
    # The record tables of the system's state (e.g. `orders`), named when a reset check fails.
    records: list[str] | None = None

    @field_validator("version")
    @classmethod
    def _version_is_a_partition_key(cls, version: str | None) -> str | None:
        if version is not None and not VERSION_PATTERN.match(version):
            raise ValueError(f"{version!r} is not a valid version: use letters, digits, '.', '_' and '-'")
        return version


class TransformConfig(StrictModel):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    field: str
    template: str | None = None
    replace: list[tuple[str, str]] | None = None
    validity_labels: str | None = None
    minimum_validity: float = Field(default=0.8, ge=0.0, le=1.0)
    # Part of the transform's digest: bump it to retire every label written for the old one.
    version: int = Field(default=1, ge=1)

    @field_validator("field")
    @classmethod
    def _field_is_dotted_path(cls, path: str) -> str:
        if path and not all(path.split(".")):
            raise ValueError(f"{path!r} is not a dotted path under 'input', e.g. 'message' or 'ticket.body'")
        return path

    @model_validator(mode="after")
    def _template_or_replace(self) -> "TransformConfig":
        if (self.template is None) == (self.replace is None):
            raise ValueError(f"transform {self.name!r} needs exactly one of 'template' or 'replace'")
        if self.template is not None and "{value}" not in self.template:
            raise ValueError(f"transform {self.name!r}: template has no '{{value}}' to substitute")
        if self.replace is not None and not self.replace:
            raise ValueError(f"transform {self.name!r}: 'replace' needs at least one [old, new] pair")
        if self.replace is not None and any(old == "" for old, _ in self.replace):
            # str.replace with "" inserts the new text between every two characters.
            raise ValueError(f"transform {self.name!r}: 'replace' has an empty old text")
        return self


class MetamorphicConfig(StrictModel):
    transforms: list[TransformConfig] = Field(default_factory=list)

    @field_validator("transforms")
    @classmethod
    def _names_unique(cls, transforms: list[TransformConfig]) -> list[TransformConfig]:
        require_unique([transform.name for transform in transforms], "transform name")
        return transforms


class ExecutionConfig(StrictModel):
    timeout_s: float = Field(default=120.0, gt=0)
    # Sandboxes run in parallel on Dask when workers > 1; one case at a time within each.
    workers: int = Field(default=1, ge=1)
    scheduler_address: str | None = None


class ScheduleConfig(StrictModel):
    cron: str = "0 2 * * *"
    timezone: str = "UTC"


def _check_slice_spec(text: str) -> str:
    from .slices import parse_slice_spec  # slices reads case records defined here

    parse_slice_spec(text)
    return text


class ProjectConfig(StrictModel):
    version: int = 1
    project: str
    dataset: str | list[str]
    system: SystemConfig
    metamorphic: MetamorphicConfig = Field(default_factory=MetamorphicConfig)
    # Validated against the evaluator registry by `load_project`, one model per `type`.
    evaluators: list[dict[str, Any]] = Field(default_factory=list)
    slices: list[Annotated[str, AfterValidator(_check_slice_spec)]] = Field(default_factory=list)
    min_slice_support: int = Field(default=10, ge=1)
    execution: ExecutionConfig = Field(default_factory=ExecutionConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)

    @field_validator("project")
    @classmethod
    def _project_name_usable(cls, name: str) -> str:
        if not re.match(r"^[A-Za-z0-9_-]+$", name):
            raise ValueError("project names a Dagster group: use letters, digits, '_' and '-'")
        return name


# -- release.yaml --------------------------------------------------------------------------


class RuleConfig(StrictModel):
    id: str
    metric: str
    min: float | None = Field(default=None, ge=0.0, le=1.0)
    max: float | None = Field(default=None, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _has_a_bar(self) -> "RuleConfig":
        if self.min is None and self.max is None:
            raise ValueError(f"rule {self.id!r} needs 'min' or 'max'")
        return self


class ReleasePolicy(StrictModel):
    version: int = 1
    confidence_level: float = Field(default=0.95, gt=0.5, lt=1.0)
    allow_approximate_methods: bool = False
    min_clusters: int = Field(default=20, ge=2)
    rules: list[RuleConfig] = Field(default_factory=list)

    @field_validator("rules")
    @classmethod
    def _rule_ids_unique(cls, rules: list[RuleConfig]) -> list[RuleConfig]:
        require_unique([rule.id for rule in rules], "rule id")
        return rules


# -- cases ---------------------------------------------------------------------------------


class CaseRow(StrictModel):
    """One line of a dataset file, as written."""

    id: str
    input: Any
    initial_state: dict[str, Any] | None = None
    snapshot: str | None = None
    expected: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    events: list[dict[str, Any]] | None = None

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


# -- the project ---------------------------------------------------------------------------


@dataclass
class Project:
    root: Path
    config: ProjectConfig
    release: ReleasePolicy
    evaluators: list[Any] = field(default_factory=list)  # evaluator instances, from the registry

    @property
    def output_dir(self) -> Path:
        return self.root / OUTPUT_DIR

    @property
    def name(self) -> str:
        return self.config.project

    def criteria(self) -> list[str]:
        return [evaluator.criterion for evaluator in self.evaluators]


def read_yaml(path: Path) -> tuple[Any, yaml.Node | None]:
    """The file's data and its node tree (for line numbers in errors)."""
    if not path.is_file():
        raise ProjectError(f"{path}: file not found")
    text = path.read_text(encoding="utf-8")
    try:
        return yaml.safe_load(text), yaml.compose(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error)
        raise ProjectError(f"{path}{line}: invalid YAML: {problem}") from None


def _validate_yaml_file(model: type[BaseModel], path: Path) -> BaseModel:
    data, root_node = read_yaml(path)
    if not isinstance(data, dict):
        raise ProjectError(f"{path}:1: expected a mapping of keys at the top level")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ProjectError(describe_validation_error(error, path, yaml_root=root_node)) from None


def load_project(root: Path | str) -> Project:
    """Read and validate `oloproof.yaml`, `release.yaml` and the evaluators they name."""
    from .evaluators import build_evaluators  # the registry imports project models

    root = Path(root).resolve()
    if not root.is_dir():
        raise ProjectError(f"{root}: no such project folder")
    config_path = root / PROJECT_FILE
    config = _validate_yaml_file(ProjectConfig, config_path)
    release_path = root / RELEASE_FILE
    release = _validate_yaml_file(ReleasePolicy, release_path) if release_path.exists() else ReleasePolicy()
    _, config_root = read_yaml(config_path)
    evaluators = build_evaluators(config.evaluators, file=config_path, yaml_root=config_root)
    project = Project(root=root, config=config, release=release, evaluators=evaluators)
    _check_rules_name_criteria(project, release_path)
    from .metamorphic import check_relations_name_transforms  # metamorphic builds on this module

    check_relations_name_transforms(project)
    return project


def _check_rules_name_criteria(project: Project, release_path: Path) -> None:
    criteria = project.criteria()
    seen: dict[str, int] = {}
    for index, criterion in enumerate(criteria):
        if criterion in seen:
            raise ProjectError(
                f"{project.root / PROJECT_FILE}: evaluators[{index}]: criterion {criterion!r} "
                f"repeats evaluators[{seen[criterion]}]; give one a distinct 'criterion'"
            )
        seen[criterion] = index
    if not project.release.rules:
        return
    _, release_root = read_yaml(release_path)
    problems = []
    for index, rule in enumerate(project.release.rules):
        if rule.metric not in seen:
            from .errors import yaml_line

            line = yaml_line(release_root, ("rules", index, "metric"))
            problems.append(
                f"{release_path}:{line}: rules[{index}].metric: {rule.metric!r} is not a criterion of any "
                f"evaluator (criteria: {', '.join(criteria) or 'none'})"
            )
    if problems:
        raise ProjectError(problems)


# -- loading cases -------------------------------------------------------------------------


def dataset_files(project: Project) -> list[Path]:
    patterns = [project.config.dataset] if isinstance(project.config.dataset, str) else project.config.dataset
    files: list[Path] = []
    for pattern in patterns:
        matches = sorted(Path(match) for match in glob.glob(str(project.root / pattern)))
        if not matches:
            raise ProjectError(f"{project.root / PROJECT_FILE}: dataset: no file matches {pattern!r}")
        files.extend(match for match in matches if match not in files)
    return files


def _json_object_line(path: Path, line_number: int, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except ValueError as error:
        raise ProjectError(f"{path}:{line_number}: invalid JSON: {error}") from None
    if not isinstance(value, dict):
        raise ProjectError(f"{path}:{line_number}: expected a JSON object, got {type(value).__name__}")
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; a bad line fails the whole file."""
    rows = []
    with path.open(encoding="utf-8") as handle:
        for line_number, text in enumerate(handle, start=1):
            if text.strip():
                rows.append((line_number, _json_object_line(path, line_number, text)))
    return rows


def load_snapshot(project: Project, name: str) -> dict[str, Any]:
    path = project.root / "snapshots" / f"{name}.json"
    if not re.match(r"^[A-Za-z0-9._-]+$", name) or not path.is_file():
        raise ProjectError(f"snapshot {name!r}: no file {path}")
    try:
        state = json.loads(path.read_text(encoding="utf-8"), parse_constant=_refuse_constant)
    except ValueError as error:
        raise ProjectError(f"{path}: invalid JSON: {error}") from None
    if not isinstance(state, dict):
        raise ProjectError(f"{path}: a snapshot must be a JSON object of record tables")
    return state


def load_cases(project: Project) -> list[CaseRecord]:
    """Every source case of the dataset, validated, with its digest. Nothing is returned
    from a half-read dataset: the first bad file fails the load."""
    rows: list[tuple[Path, int, CaseRow]] = []
    first_seen: dict[str, tuple[Path, int]] = {}
    problems: list[str] = []
    for path in dataset_files(project):
        for line_number, data in read_jsonl(path):
            try:
                row = CaseRow.model_validate(data)
            except ValidationError as error:
                problems.extend(describe_validation_error(error, path, line=line_number))
                continue
            if row.id in first_seen:
                other_path, other_line = first_seen[row.id]
                problems.append(f"{path}:{line_number}: id: {row.id!r} repeats the case at {other_path}:{other_line}")
                continue
            first_seen[row.id] = (path, line_number)
            rows.append((path, line_number, row))
    if problems:
        raise ProjectError(problems)

    declares_states = any(row.initial_state is not None or row.snapshot is not None for _, _, row in rows)
    cases = []
    for path, line_number, row in rows:
        try:
            initial_state = load_snapshot(project, row.snapshot) if row.snapshot else row.initial_state
        except ProjectError as error:
            raise ProjectError(f"{path}:{line_number}: snapshot: {error}") from None
        cases.append(
            CaseRecord(
                case_id=row.id,
                case_digest=case_digest(
                    input=row.input,
                    expected=row.expected,
                    metadata=row.metadata,
                    group_id=None,
                    initial_state=initial_state,
                    include_initial_state=declares_states,
                ),
                group_id=row.id,
                input=row.input,
                initial_state=initial_state,
                snapshot=row.snapshot,
                expected=row.expected,
                metadata=row.metadata,
                events=row.events,
                file=str(path.relative_to(project.root)),
                line=line_number,
            )
        )
    return cases


def is_finite_json(value: Any) -> bool:
    """True when `value` is plain JSON (no NaN or infinity, string keys only)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return not (isinstance(value, float) and not math.isfinite(value))
