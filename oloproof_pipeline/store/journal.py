"""Journals of finished work and the locks that keep two runs off one sandbox."""

from __future__ import annotations

import fcntl
import json
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

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

    @contextmanager
    def appending(self, sync_every_s: float = 1.0) -> Iterator[Callable[[dict[str, Any]], None]]:
        """`append` for many lines through one open file: each line is flushed as it is
        written, so a killed run keeps it (the kernel holds it), and synced to disk at most
        every `sync_every_s` and at the end: a sync per line would cost more than a fast
        system's case (only a machine losing power can lose the last second's lines)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            if handle.tell() and not self._ends_with_newline():
                handle.write("\n")  # end a line a killed run cut short, or this one would join it
            synced = time.monotonic()

            def write(row: dict[str, Any]) -> None:
                nonlocal synced
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
                handle.flush()
                if time.monotonic() - synced >= sync_every_s:
                    os.fsync(handle.fileno())
                    synced = time.monotonic()

            try:
                yield write
            finally:
                handle.flush()
                os.fsync(handle.fileno())

    def _ends_with_newline(self) -> bool:
        with self.path.open("rb") as handle:
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) == b"\n"

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
