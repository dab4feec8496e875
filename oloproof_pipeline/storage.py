"""Where the pipeline keeps what it writes: everything lives under the project's `.oloproof/`.

The Dagster IO manager and the CLI both go through these paths, so a table written by a
run is found by `oloproof gate`, by a later incremental run, and by DuckDB alike.
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from .project import OUTPUT_DIR


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
    return pd.read_parquet(path) if path.exists() else None


def stored_partitions(project_root: Path, table: str) -> list[str]:
    folder = tables_dir(project_root) / table
    return sorted(path.stem for path in folder.glob("*.parquet")) if folder.is_dir() else []


def dagster_home(project_root: Path) -> Path:
    return output_dir(project_root) / "dagster_home"


def reports_dir(project_root: Path) -> Path:
    return output_dir(project_root) / "reports"


class Journal:
    """An append-only JSON-lines file of finished work (one line per case), flushed and
    synced as each case finishes, so a run killed mid-way loses nothing already done."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def for_partition(cls, project_root: Path, table: str, partition: str) -> "Journal":
        return cls(output_dir(project_root) / "journal" / table / f"{partition}.jsonl")

    def append(self, row: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def rows(self) -> Iterator[dict[str, Any]]:
        """Every complete line; a line cut short by a kill is skipped."""
        if not self.path.exists():
            return
        with self.path.open(encoding="utf-8") as handle:
            for text in handle:
                try:
                    yield json.loads(text)
                except json.JSONDecodeError:
                    continue

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive OS lock on `path`, released when the holder exits or is killed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def sandbox_lock(project_root: Path):
    """Only one process drives a project's sandbox at a time: the CLI, `dagster dev`'s runs
    and a backfill alike. An OS file lock, so a killed run never leaves it held (a Dagster
    pool slot claimed by a killed run stays claimed and would block every later run)."""
    return file_lock(output_dir(project_root) / "sandbox.lock")
