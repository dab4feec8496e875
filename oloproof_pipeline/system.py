"""Finding and building the system under test that `oloproof.yaml` names."""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, runtime_checkable

from .errors import ProjectError
from .project import PROJECT_FILE, VERSION_PATTERN, Project


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


def load_callable(project_root: Path, reference: str, *, where: str | None = None) -> Any:
    """Import `module:attr` with the module's file found relative to the project folder.

    Each project's modules get names of their own, so two projects that both ship an
    `app.py` never share one module; every call imports afresh, so a version bump made
    while a process runs (the sensor's case) is seen. `where` names the setting in errors
    (default `system.callable`).
    """
    module_name, _, attribute_path = reference.partition(":")
    module_file = project_root.joinpath(*module_name.split(".")).with_suffix(".py")
    where = where or f"{project_root / PROJECT_FILE}: system.callable"
    if not module_file.is_file():
        raise ProjectError(f"{where}: no module file {module_file}")
    unique_name = "oloproof_system_" + re.sub(r"\W", "_", f"{project_root.name}_{module_name}")
    spec = importlib.util.spec_from_file_location(unique_name, module_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[unique_name] = module  # dataclasses and pickling look modules up here
    if str(project_root) not in sys.path:
        sys.path.insert(0, str(project_root))  # let the system import its sibling modules
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        raise ProjectError(f"{where}: importing {module_file} failed: {type(error).__name__}: {error}") from None
    value: Any = module
    for part in attribute_path.split("."):
        if not hasattr(value, part):
            raise ProjectError(f"{where}: {module_file} has no attribute {attribute_path!r}")
        value = getattr(value, part)
    return value


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


def system_toolbox(system: Any) -> Any:
    from .toolbox import ToolBox

    toolbox = getattr(system, "toolbox", None)
    return toolbox if isinstance(toolbox, ToolBox) else None


SystemFactory = Callable[[], Any]
