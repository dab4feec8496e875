"""Journals of finished work and the locks that keep two runs off one sandbox."""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from .layout import journal_path, sandbox_lock_path


class Journal:
    """An append-only JSON-lines file of finished work (one line per case), flushed and
    synced as each case finishes, so a run killed mid-way loses nothing already done."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def for_partition(cls, project_root: Path, table: str, partition: str) -> "Journal":
        return cls(journal_path(project_root, table, partition))

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
    return file_lock(sandbox_lock_path(project_root))
