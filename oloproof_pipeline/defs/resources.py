"""Resources the assets share: the project folder they evaluate."""

from __future__ import annotations

from pathlib import Path

from dagster import Config, ConfigurableResource, InitResourceContext
from pydantic import PrivateAttr

from ..model.config import ExecutionConfig, Project
from ..project import load_project
from ..run.sandboxes import Sandboxes
from .instance import claim_instance


class EvaluationProject(ConfigurableResource):
    """The evaluation project folder, loaded once per run and shared by its assets; the next
    run reads it afresh, so an edited file is seen and a bad one fails that run readably."""

    root: str
    _project: Project | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self._project = None  # a new run reads the files again
        if context.instance is not None:
            claim_instance(Path(self.root), context.instance)  # never record into another's history

    def load(self) -> Project:
        if self._project is None:
            self._project = load_project(self.root)
        return self._project


class RecordingConfig(Config):
    """Run config for `recorded_runs`: `fresh` re-records every case, ignoring stored runs."""

    fresh: bool = False


class ComparisonConfig(Config):
    """Run config for `version_comparison`; by default the two newest versions with verdicts."""

    base: str | None = None
    candidate: str | None = None


class SandboxCluster(ConfigurableResource):
    """Where the assets run cases: Dask workers when the project asks for more than one
    sandbox. Dagster's own dask executor cannot run dynamically partitioned runs in 1.13, so
    the fan-out happens inside the asset. Unset fields fall back to oloproof.yaml's
    `execution:` block."""

    workers: int | None = None
    scheduler_address: str | None = None

    def sandboxes(self, execution: ExecutionConfig) -> Sandboxes:
        overrides = {
            name: value
            for name, value in (("workers", self.workers), ("scheduler_address", self.scheduler_address))
            if value is not None
        }
        return Sandboxes(execution.model_copy(update=overrides))
