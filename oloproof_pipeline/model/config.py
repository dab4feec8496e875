"""The project's two YAML files, `oloproof.yaml` and `release.yaml`, as pydantic models.

The models mirror the files and carry their validation; reading a file turns every problem
into a line naming the file, the line where known, and the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import ProjectError, describe_validation_error
from .slicing import parse_slice_spec

PROJECT_FILE = "oloproof.yaml"
RELEASE_FILE = "release.yaml"
# Partition keys become file names and UI selections: commas and `|` break Dagster's UI.
VERSION_PATTERN = re.compile(r"^[A-Za-z0-9._-]+$")
EvaluatorT = TypeVar("EvaluatorT")


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
    # Files and folders (relative to the project) that are the system's code besides the
    # callable's own module: an edit to any of them re-records, as one to that module does.
    code_paths: list[str] = Field(default_factory=list)

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


# -- the project ---------------------------------------------------------------------------


@dataclass
class Project:
    root: Path
    config: ProjectConfig
    release: ReleasePolicy
    # Evaluator instances, built by the registry (`oloproof_pipeline.project.load_project`).
    evaluators: list[Any] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.config.project

    def criteria(self) -> list[str]:
        return [evaluator.criterion for evaluator in self.evaluators]

    def evaluators_of(self, kind: type[EvaluatorT]) -> list[tuple[int, EvaluatorT]]:
        """(index in `evaluators:`, evaluator) for each evaluator of one kind."""
        return [(index, evaluator) for index, evaluator in enumerate(self.evaluators) if isinstance(evaluator, kind)]


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


def validate_yaml_file(model: type[BaseModel], path: Path) -> BaseModel:
    data, root_node = read_yaml(path)
    if not isinstance(data, dict):
        raise ProjectError(f"{path}:1: expected a mapping of keys at the top level")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ProjectError(describe_validation_error(error, path, yaml_root=root_node)) from None


