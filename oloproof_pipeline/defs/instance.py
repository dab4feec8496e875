"""The persistent Dagster instance a project's runs are recorded in.

The CLI, `dagster dev` and the schedule must share one history, so both look in the same
place: `$DAGSTER_HOME` when it is set, else the project's `.oloproof/dagster_home`.
"""

from __future__ import annotations

import os
from pathlib import Path

from dagster import DagsterInstance

from ..store.journal import file_lock
from ..store.layout import dagster_home

DAGSTER_YAML = """\
# Written by oloproof. Runs started by the CLI, `dagster dev` and the schedule share this home.
telemetry:
  enabled: false
"""


def instance_home(project_root: Path) -> Path:
    configured = os.environ.get("DAGSTER_HOME")
    return Path(configured) if configured else dagster_home(project_root)


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
        instance = DagsterInstance.from_config(str(home))
        instance.get_runs(limit=1)  # touches every storage, so each creates its schema now
        instance.get_dynamic_partitions("oloproof_schema_check")
    return instance


def instance_lock(instance: DagsterInstance):
    """Serialises changes that two processes could race on, such as adding a partition."""
    return file_lock(Path(instance.root_directory) / ".oloproof-instance.lock")
