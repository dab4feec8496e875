"""Resources the assets share: the project folder they evaluate."""

from __future__ import annotations

from dagster import Config, ConfigurableResource

from ..project import Project, load_project


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
