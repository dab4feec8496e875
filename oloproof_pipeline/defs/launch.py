"""Running a project's graph headless through Dagster (what the CLI does), recorded in the
project's persistent instance so `dagster dev` shows the run.

The run is created against the project's code location (the one `dagster dev` serves, see
`instance.project_location`), not as a bare in-process run: a run with no code-location origin
is missing from its job's Runs page and from the Overview timeline. It still executes here, in
this process, with the in-process executor.
"""

from __future__ import annotations

import gc
import re
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from dagster import DagsterEventType, DagsterInstance, JobDefinition
from dagster._core.execution.api import execute_run
from dagster._core.definitions.job_base import InMemoryJob
from dagster._core.definitions.repository_definition.valid_definitions import SINGLETON_REPOSITORY_NAME
from dagster._core.remote_origin import RemoteJobOrigin, RemoteRepositoryOrigin
from dagster._core.storage.tags import PARTITION_NAME_TAG

from ..model.config import Project, check_release_policy
from ..model.errors import PipelineError, ProjectError, SystemVersionMismatch
from ..store.case_lines import checked_case_table
from ..store.reuse import derived_copies
from ..project import load_project
from ..run.certification import CERTIFICATION_RUN
from ..run.system import SYSTEM_TAG, ResolvedSystem, resolve_system
from . import CERTIFY_JOB, EVALUATE_JOB, build_definitions, versions_partitions
from .instance import claim_instance, instance_lock, project_instance, project_location
from .resources import Launched, loaded_for_run

# Marks the runs the CLI started (user tags show in the runs list).
LAUNCHED_BY_TAG = "oloproof/launched_by"
# The run's `--set` overrides, so the run in Dagster says which configuration it ran.
SETTINGS_TAG = "oloproof/set"


@dataclass
class EvaluationRun:
    run_id: str
    version: str
    success: bool
    # Step failures other than the gate's own check failing (which only reports a BLOCK).
    errors: list[str] = field(default_factory=list)
    # Every failure was a project's file or system found wrong mid-run (a `ProjectError`,
    # e.g. a callable that is no class, met by the worker that first imports it): exit 2, as
    # when it is found before the launch, not 5.
    configuration_error: bool = False
    # Each asset's materialization metadata, by asset name: what the run did, as the summary
    # reads it (taken from the run's own events, so nothing asks the instance again).
    materialized: dict[str, dict] = field(default_factory=dict)


# The class names of a project's configuration errors, as Dagster records a step's exception.
CONFIGURATION_ERRORS = {ProjectError.__name__, SystemVersionMismatch.__name__}


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
    project_root: Path | str | Project,
    *,
    fresh: bool = False,
    ungated: bool = False,
    instance: DagsterInstance | None = None,
    log_level: str = "CRITICAL",
    system: ResolvedSystem | None = None,
    settings: tuple[str, ...] = (),
) -> EvaluationRun:
    """Materialize the whole graph for the system's current version (`settings`: `--set`
    overrides of oloproof.yaml, for this run).

    The project and its cases are validated first, so a bad file is reported as the
    one-line error it is, before any run starts (the metamorphic copies and their labels too).
    Without a release policy the run must be `ungated`, so a missing release.yaml never reads as ALLOW.
    The system is resolved once here (unless the caller did: `system`) and filed on the run
    (`SYSTEM_TAG`), so no stage asks it again; its version is the run's partition. A caller
    that has just loaded the project (with `settings`) passes it, so it is not loaded again.
    """
    project = project_root if isinstance(project_root, Project) else load_project(project_root, settings)
    check_release_policy(project, ungated=ungated)
    launched = validated_cases(project)
    if system is None:
        system = resolve_system(project)
    run_config = {"ops": {recording_op_name(project.dagster_name): {"config": {"fresh": fresh}}}}
    tags = {PARTITION_NAME_TAG: system.version, SYSTEM_TAG: system.as_tag(), LAUNCHED_BY_TAG: "oloproof run"}
    if settings:
        tags[SETTINGS_TAG] = " ".join(settings)
    with opened_instance(project, instance) as instance:
        claim_instance(project.root, instance)
        definitions = build_definitions(project)
        ensure_version_partition(instance, versions_partitions(project).name, system.version)
        return launch_job(launched, instance, definitions.resolve_job_def(EVALUATE_JOB), system.version,
                          run_config=run_config, tags=tags, log_level=log_level)


def opened_instance(project: Project, instance: DagsterInstance | None):
    """The caller's instance as it is, or the project's, opened for this launch and closed
    after it (its event log's connections with it)."""
    return nullcontext(instance) if instance is not None else project_instance(project.root)


def launch_job(
    launched: Launched, instance: DagsterInstance, job: JobDefinition, version: str, *,
    run_config: dict, tags: dict[str, str], log_level: str,
) -> EvaluationRun:
    """Run `job` in this process against the project's instance, as the code location
    `dagster dev` serves would, with what the launch read handed to the run's resource."""
    project = launched.project
    # The whole log stays in the instance (see it in `dagster dev`); the console shows only
    # what `log_level` lets through.
    run_config = {**run_config, "loggers": {"console": {"config": {"log_level": log_level}}}}
    run = instance.create_run_for_job(
        job, run_config=run_config, tags={**job.run_tags, **tags},
        remote_job_origin=located_job_origin(project.root, job),
    )
    with loaded_for_run(run.run_id, launched), imports_set_aside():
        result = execute_run(InMemoryJob(job), run, instance, raise_on_error=False)
    failures = step_failures(result)
    return EvaluationRun(
        run_id=result.run_id, version=version, success=result.success, errors=[text for text, _ in failures],
        configuration_error=bool(failures) and all(configuration for _, configuration in failures),
        materialized=materialized_metadata(result),
    )


def materialized_metadata(result) -> dict[str, dict]:
    """Each materialized asset's metadata values, by the asset's name."""
    metadata = {}
    for event in result.all_events:
        if event.event_type == DagsterEventType.ASSET_MATERIALIZATION:
            materialization = event.step_materialization_data.materialization
            metadata[materialization.asset_key.path[-1]] = {key: value.value for key, value in materialization.metadata.items()}
    return metadata


@contextmanager
def imports_set_aside():
    """Keep the objects alive before the run (Dagster's and pandas' modules, the definitions,
    the project: well over a million) out of the garbage collector's full passes while it
    executes: each stage's `return_freed_memory` then walks only what the run made, not every
    import again (0.2 s a pass otherwise). They are handed back when the run ends."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def located_job_origin(project_root: Path, job: JobDefinition) -> RemoteJobOrigin | None:
    """The job as the project's code location serves it in `dagster dev` (None when the
    project has neither a workspace file that loads it nor a `definitions.py`)."""
    location = project_location(project_root)
    if location is None:
        return None
    return RemoteRepositoryOrigin(location.origin, SINGLETON_REPOSITORY_NAME).get_job_origin(job.name)


def validated_cases(project: Project) -> Launched:
    """The cases, and their copies and labels, as the run will read them: a bad file fails
    here, before the run. The run's assets take these (`Launched`), so nothing is read or
    derived twice; copies stored from these very inputs are reused, not derived again, and
    dataset lines checked before are not checked again (`checked_case_table`)."""
    cases = checked_case_table(project)
    return Launched(project, cases, derived_copies(project, cases))


def step_failures(result) -> list[tuple[str, bool]]:
    """Each failed step's one line, and whether it failed on a configuration error."""
    failures = []
    for event in result.all_events:
        if event.event_type == DagsterEventType.STEP_FAILURE:
            error = event.step_failure_data.error
            if error is None or error.cls_name == "DagsterAssetCheckFailedError":
                continue
            failures.append((f"{event.step_key}: {innermost_message(error)}", innermost(error).cls_name in CONFIGURATION_ERRORS))
    return failures


def innermost(error):
    """Dagster wraps a step's exception; the user's own error is the innermost cause, but a
    PipelineError's own message says what failed where (its cause is the bare exception)."""
    while error.cause is not None and error.cls_name != PipelineError.__name__:
        error = error.cause
    return error


def innermost_message(error) -> str:
    error = innermost(error)
    # Dagster prefixes the qualified class name; our own errors' messages say it all.
    return re.sub(rf"^oloproof_pipeline\.[\w.]*\.{re.escape(error.cls_name or '')}: ", "", error.message.strip())


def run_certification(
    project_root: Path | str, *, instance: DagsterInstance | None = None, log_level: str = "CRITICAL"
) -> EvaluationRun:
    """Materialize the cases and their certification (the `certify` job) in the project's
    instance, as `oloproof certify` does. Certification is of the cases, under no version."""
    project = load_project(project_root)
    launched = validated_cases(project)
    with opened_instance(project, instance) as instance:
        claim_instance(project.root, instance)
        job = build_definitions(project).resolve_job_def(CERTIFY_JOB)
        return launch_job(launched, instance, job, CERTIFICATION_RUN, run_config={},
                          tags={LAUNCHED_BY_TAG: "oloproof certify"}, log_level=log_level)
