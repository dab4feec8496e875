"""The Dagster layer: one `Definitions` per evaluation project."""

from __future__ import annotations

import warnings
from pathlib import Path

from dagster import (
    AssetSelection,
    Definitions,
    DynamicPartitionsDefinition,
    define_asset_job,
    in_process_executor,
)

from ..project import Project, load_project
from ..storage import tables_dir
from .assets import IO_MANAGER_KEY, build_assets
from .automation import nightly_schedule, version_bump_sensor
from .io_manager import ParquetIOManager
from .resources import EvaluationProject

EVALUATE_JOB = "evaluate"

# A check partitioned like its asset is a preview feature in 1.13; without it the gate check
# would load every version's gate (dagster issue 27747). Used knowingly, so not repeated.
warnings.filterwarnings("ignore", message="Specifying a partitions_def on an AssetCheckSpec")


def versions_partitions(project: Project) -> DynamicPartitionsDefinition:
    """One partition per system version; named per project so two projects in one
    Dagster instance keep their versions apart."""
    return DynamicPartitionsDefinition(name=f"{project.name}_versions")


def build_definitions(project_dir: str | Path) -> Definitions:
    project = load_project(project_dir)
    versions = versions_partitions(project)
    assets, checks = build_assets(project, versions)
    evaluate = define_asset_job(
        EVALUATE_JOB,
        selection=AssetSelection.groups(project.name),
        description="Record, judge and gate one system version of the project.",
    )
    return Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=[evaluate],
        sensors=[version_bump_sensor(project, versions, evaluate)],
        schedules=[nightly_schedule(project, versions, evaluate)],
        resources={
            "evaluation_project": EvaluationProject(root=str(project.root)),
            IO_MANAGER_KEY: ParquetIOManager(base_path=str(tables_dir(project.root))),
        },
        executor=in_process_executor,
    )


__all__ = ["EVALUATE_JOB", "build_definitions", "versions_partitions"]
