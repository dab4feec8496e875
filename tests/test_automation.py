"""The sensor picks up a new system version by itself; the nightly schedule re-evaluates the
newest one, and with nothing changed that costs no system call."""

from __future__ import annotations

from dagster import (
    AssetKey,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    SensorResult,
    SkipReason,
    build_schedule_context,
    build_sensor_context,
)

from oloproof_pipeline.defs import EVALUATE_JOB, build_definitions
from oloproof_pipeline.defs.launch import run_evaluation

SENSOR, SCHEDULE = "refund_desk_new_system_version", "refund_desk_nightly"


def bump_version(project_root, new_version: str) -> None:
    config = project_root / "oloproof.yaml"
    config.write_text(config.read_text().replace('version: "1.0.0"', f'version: "{new_version}"'))


def test_sensor_and_schedule_ship_running(refund_desk):
    definitions = build_definitions(refund_desk)
    assert definitions.resolve_sensor_def(SENSOR).default_status == DefaultSensorStatus.RUNNING
    schedule = definitions.resolve_schedule_def(SCHEDULE)
    assert schedule.default_status == DefaultScheduleStatus.RUNNING
    assert schedule.cron_schedule == "0 2 * * *"


def test_sensor_adds_a_new_version_and_requests_its_run(refund_desk, instance):
    sensor = build_definitions(refund_desk).resolve_sensor_def(SENSOR)
    first = sensor(build_sensor_context(instance=instance))
    assert isinstance(first, SensorResult)
    assert [request.partition_key for request in first.run_requests] == ["1.0.0"]
    assert first.dynamic_partitions_requests[0].partition_keys == ["1.0.0"]

    instance.add_dynamic_partitions("refund_desk_versions", ["1.0.0"])
    assert isinstance(sensor(build_sensor_context(instance=instance)), SkipReason)

    bump_version(refund_desk, "1.1.0")
    bumped = sensor(build_sensor_context(instance=instance))
    assert [request.partition_key for request in bumped.run_requests] == ["1.1.0"]
    assert bumped.run_requests[0].run_key == "1.1.0"


def test_nightly_run_of_an_unchanged_version_records_nothing_new(refund_desk, instance):
    definitions = build_definitions(refund_desk)
    schedule = definitions.resolve_schedule_def(SCHEDULE)
    assert isinstance(schedule(build_schedule_context(instance=instance)), SkipReason)

    run_evaluation(refund_desk, instance=instance)
    request = schedule(build_schedule_context(instance=instance))
    assert request.partition_key == "1.0.0"
    definitions.resolve_job_def(EVALUATE_JOB).execute_in_process(
        partition_key=request.partition_key, instance=instance, raise_on_error=False
    )
    recorded = instance.get_latest_materialization_event(AssetKey(["refund_desk", "recorded_runs"]))
    metadata = recorded.asset_materialization.metadata
    assert metadata["cases_new"].value == 0
    assert metadata["cases_reused"].value == metadata["dagster/row_count"].value > 0
