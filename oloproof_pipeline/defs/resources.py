"""Resources the assets share: the project folder they evaluate."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from dagster import Config, ConfigurableResource

from ..fanout import sandbox_client
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
    """The Dask client the assets fan cases out over. Dagster's own dask executor cannot run
    dynamically partitioned runs in 1.13, so the fan-out happens inside the asset. Unset
    fields fall back to the project's `execution:` block in oloproof.yaml."""

    workers: int | None = None
    scheduler_address: str | None = None

    @contextmanager
    def client(self, execution: ExecutionConfig) -> Iterator[Any]:
        overrides = {
            name: value
            for name, value in (("workers", self.workers), ("scheduler_address", self.scheduler_address))
            if value is not None
        }
        with sandbox_client(execution.model_copy(update=overrides)) as client:
            yield client
