"""Where the pipeline keeps what it writes: everything lives under the project's `.oloproof/`.

The Dagster IO manager, the core and the CLI all go through these paths, so a table written
by a run is found by `oloproof gate`, by a later incremental run, and by DuckDB alike.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pandas as pd

# Everything the pipeline writes lives here, inside the project; never read as input.
OUTPUT_DIR = ".oloproof"


def output_dir(project_root: Path) -> Path:
    return Path(project_root) / OUTPUT_DIR


def tables_dir(project_root: Path) -> Path:
    return output_dir(project_root) / "tables"


def table_path(project_root: Path, table: str, partition: str | None = None) -> Path:
    """`tables/<table>.parquet` for unpartitioned tables, `tables/<table>/<version>.parquet` otherwise."""
    base = tables_dir(project_root) / table
    return base.with_suffix(".parquet") if partition is None else base / f"{partition}.parquet"


def read_table(project_root: Path, table: str, partition: str | None = None) -> pd.DataFrame | None:
    path = table_path(project_root, table, partition)
    return read_table_file(path) if path.exists() else None


def read_table_file(path: Path) -> pd.DataFrame:
    return pd.read_parquet(path)


def write_table_file(path: Path, frame: pd.DataFrame) -> None:
    """Write next to the target and rename, so a reader never sees half a file; the name is
    the writer's own, as two runs of one version may write the same table at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{uuid.uuid4().hex}.partial")
    frame.to_parquet(partial, index=False)
    partial.rename(path)


def stored_partitions(project_root: Path, table: str) -> list[str]:
    folder = tables_dir(project_root) / table
    return sorted(path.stem for path in folder.glob("*.parquet")) if folder.is_dir() else []


def dagster_home(project_root: Path) -> Path:
    return output_dir(project_root) / "dagster_home"


def instance_pin_path(project_root: Path) -> Path:
    """Names the Dagster home that holds the project's run history (see `defs/instance.py`)."""
    return output_dir(project_root) / "dagster_instance"


def reports_dir(project_root: Path) -> Path:
    return output_dir(project_root) / "reports"


def journal_path(project_root: Path, table: str, partition: str) -> Path:
    return output_dir(project_root) / "journal" / table / f"{partition}.jsonl"


def sandbox_lock_path(project_root: Path) -> Path:
    return output_dir(project_root) / "sandbox.lock"
