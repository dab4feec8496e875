"""What runs by itself under `dagster dev`: a sensor that evaluates each new system version,
and a nightly schedule that re-evaluates the newest one. Both stay silent, saying why, in an
instance that is not the project's (see `instance.py`)."""

from __future__ import annotations

import os
from typing import Any

from dagster import (
    DefaultScheduleStatus,
    DefaultSensorStatus,
    DynamicPartitionsDefinition,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    schedule,
    sensor,
)

from ..model.config import Project
from ..model.errors import ProjectError
from ..project import load_project
from ..run.system import SYSTEM_TAG, ResolvedSystem, resolve_system
from .instance import foreign_instance_problem


def system_tags(system: ResolvedSystem) -> dict[str, str]:
    """The run tag that carries the system resolved here to every stage of the run."""
    return {SYSTEM_TAG: system.as_tag()}


def version_bump_sensor(project: Project, versions: DynamicPartitionsDefinition, job: Any) -> SensorDefinition:
    @sensor(
        name=f"{project.dagster_name}_new_system_version",
        job=job,
        # OLOPROOF_SENSOR_INTERVAL_S: a shorter wait for tests that drive `dagster dev`.
        minimum_interval_seconds=int(os.environ.get("OLOPROOF_SENSOR_INTERVAL_S", "30")),
        default_status=DefaultSensorStatus.RUNNING,
        description="Adds a partition for a system version not seen before and evaluates it.",
    )
    def new_system_version(context: SensorEvaluationContext):
        foreign = foreign_instance_problem(project.root, context.instance)
        if foreign is not None:
            return SkipReason(foreign)
        try:
            system = resolve_system(load_project(project.root))
        except ProjectError as error:
            return SkipReason(f"the project does not load: {error}")
        version = system.version
        if context.instance.has_dynamic_partition(versions.name, version):
            return SkipReason(f"version {version} already has a partition")
        return SensorResult(
            run_requests=[RunRequest(partition_key=version, run_key=version, tags=system_tags(system))],
            dynamic_partitions_requests=[versions.build_add_request([version])],
        )

    return new_system_version


def nightly_schedule(project: Project, versions: DynamicPartitionsDefinition, job: Any) -> ScheduleDefinition:
    """Schedules cannot add partitions (dagster issue 14921): this one evaluates the newest
    existing version; the sensor adds new ones. With nothing changed the run reuses every
    recording, so a quiet night costs almost nothing."""

    @schedule(
        name=f"{project.dagster_name}_nightly",
        job=job,
        cron_schedule=project.config.schedule.cron,
        execution_timezone=project.config.schedule.timezone,
        default_status=DefaultScheduleStatus.RUNNING,
        description="Re-evaluates the newest system version.",
    )
    def nightly(context: ScheduleEvaluationContext):
        foreign = foreign_instance_problem(project.root, context.instance)
        if foreign is not None:
            return SkipReason(foreign)
        keys = versions.get_partition_keys(dynamic_partitions_store=context.instance)
        if not keys:
            return SkipReason("no system version has a partition yet")
        newest = keys[-1]  # dynamic partition keys come back in the order they were added
        try:
            system = resolve_system(load_project(project.root))
        except ProjectError:
            system = None  # the run fails on the same error, readably, on the run's page
        # The system filed on the run only when it is the newest version's (else the stages resolve it).
        return RunRequest(partition_key=newest, tags=system_tags(system) if system is not None and system.version == newest else {})

    return nightly
