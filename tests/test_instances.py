"""Which Dagster instance a project's runs go to: one instance per workspace, shared by the CLI
and `dagster dev`; a project's history never split over two instances, and no project recording
into an instance kept inside another project's folder."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest
from dagster import (
    AssetKey,
    DagsterEventType,
    DagsterInstance,
    RunRequest,
    SkipReason,
    build_schedule_context,
    build_sensor_context,
)

from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster.version import __version__ as dagster_version

from oloproof_pipeline.defs import EVALUATE_JOB, build_definitions, versions_partitions
from oloproof_pipeline.defs import sqlite_storage
from oloproof_pipeline.defs.sqlite_storage import KeptOpenSqliteEventLogStorage, StampedSqliteRunStorage
from oloproof_pipeline.defs.instance import ensure_home, headless_overrides, project_instance, project_location, workspace_home
from oloproof_pipeline.project import load_project

from conftest import write_project
from helpers import OLOPROOF, cli_environment, tiny_stateful_app

APP = tiny_stateful_app("ok")
DEFINITIONS = "from pathlib import Path\n\nfrom oloproof_pipeline.defs import build_definitions\n\n" \
    "defs = build_definitions(Path(__file__).parent)\n"


def project(root: Path, name: str) -> Path:
    """A one-case project named `name`, with the `definitions.py` a code location loads."""
    case = {"id": "c1", "input": {"n": "1"}, "initial_state": {"done": False}, "expected": {"state": {"done": True}}}
    write_project(root, app=APP, cases=[case], rules=[])  # no release policy: runs are --ungated, exit 0
    config = root / "oloproof.yaml"
    config.write_text(config.read_text().replace('"project": "tiny"', f'"project": "{name}"'))
    (root / "definitions.py").write_text(DEFINITIONS)
    return root


def oloproof_run(root: Path, dagster_home: Path | None = None, *options: str) -> subprocess.CompletedProcess:
    environment = cli_environment()
    if dagster_home is not None:
        environment["DAGSTER_HOME"] = str(dagster_home)
    return subprocess.run([OLOPROOF, "run", "--ungated", "--project", str(root), *options], capture_output=True, text=True, timeout=300,
                          env=environment)


def runs_of(home: Path) -> list:
    with DagsterInstance.from_config(str(home)) as instance:
        return list(instance.get_runs())


def sqlite_schema(path: Path) -> list:
    """A Dagster SQLite file's tables and indexes, migration stamp and journal mode."""
    with sqlite3.connect(path) as connection:
        return [
            connection.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall(),
            connection.execute("SELECT version_num FROM alembic_version").fetchall(),
            connection.execute("PRAGMA journal_mode").fetchall(),
        ]


def automation(root: Path):
    definitions = build_definitions(root)
    [sensor] = definitions.sensors
    [schedule] = definitions.schedules
    return sensor, schedule


@pytest.fixture
def workspace(tmp_path) -> tuple[Path, Path, Path]:
    """Two projects under one workspace file, as the repo's examples are."""
    first = project(tmp_path / "projects" / "first", "first")
    second = project(tmp_path / "projects" / "second", "second")
    (tmp_path / "workspace.yaml").write_text(
        "load_from:\n"
        "  - python_file: {relative_path: projects/first/definitions.py, location_name: first_desk}\n"
        "  - python_file: {relative_path: projects/second/definitions.py, location_name: second_desk}\n"
    )
    return tmp_path, first, second


def test_the_cli_records_into_the_workspace_instance_under_the_projects_location(workspace):
    folder, first, second = workspace
    home = folder / ".oloproof" / "dagster_home"
    assert workspace_home(first) == workspace_home(second) == home.resolve()
    assert project_location(first).name == "first_desk"
    ran = oloproof_run(first)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    [run] = runs_of(home)
    assert run.remote_job_origin.location_name == "first_desk" and run.job_name == EVALUATE_JOB
    assert (first / ".oloproof" / "dagster_instance").read_text().strip() == str(home.resolve())
    assert not (first / ".oloproof" / "dagster_home").exists()  # no second history beside the project's


def test_a_project_never_records_into_an_instance_kept_in_another_project(tmp_path):
    """The issue's case: DAGSTER_HOME set to one project's instance while another project runs."""
    owner = project(tmp_path / "owner", "owner")
    guest = project(tmp_path / "guest", "guest")
    assert oloproof_run(owner).returncode == 0  # no workspace loads it: its own home
    owner_home = owner / ".oloproof" / "dagster_home"
    [owner_run] = runs_of(owner_home)
    assert owner_run.remote_job_origin.location_name == "definitions.py"  # `dagster dev -f definitions.py`

    refused = oloproof_run(guest, dagster_home=owner_home)
    assert refused.returncode == 2
    assert f"belongs to the project in {owner.resolve()}" in refused.stderr and len(refused.stderr.splitlines()) == 1
    with DagsterInstance.from_config(str(owner_home)) as instance:
        sensor, schedule = automation(guest)
        for ticked in (sensor(build_sensor_context(instance=instance)), schedule(build_schedule_context(instance=instance))):
            assert isinstance(ticked, SkipReason) and "belongs to the project in" in ticked.skip_message
        # A run launched there by hand fails at its first step, before recording anything.
        instance.add_dynamic_partitions(versions_partitions(load_project(guest)).name, ["1.0.0"])
        result = build_definitions(guest).resolve_job_def(EVALUATE_JOB).execute_in_process(
            partition_key="1.0.0", instance=instance, raise_on_error=False
        )
    assert not result.success
    assert not (guest / ".oloproof" / "tables").exists()
    assert [run.remote_job_origin.location_name for run in runs_of(owner_home) if run.remote_job_origin] == ["definitions.py"]


def test_a_projects_history_is_never_split_over_two_instances(workspace, tmp_path):
    folder, first, _ = workspace
    assert oloproof_run(first).returncode == 0
    elsewhere = ensure_home(tmp_path / "elsewhere")
    refused = oloproof_run(first, dagster_home=elsewhere)
    assert refused.returncode == 2
    assert "its run history is in" in refused.stderr and str(folder / ".oloproof" / "dagster_home") in refused.stderr
    assert runs_of(elsewhere) == []
    with DagsterInstance.from_config(str(elsewhere)) as instance:
        sensor, _ = automation(first)
        assert isinstance(sensor(build_sensor_context(instance=instance)), SkipReason)
    # Where the history is, the automation works as before.
    with DagsterInstance.from_config(str(folder / ".oloproof" / "dagster_home")) as instance:
        _, schedule = automation(first)
        assert isinstance(schedule(build_schedule_context(instance=instance)), RunRequest)
    again = oloproof_run(first, None, "--launch")  # no DAGSTER_HOME: the pinned home
    assert again.returncode == 0 and len(runs_of(folder / ".oloproof" / "dagster_home")) == 2


def test_what_the_cli_stores_dagster_dev_reads_and_the_cli_leaves_no_database_open(evaluated_example):
    """The CLI's instance keeps its event-log connections open for the run and captures no
    step output to files (defs/instance.headless_overrides); the files are Dagster's own, so the
    instance `dagster dev` opens on the same home reads the run whole, and the run's database
    is closed cleanly (no write-ahead log left behind)."""
    root, ran = evaluated_example
    run_id = json.loads(ran.stdout)["run_id"]
    home = root / ".oloproof" / "dagster_home"
    with DagsterInstance.from_config(str(home)) as instance:  # as `dagster dev` opens it
        assert type(instance.compute_log_manager).__name__ == "LocalComputeLogManager"
        assert instance.get_run_by_id(run_id).is_success
        materialized = {
            entry.asset_materialization.asset_key.path[-1]
            for entry in instance.all_logs(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)
        }
        assert {"cases", "recorded_runs", "verdicts", "gate"} <= materialized
        assert instance.get_latest_materialization_event(AssetKey(["refund_desk", "gate"])).run_id == run_id
    runs_folder = home / "history" / "runs"
    assert (runs_folder / f"{run_id}.db").is_file()
    assert not (runs_folder / f"{run_id}.db-wal").exists()
    assert not (home / "history" / "runs.db-wal").exists()  # the run storage's kept engine closed too


def test_the_run_storage_reads_and_writes_through_one_engine_closed_with_it(tmp_path, monkeypatch):
    made = []
    real = sqlite_storage.create_engine
    monkeypatch.setattr(sqlite_storage, "create_engine", lambda *args, **kwargs: made.append(args[0]) or real(*args, **kwargs))
    storage = StampedSqliteRunStorage.from_config_value(None, {"base_dir": str(tmp_path)})
    for _ in range(5):
        assert storage.get_runs() == []
    storage.set_cursor_values({"sweep": "1"})
    assert storage.get_cursor_values({"sweep"}) == {"sweep": "1"}
    assert len(made) == 1  # Dagster's own makes one per read or write: seven here
    storage.dispose()
    assert not (tmp_path / "runs.db-wal").exists()


def test_the_cli_changes_dagsters_storage_only_where_dagster_yaml_leaves_it_to_the_defaults(tmp_path):
    default_home = ensure_home(tmp_path / "default")
    assert set(headless_overrides(default_home)) == {"run_storage", "event_log_storage", "schedule_storage", "compute_logs"}
    configured = tmp_path / "configured"
    configured.mkdir()
    (configured / "dagster.yaml").write_text(
        "storage:\n  sqlite:\n    base_dir: /somewhere\ncompute_logs:\n"
        "  module: dagster._core.storage.local_compute_log_manager\n  class: LocalComputeLogManager\n"
        "  config:\n    base_dir: /somewhere/logs\n"
    )
    assert headless_overrides(configured) == {}


def test_a_runs_event_database_started_from_the_kept_empty_one_is_the_database_dagster_makes(tmp_path):
    """A new run's database is copied from an empty one Dagster made (defs/sqlite_storage.py),
    so it must be what Dagster's own storage makes: the same tables, indexes and migration stamp."""
    ours = KeptOpenSqliteEventLogStorage(str(tmp_path / "ours" / "history" / "runs"))
    dagsters = SqliteEventLogStorage(str(tmp_path / "dagsters" / "history" / "runs"))
    for storage in (ours, dagsters):
        for run_id in ("run-a", "run-b"):
            with storage.run_connection(run_id):
                pass
    ours.dispose()

    for run_id in ("run-a", "run-b"):
        assert sqlite_schema(tmp_path / "ours" / "history" / "runs" / f"{run_id}.db") == \
            sqlite_schema(tmp_path / "dagsters" / "history" / "runs" / f"{run_id}.db")
    assert sorted(ours.get_all_run_ids()) == ["run-a", "run-b"]  # the kept empty one is not taken for a run


def test_a_new_home_starts_as_a_copy_of_the_machines_empty_one_and_is_a_home_of_its_own(tmp_path, monkeypatch):
    """The first home made on a machine leaves an empty one in the user's cache folder; every
    new home after it starts as a copy of those files, which Dagster opens as its own: the
    same schema as a home Dagster makes, and an identity of its own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first, second = project(tmp_path / "first", "first"), project(tmp_path / "second", "second")
    identities = []
    for root in (first, second):
        with project_instance(root) as instance:
            identities.append(instance.run_storage.get_run_storage_id())
    cached = tmp_path / "cache" / "oloproof_pipeline"
    assert [path.name for path in cached.iterdir()] == [f"empty-dagster-home-{dagster_version}"]
    assert identities[0] != identities[1]

    made_by_dagster = ensure_home(tmp_path / "dagsters")
    with DagsterInstance.from_config(str(made_by_dagster)) as instance:
        instance.get_runs(limit=1)
    for database in ("history/runs.db", "history/runs/index.db", "schedules/schedules.db"):
        assert (second / ".oloproof" / "dagster_home" / database).is_file()
        assert sqlite_schema(second / ".oloproof" / "dagster_home" / database) == sqlite_schema(made_by_dagster / database)
    with DagsterInstance.from_config(str(second / ".oloproof" / "dagster_home")) as instance:  # as `dagster dev` opens it
        assert instance.get_runs() == []
