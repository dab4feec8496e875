"""Finding the system under test that `oloproof.yaml` names, and the version it is.

Its module is never imported in the evaluating process: what the system says about itself
(its `version`, whether it can be replayed) is read in a worker process of its own
(run/supervisor.py), so an import that exits, crashes or hangs is one configuration error.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

from ..model.config import PROJECT_FILE, Project, version_problem
from ..model.errors import ProjectError
from ..model.fingerprints import system_code_fingerprint
from .chat_agent import chat_agent_settings
from .spec import SandboxSettings, SystemSpec
from .supervisor import SystemFacts, probe_system
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


def system_spec(project: Project) -> SystemSpec:
    system = project.config.system
    settings = chat_agent_settings(system, cases_at_once(project))
    # A chat agent's conversation is run by its loop; a Python system's is asked for (spec.py).
    user = None if settings is not None or system.simulated_user is None else system.simulated_user.model_dump(mode="json")
    return SystemSpec(str(project.root), system.callable, system.name, chat_agent=settings, simulated_user=user)


def cases_at_once(project: Project) -> int:
    """How many cases one sandbox runs side by side: `concurrency.system` for a chat agent
    (threads of one worker process, run/worker.py); one for a Python system, whose own
    code may not be safe to run twice in one process."""
    return project.config.concurrency.system if project.config.system.is_chat_agent else 1


def sandbox_settings(project: Project, version: str) -> SandboxSettings:
    """The sandboxes of one partition's stage: this system, filed under `version`, each case
    under `execution.timeout_s`. A Python system's `concurrency.system` is how many local
    sandboxes (worker processes) may run its cases at once; a chat agent's, its cases side
    by side in one."""
    config = project.config
    return SandboxSettings(
        system_spec(project), version, config.execution.timeout_s, cases_at_once=cases_at_once(project),
        local_sandboxes=1 if config.system.is_chat_agent else config.concurrency.system,
    )


def reported_version(attribute: Any) -> str | None:
    version = getattr(attribute, "version", None)
    return None if version is None else str(version)


def system_facts(project: Project) -> SystemFacts:
    """What the system's code says about itself now, read in a throwaway worker process."""
    return probe_system(system_spec(project), timeout_s=project.config.execution.timeout_s)


def resolve_system_version(project: Project, facts: SystemFacts | None = None) -> str:
    """The version partitions are keyed by: `system.version` in oloproof.yaml, else what the
    system reports (a `version` attribute). Both given and different is an error: a run
    must never be filed under a version it was not. Without `facts`, a declared version is
    taken as it stands and the system is not imported at all."""
    declared = project.config.system.version
    if facts is None and declared is not None:
        return declared
    reported = (facts or system_facts(project)).version
    where = f"{project.root / PROJECT_FILE}: system.version"
    if declared is not None and reported is not None and declared != reported:
        raise ProjectError(f"{where}: {declared!r} differs from the version the system reports ({reported!r})")
    version = declared or reported
    if version is None:
        raise ProjectError(f"{where}: not given, and {project.config.system.callable} has no 'version' attribute")
    if version_problem(version) is not None:
        raise ProjectError(f"{where}: {version_problem(version)}")
    return version


def current_system_version(project: Project) -> str:
    """The version as the system's code says now (imported afresh, in a worker process)."""
    return resolve_system_version(project, system_facts(project))


# The run tag a launch files its resolved system under: every stage of the run reads it.
SYSTEM_TAG = "oloproof/system"


@dataclass(frozen=True)
class ResolvedSystem:
    """The system as one launch found it, carried with the run so no stage asks again.

    `replayable` is None when nothing was imported to find the version (a declared one):
    the worker that replays a case imports the system anyway and says so then."""

    version: str
    code_digest: str
    replayable: bool | None = None

    def as_tag(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_tag(cls, text: str) -> "ResolvedSystem":
        return cls(**json.loads(text))


def resolve_system(project: Project) -> ResolvedSystem:
    """The version and facts of the system once per launch: a declared version is taken as
    it stands (nothing imported); otherwise the system is probed once, in a worker."""
    code_digest = system_code_fingerprint(project).digest
    if project.config.system.version is not None:
        return ResolvedSystem(version=resolve_system_version(project), code_digest=code_digest)
    facts = system_facts(project)
    return ResolvedSystem(version=resolve_system_version(project, facts), code_digest=code_digest, replayable=facts.replayable)


def system_toolbox(system: Any) -> ToolBox | None:
    toolbox = getattr(system, "toolbox", None)
    return toolbox if isinstance(toolbox, ToolBox) else None

