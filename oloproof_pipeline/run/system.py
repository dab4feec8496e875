"""Finding and building the system under test that `oloproof.yaml` names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..model.config import PROJECT_FILE, VERSION_PATTERN, Project
from ..model.errors import ProjectError
from ..model.modules import load_callable
from .toolbox import ToolBox


@runtime_checkable
class Stateful(Protocol):
    """A system whose world the runner can set before a case and read after it."""

    def reset(self, state: Any) -> None: ...

    def snapshot(self) -> Any: ...


@runtime_checkable
class Replayable(Protocol):
    """A system that can re-run a case from a checkpoint under a change."""

    def replay(self, trajectory: Any, *, checkpoint: Any, change: Any) -> Any: ...


@dataclass(frozen=True)
class SystemSpec:
    """Enough to build the system anywhere (a Dask worker included): plain, picklable data."""

    project_root: str
    callable: str
    name: str

    def build(self) -> Any:
        return build_system(self.load_attribute())

    def load_attribute(self) -> Any:
        return load_callable(Path(self.project_root), self.callable)


def build_system(attribute: Any) -> Any:
    """A class is instantiated with no arguments; anything else callable is the system itself."""
    if isinstance(attribute, type):
        return attribute()
    if callable(attribute):
        return attribute
    raise ProjectError(f"system.callable names {attribute!r}, which is neither a class nor callable")


def system_spec(project: Project) -> SystemSpec:
    return SystemSpec(str(project.root), project.config.system.callable, project.config.system.name)


def reported_version(attribute: Any) -> str | None:
    version = getattr(attribute, "version", None)
    return None if version is None else str(version)


def resolve_system_version(project: Project, attribute: Any | None = None) -> str:
    """The version partitions are keyed by: `system.version` in oloproof.yaml, else what the
    system reports (a `version` attribute). Both given and different is an error: a run
    must never be filed under a version it was not."""
    declared = project.config.system.version
    if attribute is None and declared is not None:
        return declared
    attribute = attribute if attribute is not None else system_spec(project).load_attribute()
    reported = reported_version(attribute)
    where = f"{project.root / PROJECT_FILE}: system.version"
    if declared is not None and reported is not None and declared != reported:
        raise ProjectError(f"{where}: {declared!r} differs from the version the system reports ({reported!r})")
    version = declared or reported
    if version is None:
        raise ProjectError(f"{where}: not given, and {project.config.system.callable} has no 'version' attribute")
    if not VERSION_PATTERN.match(version):
        raise ProjectError(f"{where}: {version!r} is not a valid version: use letters, digits, '.', '_' and '-'")
    return version


def current_system_version(project: Project) -> str:
    """The version as the system's code says now (imports it afresh)."""
    return resolve_system_version(project, system_spec(project).load_attribute())


def system_toolbox(system: Any) -> ToolBox | None:
    toolbox = getattr(system, "toolbox", None)
    return toolbox if isinstance(toolbox, ToolBox) else None

