"""The Dagster layer: one `Definitions` per evaluation project."""

from __future__ import annotations

import warnings
from pathlib import Path

from dagster import (
    AssetKey,
    AssetSelection,
    Definitions,
    DynamicPartitionsDefinition,
    define_asset_job,
    in_process_executor,
)

from ..model.config import Project
from ..project import load_project
from ..store.layout import tables_dir
from .assets import CERTIFICATION, IO_MANAGER_KEY, build_assets
from .automation import nightly_schedule, version_bump_sensor
from .conventions import run_tags
from .io_manager import ParquetIOManager
from .resources import EvaluationProject, SandboxCluster

EVALUATE_JOB = "evaluate"
REGRADE_JOB = "regrade"
COMPARE_JOB = "compare_versions"
CERTIFY_JOB = "certify"
# What a re-grade rebuilds from stored tables: nothing here calls the system.
REGRADED_ASSETS = ("verdicts", "slices", "gate")

# A check partitioned like its asset is a preview feature in 1.13; without it the gate check
# would load every version's gate (dagster issue 27747). Used knowingly, so not repeated.
warnings.filterwarnings("ignore", message="Specifying a partitions_def on an AssetCheckSpec")


def versions_partitions(project: Project) -> DynamicPartitionsDefinition:
    """One partition per system version; named per project so two projects in one
    Dagster instance keep their versions apart."""
    return DynamicPartitionsDefinition(name=f"{project.dagster_name}_versions")


def build_definitions(project_dir: str | Path | Project, *, stop_downstream_on_block: bool = False) -> Definitions:
    """The project's code location. A BLOCK is a successful evaluation: the gate check fails
    but the run stays green. With `stop_downstream_on_block=True` the gate check is blocking,
    so a BLOCK fails the run and skips every asset you add downstream of the gate. A launch
    that has just loaded the project passes it, so it is not loaded again."""
    project = project_dir if isinstance(project_dir, Project) else load_project(project_dir)
    versions = versions_partitions(project)
    tags = run_tags(project)  # on every run of each job, whoever launches it
    assets, checks = build_assets(project, versions, stop_downstream_on_block=stop_downstream_on_block)
    comparison = AssetSelection.assets(AssetKey([project.dagster_name, "version_comparison"]))
    certification = AssetSelection.assets(AssetKey([project.dagster_name, CERTIFICATION]))
    # Certification plays every reference on the system: an evaluation does it only when the
    # release policy gates on certified cases; `oloproof certify` (the certify job) any time.
    uncertified = AssetSelection.assets() if project.release.require_certified_cases else certification
    evaluate = define_asset_job(
        EVALUATE_JOB,
        tags=tags,
        selection=AssetSelection.groups(project.dagster_name) - comparison - uncertified,
        description="Record, judge and gate one system version of the project.",
    )
    regrade = define_asset_job(
        REGRADE_JOB,
        tags=tags,
        selection=AssetSelection.assets(*(AssetKey([project.dagster_name, name]) for name in REGRADED_ASSETS)),
        description="Re-judge stored recordings and replays of any version, without the system under test. "
        "Backfill it over old versions after an evaluator or a rule changes.",
    )
    compare = define_asset_job(
        COMPARE_JOB, selection=comparison, tags=tags, description="Pair two versions' verdicts case by case."
    )
    certify = define_asset_job(
        CERTIFY_JOB,
        tags=tags,
        selection=AssetSelection.assets(*(AssetKey([project.dagster_name, name]) for name in ("cases", "derived_cases", CERTIFICATION))),
        description="Certify the cases: flag those a do-nothing agent passes, whose reference fails them, "
        "and copies or duplicates that test nothing.",
    )
    return Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=[evaluate, regrade, compare, certify],
        sensors=[version_bump_sensor(project, versions, evaluate)],
        schedules=[nightly_schedule(project, versions, evaluate)],
        resources={
            "evaluation_project": EvaluationProject(root=str(project.root)),
            "sandbox_cluster": SandboxCluster(),
            IO_MANAGER_KEY: ParquetIOManager(base_path=str(tables_dir(project.root))),
        },
        executor=in_process_executor,
    )


__all__ = ["CERTIFY_JOB", "COMPARE_JOB", "EVALUATE_JOB", "REGRADE_JOB", "build_definitions", "versions_partitions"]
