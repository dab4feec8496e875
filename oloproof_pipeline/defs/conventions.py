"""Dagster's own conventions, which its catalog and asset pages are built around: kinds (the
badges and the catalog's kind filter), owners and tags (from oloproof.yaml's `dagster:`
block), and each table's columns (`dagster/column_schema`, the asset's Columns view)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from dagster import TableColumn, TableSchema

from ..model.config import Project
from ..read.compare import CriterionComparison
from ..store import tables

# What every asset is: Python code writing a pandas frame to a Parquet file.
TABLE_KINDS = frozenset({"python", "pandas", "parquet"})
# The gate also writes the version's HTML report.
GATE_KINDS = TABLE_KINDS | {"html"}
# The tag naming the project on every run, whatever launched it (the CLI, a sensor, the UI,
# a backfill): the runs list shows run tags, so two projects' runs are told apart there.
PROJECT_TAG = "oloproof/project"
# Arrow's types in the words Dagster's Columns view shows.
COLUMN_TYPES = {pa.string(): "string", pa.int64(): "int", pa.float64(): "float", pa.bool_(): "bool"}
VERSION_COMPARISON_SCHEMA = pa.schema(
    [("base_version", tables.TEXT), ("candidate_version", tables.TEXT), *tables.model_schema(CriterionComparison)]
)


def column_schema(schema: pa.Schema) -> TableSchema:
    return TableSchema(columns=[TableColumn(name=field.name, type=COLUMN_TYPES.get(field.type, str(field.type))) for field in schema])


def table_schema(name: str) -> pa.Schema:
    """The columns the asset `name` stores."""
    return VERSION_COMPARISON_SCHEMA if name == "version_comparison" else tables.TABLE_SCHEMAS[name]


def asset_conventions(project: Project, name: str) -> dict[str, Any]:
    """The `@asset` keywords that make the table `name` read as Dagster's own assets do."""
    settings = project.config.dagster
    return {
        "kinds": set(GATE_KINDS if name == "gate" else TABLE_KINDS),
        "owners": list(settings.owners),
        "tags": dict(settings.tags),
        "metadata": {"dagster/column_schema": column_schema(table_schema(name))},
    }


def run_tags(project: Project) -> dict[str, str]:
    """Tags every run of the project's jobs carries."""
    return {PROJECT_TAG: project.dagster_name}
