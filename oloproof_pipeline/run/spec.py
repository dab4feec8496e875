"""What names the system under test: plain data that builds it in any process (a worker
process of its own, a Dask worker's), and the rule for building it."""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ..model.errors import ProjectError
from ..model.modules import load_callable, module_file_of
from .chat_agent import chat_agent_class
from .simulated_user import ConversingSystem


@dataclass(frozen=True)
class SystemSpec:
    """Enough to build the system anywhere: plain, picklable, JSON-able data."""

    project_root: str
    callable: str
    name: str
    # Certification's sandboxes: the system wrapped so a case plays its reference actions
    # through the system's own tool box instead of running the agent (run/reference.py).
    plays_references: bool = False
    # oloproof.yaml's `reference` (`module:func`), played on cases without expected.actions.
    reference: str | None = None
    # `system.kind: chat_agent`: its settings (run/chat_agent.py builds the agent over `callable`,
    # its tools).
    chat_agent: dict[str, Any] | None = None
    # `system.simulated_user` of a Python system (a chat agent carries its own in `chat_agent`).
    simulated_user: dict[str, Any] | None = None

    def build(self) -> Any:
        return self.build_from(self.load_attribute())

    def build_from(self, attribute: Any) -> Any:
        """The system from its loaded attribute, with its simulated user at hand when it has one."""
        system = build_system(attribute)
        return ConversingSystem(system, self.simulated_user) if self.simulated_user is not None else system

    def load_attribute(self) -> Any:
        if self.chat_agent is not None:
            return chat_agent_class(Path(self.project_root), self.callable, self.chat_agent)
        return load_callable(Path(self.project_root), self.callable)

    @property
    def module_file(self) -> Path:
        return module_file_of(Path(self.project_root), self.callable)

    def as_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class SandboxSettings:
    """What every sandbox of one stage is started with, given once: the system, the version
    its runs are filed under, and one case's deadline (`execution.timeout_s`)."""

    spec: SystemSpec
    version: str
    timeout_s: float
    # A partition's sandboxes refuse a system that reports another `version` (its runs would
    # be mislabelled); a probe, which asks the version, and certification, whose runs are
    # filed under no version, do not.
    checks_version: bool = True
    # Cases one sandbox runs side by side, in threads of its one worker process (a chat
    # agent's `concurrency.system`); 1: one at a time on the worker's main thread.
    cases_at_once: int = 1
    # Local sandboxes a stage may run at once without Dask, each a worker process of its own
    # (a Python system's `concurrency.system`, run/local_sandboxes.py); 1: one sandbox.
    local_sandboxes: int = 1

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "spec": self.spec.as_json()}

    def with_ledger(self, ledger: dict[str, Any]) -> "SandboxSettings":
        """These settings with a chat agent charging each model request to `ledger` (the
        run's budget, endpoints/ledger.py)."""
        assert self.spec.chat_agent is not None, "only a chat agent's requests are charged one by one"
        spec = replace(self.spec, chat_agent={**self.spec.chat_agent, "budget": ledger})
        return replace(self, spec=spec)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "SandboxSettings":
        return cls(**{**data, "spec": SystemSpec(**data["spec"])})


def build_system(attribute: Any) -> Any:
    """A class is instantiated with no arguments; anything else callable is the system itself.
    A system written for Oloproof (its module imports `oloproof`) is adapted to this runner."""
    if isinstance(attribute, type):
        system = attribute()
    elif callable(attribute):
        system = attribute
    else:
        raise ProjectError(f"system.callable names {attribute!r}, which is neither a class nor callable")
    if "oloproof" in sys.modules:
        # Imported only once some system has imported Oloproof, which is slow to import.
        from .oloproof_systems import adapt_system

        system = adapt_system(system)
    return system
