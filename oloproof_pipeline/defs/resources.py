"""Resources the assets share: the project folder they evaluate."""

from __future__ import annotations

from dagster import Config, ConfigurableResource

from ..fanout import Sandboxes
from ..project import ExecutionConfig, Project, load_project


class EvaluationProject(ConfigurableResource):
    """The evaluation project folder. Loaded afresh by each asset, so an edited file is
    read by the next run and a bad one fails that run with a readable error."""

    root: str

    def load(self) -> Project:
        return load_project(self.root)


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
