"""Running a project's graph headless through Dagster (what the CLI does), recorded in the
project's persistent instance so `dagster dev` shows the run."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from dagster import DagsterEventType, DagsterInstance

from ..model.cases import load_cases
from ..model.config import check_release_policy
from ..model.transforms import derive_cases
from ..project import load_project
from ..run.system import current_system_version
from . import EVALUATE_JOB, build_definitions, versions_partitions
from .instance import instance_lock, project_instance


@dataclass
class EvaluationRun:
    run_id: str
    version: str
    success: bool
    # Step failures other than the gate's own check failing (which only reports a BLOCK).
    errors: list[str] = field(default_factory=list)


def recording_op_name(project_name: str) -> str:
    return f"{project_name}__recorded_runs"


def ensure_version_partition(instance: DagsterInstance, partitions_name: str, version: str) -> bool:
    """Add the version's partition when it is new; True when it was added."""
    with instance_lock(instance):
        if instance.has_dynamic_partition(partitions_name, version):
            return False
        instance.add_dynamic_partitions(partitions_name, [version])
        return True


def run_evaluation(
    project_root: Path | str,
    *,
    fresh: bool = False,
    ungated: bool = False,
    instance: DagsterInstance | None = None,
    log_level: str = "CRITICAL",
) -> EvaluationRun:
    """Materialize the whole graph for the system's current version.

    The project and its cases are validated first, so a bad file is reported as the
    one-line error it is, before any run starts (the metamorphic copies and their labels too).
    Without a release policy the run must be `ungated`, so a missing release.yaml never reads as ALLOW.
    """
    project = load_project(project_root)
    check_release_policy(project, ungated=ungated)
    derive_cases(project, load_cases(project))
    version = current_system_version(project)
    instance = instance or project_instance(project.root)
    definitions = build_definitions(project.root)
    ensure_version_partition(instance, versions_partitions(project).name, version)
    run_config = {
        "ops": {recording_op_name(project.name): {"config": {"fresh": fresh}}},
        # The whole log stays in the instance (see it in `dagster dev`); the console shows
        # only what `log_level` lets through.
        "loggers": {"console": {"config": {"log_level": log_level}}},
    }
    result = definitions.resolve_job_def(EVALUATE_JOB).execute_in_process(
        partition_key=version, instance=instance, run_config=run_config, raise_on_error=False
    )
    return EvaluationRun(
        run_id=result.run_id, version=version, success=result.success, errors=step_errors(result)
    )


def step_errors(result) -> list[str]:
    errors = []
    for event in result.all_events:
        if event.event_type == DagsterEventType.STEP_FAILURE:
            error = event.step_failure_data.error
            if error is None or error.cls_name == "DagsterAssetCheckFailedError":
                continue
            errors.append(f"{event.step_key}: {innermost_message(error)}")
    return errors


def innermost_message(error) -> str:
    """Dagster wraps a step's exception; the user's own message is the innermost cause."""
    while error.cause is not None:
        error = error.cause
    # Dagster prefixes the qualified class name; our own errors' messages say it all.
    return re.sub(rf"^oloproof_pipeline\.[\w.]*\.{re.escape(error.cls_name or '')}: ", "", error.message.strip())
