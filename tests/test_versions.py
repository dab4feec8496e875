"""The one version check (`model.config.version_problem`): a version becomes a Dagster
partition key and a file name under .oloproof/, so `.`, `..`, a path or a name Dagster's UI
cannot select is refused wherever the version comes from, in one line naming where."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from oloproof_pipeline.model.config import VERSION_MAX_LENGTH, version_problem
from oloproof_pipeline.model.errors import ProjectError
from oloproof_pipeline.project import load_project
from oloproof_pipeline.run.supervisor import SystemFacts
from oloproof_pipeline.run.system import resolve_system_version
from oloproof_pipeline.store.layout import checked_partition, table_path

REFUSED = [".", "..", "../x", "a/b", "a\\b", "", "1.0 beta", "1,2", "a|b", "x" * (VERSION_MAX_LENGTH + 1)]
ACCEPTED = ["1.0.0", "v2_rc-1", "...", ".hidden", "a..b", "x" * VERSION_MAX_LENGTH]


@pytest.mark.parametrize("version", REFUSED)
def test_a_version_that_cannot_name_a_file_is_refused(version):
    problem = version_problem(version)
    assert problem is not None and "not a valid version" in problem and "\n" not in problem


@pytest.mark.parametrize("version", ACCEPTED)
def test_a_version_that_can_name_a_file_is_accepted(version):
    assert version_problem(version) is None
    assert checked_partition(version) == version


def declared_version(root: Path, version: str) -> Path:
    config = root / "oloproof.yaml"
    config.write_text(config.read_text().replace('version: "1.0.0"', f"version: {version!r}"))
    return config


@pytest.mark.parametrize("version", [".", "..", "../outside", "1,2"])
def test_oloproof_yaml_with_a_bad_version_is_one_line_naming_file_and_field(refund_desk, version):
    config = declared_version(refund_desk, version)
    with pytest.raises(ProjectError) as raised:
        load_project(refund_desk)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"{config}:")
    assert "system.version" in message and "not a valid version" in message


def test_storage_and_the_resolved_version_refuse_the_same_versions(refund_desk):
    project = load_project(refund_desk)
    for version in ("..", "."):
        with pytest.raises(ProjectError, match="not a valid version"):
            table_path(refund_desk, "gate", version)
    # A version the system reports is checked by the same rule (no YAML validator saw it).
    system = project.config.system.model_copy(update={"version": None})
    undeclared = replace(project, config=project.config.model_copy(update={"system": system}))
    with pytest.raises(ProjectError) as raised:
        resolve_system_version(undeclared, SystemFacts(version="..", replayable=False))
    assert str(raised.value) == f"{refund_desk / 'oloproof.yaml'}: system.version: {version_problem('..')}"
