"""Journals of finished work and the locks that keep two runs off one sandbox."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from contextlib import contextmanager
from functools import lru_cache
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar

from pydantic import BaseModel, ValidationError

from .layout import StorageWriteError, journal_path, sandbox_lock_path
from .tables import REPEATED_TEXT

# Warnings about stored evidence (a skipped journal line, a table rebuilt from its journal):
# the CLI prints them as `warning:` lines; under Dagster they reach the step's log.
log = logging.getLogger("oloproof_pipeline")

Record = TypeVar("Record", bound=BaseModel)


@dataclass
class JournalContents(Generic[Record]):
    """The journal's valid records, and a `file:line: why` for each line that was not one."""

    records: list[Record] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


@lru_cache(maxsize=None)
def _member_name(name: str) -> str:
    return json.dumps(name) + ":"


# One encoder for every line: `json.dumps` with an option builds a new one each call.
_LINE = json.JSONEncoder(ensure_ascii=False)


@lru_cache(maxsize=16)
def _text_json(text: str) -> str:
    """A text the same on nearly every row (REPEATED_TEXT: the code a recording was made
    with, a few KiB) as JSON, made once rather than escaped again on every line."""
    return json.dumps(text, ensure_ascii=False)


class Journal:
    """An append-only JSON-lines file of finished work (one line per case), flushed and
    synced as each case finishes, so a run killed mid-way loses nothing already done."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def for_partition(cls, project_root: Path, table: str, partition: str) -> "Journal":
        return cls(journal_path(project_root, table, partition))

    def append(self, row: dict[str, Any]) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a+b") as handle:
                # A line cut short by a kill has no newline: end it, or this line would join it.
                handle.seek(0, os.SEEK_END)
                if handle.tell() and not self._ends_with_newline(handle):
                    handle.write(b"\n")
                handle.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as error:
            raise StorageWriteError(self.path, error) from None

    @staticmethod
    def line_text(row: dict[str, Any], json_text: Iterable[str]) -> str:
        """A row as its journal line, where the columns `json_text` hold JSON text already (a
        table row's nested values, store/tables.py): written as the JSON they are, not encoded
        again, so a finished row is encoded once for its table and its journal."""
        nested = [name for name in json_text if name in row]
        repeated = [name for name in REPEATED_TEXT if isinstance(row.get(name), str)]
        plain = _LINE.encode({name: value for name, value in row.items() if name not in nested and name not in repeated})
        members = ",".join(
            [f"{_member_name(name)}{'null' if row[name] is None else row[name]}" for name in nested]
            + [f"{_member_name(name)}{_text_json(row[name])}" for name in repeated]
        )
        if not members:
            return plain
        return plain[:-1] + ("," if plain != "{}" else "") + members + "}"

    @staticmethod
    def _ends_with_newline(handle) -> bool:
        handle.seek(-1, os.SEEK_END)
        last = handle.read(1)
        handle.seek(0, os.SEEK_END)
        return last == b"\n"

    @contextmanager
    def appending(self, sync_every_s: float = 1.0) -> Iterator[Callable[[dict[str, Any]], None]]:
        """`append` for many lines (each a row, or its `line_text`) through one open file: each line is flushed as it is
        written, so a killed run keeps it (the kernel holds it), and synced to disk at most
        every `sync_every_s` and at the end: a sync per line would cost more than a fast
        system's case (only a machine losing power can lose the last second's lines)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle = self.path.open("a+b")
        except OSError as error:
            raise StorageWriteError(self.path, error) from None
        with handle:
            synced = time.monotonic()
            handle.seek(0, os.SEEK_END)
            ended = not handle.tell() or self._ends_with_newline(handle)

            def write(row: dict[str, Any] | str) -> None:
                nonlocal synced, ended
                try:
                    if not ended:
                        handle.write(b"\n")  # a line a killed run cut short: end it, or this one would join it
                        ended = True
                    text = row if isinstance(row, str) else json.dumps(row, ensure_ascii=False)
                    handle.write((text + "\n").encode("utf-8"))
                    handle.flush()
                    if time.monotonic() - synced >= sync_every_s:
                        os.fsync(handle.fileno())
                        synced = time.monotonic()
                except OSError as error:
                    raise StorageWriteError(self.path, error) from None

            try:
                yield write
            finally:
                try:
                    handle.flush()
                    os.fsync(handle.fileno())
                except OSError as error:
                    raise StorageWriteError(self.path, error) from None

    def rows(self) -> Iterator[dict[str, Any]]:
        """Every complete line that is a JSON object (for counting progress)."""
        for _, row, problem in self._numbered_rows():
            if problem is None and isinstance(row, dict):
                yield row

    def _numbered_rows(self) -> Iterator[tuple[int, Any, str | None]]:
        """(line number, parsed JSON, None) or (line number, None, why it is not JSON) per non-blank line."""
        if not self.path.exists():
            return
        with self.path.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                if not raw.strip():
                    continue
                try:
                    yield number, json.loads(raw.decode("utf-8")), None
                except (UnicodeDecodeError, RecursionError, ValueError) as error:
                    yield number, None, f"not JSON ({type(error).__name__})"

    def read(self, model: type[Record]) -> JournalContents[Record]:
        """Every line that is a `model`; any other line (cut short by a kill, written by
        something else) is skipped and named, so one foreign line never costs the rest."""
        contents: JournalContents[Record] = JournalContents()
        for _, record, problem in self._checked(model):
            if problem is None:
                contents.records.append(record)
            else:
                contents.skipped.append(problem)
        return contents

    def _checked(self, model: type[Record]) -> Iterator[tuple[dict[str, Any] | None, Record | None, str | None]]:
        """(line, its `model`, None) per line whose fields of `model` make one (keys beside them
        are kept in the line), else (None, None, `file:line: why`)."""
        fields = model.model_fields
        for number, row, problem in self._numbered_rows():
            if problem is None:
                own = {key: value for key, value in row.items() if key in fields} if isinstance(row, dict) else row
                try:
                    yield row, model.model_validate(own), None
                    continue
                except ValidationError as error:
                    first = error.errors()[0]
                    where = ".".join(str(part) for part in first["loc"])
                    problem = f"not a {model.__name__} line ({where + ': ' if where else ''}{first['msg']})"
            yield None, None, f"{self.path}:{number}: {problem}; line skipped, the rest of the journal is used"

    def records(self, model: type[Record]) -> list[Record]:
        """The valid records; each skipped line is logged as a warning naming file and line."""
        contents = self.read(model)
        for skipped in contents.skipped:
            log.warning(skipped)
        return contents.records

    def lines_of(self, model: type[Record]) -> Iterator[dict[str, Any]]:
        """The lines that are a `model`, as written (with any columns the table keeps beside the
        model's, such as the code that made a recording), one at a time as read: a journal of a
        long run cut short is tens of thousands of lines, never all held as values at once.
        Each other line is logged as a warning."""
        for row, _, problem in self._checked(model):
            if problem is None:
                yield row
            else:
                log.warning(problem)

    def clear(self) -> None:
        try:
            self.path.unlink(missing_ok=True)
        except OSError as error:
            raise StorageWriteError(self.path, error) from None


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
