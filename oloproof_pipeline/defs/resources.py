"""Resources the assets share: the project folder they evaluate."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pandas as pd
from dagster import Config, ConfigurableResource, InitResourceContext
from pydantic import PrivateAttr

from ..model.config import ExecutionConfig, Project
from ..project import load_project
from ..run.sandboxes import Sandboxes
from ..store.case_lines import checked_case_table
from ..store.layout import read_table_file, table_path
from ..store.reuse import Copies, derived_copies
from .instance import claim_instance


@dataclass
class Launched:
    """What a launch in this process read and checked just before it executed the run: the
    project, its cases' table and their copies (derived at most once per launch). The tables
    are handed to the run's assets once each, then let go: the run holds no second copy."""

    project: Project
    cases: pd.DataFrame | None = None
    copies: Copies | None = None
    # The run's `cases` step took `cases`: the table it stored is the one the copies were derived from.
    cases_taken: bool = False


# By run id (`loaded_for_run`): the run's assets use it instead of reading the files again.
_LOADED_FOR_RUN: dict[str, Launched] = {}


@contextmanager
def loaded_for_run(run_id: str, launched: Launched) -> Iterator[None]:
    """While the run executes in this process, its assets share what the launch read."""
    _LOADED_FOR_RUN[run_id] = launched
    try:
        yield
    finally:
        _LOADED_FOR_RUN.pop(run_id, None)


class EvaluationProject(ConfigurableResource):
    """The evaluation project folder, loaded once per run and shared by its assets; the next
    run reads it afresh, so an edited file is seen and a bad one fails that run readably. A run
    launched in this process (`run_evaluation`) shares the project, cases and copies its launch
    just read."""

    root: str
    _launched: Launched | None = PrivateAttr(default=None)
    _project: Project | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        # A new run reads the files again, unless its launch here has just read them.
        self._launched = _LOADED_FOR_RUN.get(context.run.run_id) if context.run is not None else None
        self._project = self._launched.project if self._launched is not None else None
        if context.instance is not None:
            claim_instance(Path(self.root), context.instance)  # never record into another's history

    def load(self) -> Project:
        if self._project is None:
            self._project = load_project(self.root)
        return self._project

    def case_table(self) -> pd.DataFrame:
        """The cases' table: the launch's, else read from the files now."""
        if self._launched is not None and self._launched.cases is not None:
            cases, self._launched.cases = self._launched.cases, None
            self._launched.cases_taken = True
            return cases
        return checked_case_table(self.load())

    def copies(self) -> Copies:
        """The copies of the cases the `cases` step stored: the launch's when that step stored the
        launch's cases (the copies were derived from those very cases), else reused or derived
        now from the stored cases' table (`derived_copies`), read only then."""
        launched = None
        if self._launched is not None:
            launched, self._launched.copies = self._launched.copies, None
        if launched is not None and self._launched.cases_taken:
            return launched
        project = self.load()
        return derived_copies(project, read_table_file(table_path(project.root, "cases")))


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
