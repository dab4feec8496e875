"""The persistent Dagster instance a project's runs are recorded in.

The CLI, `dagster dev` and the schedule must share one history, so both look in the same
place: `$DAGSTER_HOME` when it is set, else the project's `.oloproof/dagster_home`.
"""

from __future__ import annotations

import os
from pathlib import Path

from dagster import DagsterInstance

from ..storage import dagster_home

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
    return DagsterInstance.from_config(str(ensure_home(instance_home(project_root))))
