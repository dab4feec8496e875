"""The persistent Dagster instance a project's runs are recorded in, and the rule that keeps a
project's history in one instance.

The rule: **one instance per workspace, and a project's history never leaves the instance it
started in.**
- The CLI and `dagster dev` use the same home by default: the `.oloproof/dagster_home` beside the
  `workspace.yaml` that loads the project (the nearest one above it), or, for a project that no
  workspace file loads, the project's own `.oloproof/dagster_home`. `$DAGSTER_HOME` overrides it.
- The first run of a project pins it to its instance (`.oloproof/dagster_instance` names the
  home). From then on the CLI, the sensor, the schedule and every run of the project's assets
  refuse another instance, and no project ever records into an instance kept inside another
  project's folder. So a project's runs are never split across two instances nor written into
  another project's.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import yaml
from dagster import DagsterInstance
from dagster.version import __version__ as dagster_version
from dagster._core.instance.ref import InstanceRef
from dagster._core.remote_origin import CodeLocationOrigin
from dagster._core.workspace.load import location_origin_from_python_file, location_origins_from_yaml_paths

from ..model.errors import ProjectError
from ..store.journal import file_lock
from ..store.layout import dagster_home, empty_dagster_home_cache, instance_pin_path
from .sqlite_storage import KeptOpenSqliteEventLogStorage, StampedSqliteRunStorage, StampedSqliteScheduleStorage

DAGSTER_YAML = """\
# Written by oloproof. Runs started by the CLI, `dagster dev` and the schedule share this home.
telemetry:
  enabled: false
nux:
  enabled: false
"""
WORKSPACE_FILE = "workspace.yaml"
DEFINITIONS_FILE = "definitions.py"
PROJECT_FILE = "oloproof.yaml"


# -- where `dagster dev` serves a project ----------------------------------------------------


@dataclass(frozen=True)
class ProjectLocation:
    """The code location that serves a project in `dagster dev`, and the workspace file that
    declares it (None: `dagster dev -f definitions.py` run in the project's folder)."""

    name: str
    origin: CodeLocationOrigin
    workspace: Path | None


def project_location(project_root: Path) -> ProjectLocation | None:
    """The nearest `workspace.yaml` above the project that loads it, else the project's own
    `definitions.py`; None for a project with neither."""
    root = Path(project_root).resolve()
    for folder in (root, *root.parents):
        workspace = folder / WORKSPACE_FILE
        if workspace.is_file():
            origin = workspace_origin(root, workspace)
            if origin is not None:
                return ProjectLocation(origin.location_name, origin, workspace)
    definitions = root / DEFINITIONS_FILE
    if definitions.is_file():
        origin = location_origin_from_python_file(str(definitions), None, str(root))
        return ProjectLocation(origin.location_name, origin, None)
    return None


def workspace_origin(root: Path, workspace: Path) -> CodeLocationOrigin | None:
    """The workspace's code location whose Python file (or module folder) is in the project."""
    try:
        origins = location_origins_from_yaml_paths([str(workspace)])
    except Exception as error:  # Dagster raises several kinds for a file it cannot read
        raise ProjectError(f"{workspace}: not a readable Dagster workspace file: {error}") from error
    for origin in origins:
        target = getattr(origin, "loadable_target_origin", None)
        if target is None:
            continue
        if target.python_file and Path(target.python_file).resolve().parent == root:
            return origin
        if target.module_name and target.working_directory and Path(target.working_directory).resolve() == root:
            return origin
    return None


# -- which home ------------------------------------------------------------------------------


def workspace_home(project_root: Path) -> Path:
    """The default home: the workspace's, or the project's own when no workspace loads it."""
    location = project_location(project_root)
    folder = location.workspace.parent if location is not None and location.workspace is not None else project_root
    return dagster_home(Path(folder).resolve())


def pinned_home(project_root: Path) -> Path | None:
    """The home the project's history is in, once a run pinned it (None when the pin names a
    home that no longer exists: that history is gone, so a new one may start)."""
    pin = instance_pin_path(project_root)
    if not pin.is_file():
        return None
    # A home inside the project is pinned relative to it, so a copied or moved project keeps
    # its own history instead of pointing at the folder it came from.
    home = Path(project_root).resolve() / Path(pin.read_text(encoding="utf-8").strip())
    return home if home.is_dir() else None


def instance_home(project_root: Path) -> Path:
    configured = os.environ.get("DAGSTER_HOME")
    if configured:
        return Path(configured)
    return pinned_home(project_root) or workspace_home(project_root)


def owning_project(home: Path) -> Path | None:
    """The project folder an instance home is kept in, if any."""
    for folder in home.parents:
        if (folder / PROJECT_FILE).is_file():
            return folder
    return None


def foreign_instance_problem(project_root: Path, instance: DagsterInstance) -> str | None:
    """Why this project must not record into `instance` (one line), or None when it may."""
    if instance.is_ephemeral:
        return None  # keeps no history, so it can split none
    root = Path(project_root).resolve()
    home = Path(instance.root_directory).resolve()
    owner = owning_project(home)
    if owner is not None and owner != root:
        return (
            f"{root.name}: the Dagster instance {home} belongs to the project in {owner}, so {root.name} does not "
            f"record its runs there; start dagster dev with DAGSTER_HOME={pinned_home(root) or workspace_home(root)}"
        )
    pinned = pinned_home(root)
    if pinned is not None and pinned.resolve() != home:
        return (
            f"{root.name}: its run history is in {pinned} (named by {instance_pin_path(root)}), not in this instance "
            f"{home}; use DAGSTER_HOME={pinned}, or delete that file to start a new history here"
        )
    return None


def claim_instance(project_root: Path, instance: DagsterInstance) -> None:
    """Refuse an instance that is not the project's; pin the project to it on its first run."""
    problem = foreign_instance_problem(project_root, instance)
    if problem is not None:
        raise ProjectError(problem)
    if instance.is_ephemeral:
        return
    pin = instance_pin_path(project_root)
    with file_lock(pin.with_name(pin.name + ".lock")):
        if pinned_home(project_root) is None:
            home, root = Path(instance.root_directory).resolve(), Path(project_root).resolve()
            pinned = home.relative_to(root) if home.is_relative_to(root) else home
            pin.write_text(f"{pinned}\n", encoding="utf-8")


# -- the instance ----------------------------------------------------------------------------


def ensure_home(home: Path) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(DAGSTER_YAML, encoding="utf-8")
    return home


def project_instance(project_root: Path) -> DagsterInstance:
    """The instance, its SQLite storages created under a lock: two first runs at once (the
    CLI twice, or the CLI and `dagster dev`) would otherwise both create the same tables."""
    home = ensure_home(instance_home(project_root))
    with file_lock(home / ".oloproof-instance.lock"):
        overrides = headless_overrides(home)
        if "event_log_storage" in overrides and not (home / "history").exists():
            shutil.copytree(empty_home(), home, dirs_exist_ok=True)
        instance = opened(home, overrides)
        instance.get_runs(limit=1)  # touches every storage, so each creates its schema now
        instance.get_dynamic_partitions("oloproof_schema_check")
    return instance


def opened(home: Path, overrides: dict) -> DagsterInstance:
    return DagsterInstance.from_ref(InstanceRef.from_dir(str(home), overrides=overrides or None))


def empty_home() -> Path:
    """An empty Dagster home, made once per machine and Dagster version: a new home made by
    Dagster reads all its migration scripts six times over (each storage checked, then
    stamped), a second or more of a newcomer's first run; a copy of the same files does not."""
    cached = empty_dagster_home_cache(dagster_version)
    if not cached.is_dir():
        cached.parent.mkdir(parents=True, exist_ok=True)
        made = cached.with_name(f"{cached.name}.{os.getpid()}.{uuid.uuid4().hex}")
        made.mkdir()
        (made / "dagster.yaml").write_text(DAGSTER_YAML, encoding="utf-8")
        with opened(made, headless_overrides(made)) as instance:
            instance.get_runs(limit=1)
            instance.get_dynamic_partitions("oloproof_schema_check")
            instance.event_log_storage.empty_run_database()
        (made / "dagster.yaml").unlink()  # each home keeps its own
        try:
            made.rename(cached)
        except OSError:  # another process made it first
            shutil.rmtree(made, ignore_errors=True)
    return cached


# The keys of dagster.yaml that choose where runs and events are stored.
STORAGE_KEYS = ("storage", "run_storage", "event_log_storage", "schedule_storage")


def headless_overrides(home: Path) -> dict:
    """How this process's instance differs from the one `dagster dev` opens on the same home,
    where dagster.yaml leaves the choice to Dagster's defaults:
    - the SQLite storages are made and opened for less (defs/sqlite_storage.py): the same
      files, about a fifth of a small run saved;
    - the steps' stdout and stderr are not captured to files: the run's steps report through
      Dagster's log, and capturing started four processes (two `tail`s and their watchers)
      per run, whose own tracebacks cluttered an interrupted run."""
    config = yaml.safe_load((home / "dagster.yaml").read_text(encoding="utf-8")) or {}
    overrides: dict = {}
    if not any(key in config for key in STORAGE_KEYS):
        for key, storage, folder in (
            ("run_storage", StampedSqliteRunStorage, home / "history"),
            ("event_log_storage", KeptOpenSqliteEventLogStorage, home / "history" / "runs"),
            ("schedule_storage", StampedSqliteScheduleStorage, home / "schedules"),
        ):
            overrides[key] = {"module": storage.__module__, "class": storage.__name__, "config": {"base_dir": str(folder)}}
    if "compute_logs" not in config:
        overrides["compute_logs"] = {
            "module": "dagster._core.storage.noop_compute_log_manager",
            "class": "NoOpComputeLogManager",
        }
    return overrides


def instance_lock(instance: DagsterInstance):
    """Serialises changes that two processes could race on, such as adding a partition."""
    return file_lock(Path(instance.root_directory) / ".oloproof-instance.lock")
