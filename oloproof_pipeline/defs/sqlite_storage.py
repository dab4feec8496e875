"""Dagster's SQLite storages as the CLI's runs use them: the same files and tables, made and
opened for less.

Dagster's own SQLite event log opens a new engine for every read and write and closes it
after (closing the last connection to a WAL database checkpoints it), syncs every event's
commit to disk, and makes a run's new database by reading all of Dagster's migration scripts
twice (checked, then stamped); each of its three storages reads them again whenever an
instance is opened. A run of the small example stores about a hundred events and reads as
many: all that was a fifth of it. Here the event log keeps one engine per database (the run's
own and the cross-run index), a few at most, synced to disk at checkpoints rather than at
each event, and starts a run's database as a copy of an empty one Dagster made; and no storage
reads a migration script to learn that its database is already stamped. Otherwise they are
Dagster's, and `dagster dev` reads and writes the same files with its own.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections import OrderedDict
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Iterator

from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME, SqliteEventLogStorage
from dagster._core.storage.sql import create_engine
from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage
from dagster._core.storage.schedules.sqlite.sqlite_schedule_storage import SqliteScheduleStorage
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS, create_db_conn_string
from dagster.version import __version__ as dagster_version
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

# Engines kept open: a run touches its own database and the index; a long-lived process
# reading many runs keeps only the last few open.
KEPT_ENGINES = 4


def stamped(database: Path) -> bool:
    """A Dagster SQLite file that exists and carries its migration stamp."""
    if not database.is_file():
        return False
    try:
        with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as connection:
            return connection.execute("SELECT version_num FROM alembic_version").fetchone() is not None
    except sqlite3.Error:  # no stamp table yet, or not a database Dagster made
        return False


def stamped_or_made(storage: type, inst_data, config_value, database: str):
    """`storage` over `<base_dir>/<database>.db` opened as it is once stamped, else made as
    Dagster makes it (`from_local`: checked, created, stamped)."""
    base_dir = config_value["base_dir"]
    if stamped(Path(base_dir) / f"{database}.db"):
        return storage(create_db_conn_string(base_dir, database), inst_data)
    return storage.from_local(inst_data=inst_data, **config_value)


class StampedSqliteRunStorage(SqliteRunStorage):
    """Dagster's SQLite run storage, opened as it is once stamped, with one engine kept for
    its life: Dagster's makes a new engine for every read and write (thirty and more a run:
    the run, its tags, its status), and closing its only connection checkpoints the database
    each time."""

    def __init__(self, conn_string: str, inst_data=None):
        super().__init__(conn_string, inst_data)
        self._kept_engine: Engine | None = None

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> "StampedSqliteRunStorage":
        return stamped_or_made(cls, inst_data, config_value, "runs")

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        if self._kept_engine is None:
            self._kept_engine = create_engine(self._conn_string)
        with self._kept_engine.connect() as connection:
            with connection.begin():
                yield connection

    def dispose(self) -> None:
        if self._kept_engine is not None:
            self._kept_engine.dispose()
            self._kept_engine = None
        super().dispose()


class StampedSqliteScheduleStorage(SqliteScheduleStorage):
    """Dagster's SQLite schedule storage, opened as it is once stamped."""

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> "StampedSqliteScheduleStorage":
        return stamped_or_made(cls, inst_data, config_value, "schedules")


def synced_at_checkpoints(connection, _record) -> None:
    """A write-ahead-logged database synced to disk at its checkpoints, not at every commit:
    still never corrupted, and nothing lost when the process dies; only a power cut may lose
    the last events written. A run stores a hundred events and more, each its own commit."""
    connection.execute("PRAGMA synchronous=NORMAL")


class KeptOpenSqliteEventLogStorage(SqliteEventLogStorage):
    """Dagster's SQLite event log with each database's engine kept between uses."""

    def __init__(self, base_dir: str, inst_data=None):
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._tables_present: set[str] = set()
        super().__init__(base_dir, inst_data=inst_data)

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> "KeptOpenSqliteEventLogStorage":
        return cls(inst_data=inst_data, **config_value)

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        with self._db_lock:
            with self._engine(shard).connect() as connection:
                with connection.begin():
                    yield connection

    def has_table(self, table_name: str) -> bool:
        """Dagster asks before most asset, partition and check writes (about sixty times a small
        run), each time through a new engine; a table once there stays, so that is asked once."""
        if table_name not in self._tables_present and super().has_table(table_name):
            self._tables_present.add(table_name)
        return table_name in self._tables_present

    def _engine(self, shard: str) -> Engine:
        engine = self._engines.pop(shard, None)
        if engine is None:
            if shard != INDEX_SHARD_NAME and shard not in self._initialized_dbs:
                self._start_run_database(Path(self.path_for_shard(shard)))
            engine = create_engine(self.conn_string_for_shard(shard), connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS})
            event.listen(engine, "connect", synced_at_checkpoints)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
        self._engines[shard] = engine  # the most recently used last
        while len(self._engines) > KEPT_ENGINES:
            self._engines.popitem(last=False)[1].dispose()
        return engine

    def _start_run_database(self, path: Path) -> None:
        """A new run's database as a copy of an empty one Dagster made (tables, write-ahead log,
        migration stamp), kept beside the run databases per Dagster version: making one reads
        all of Dagster's migration scripts twice, on every run."""
        if path.exists():
            return
        template = self.empty_run_database()
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        shutil.copyfile(template, partial)
        try:
            os.link(partial, path)  # never over a database another process started meanwhile
        except FileExistsError:
            pass
        finally:
            partial.unlink()

    def empty_run_database(self) -> Path:
        template = Path(self._base_dir).parent / f".oloproof-empty-run-{dagster_version}.db"
        if not template.exists():
            partial = template.with_name(f"{template.name}.{os.getpid()}.partial")
            engine = create_engine(f"sqlite:///{partial}", connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS})
            super()._initdb(engine)
            engine.dispose()
            os.replace(partial, template)
        return template

    def _initdb(self, engine: Engine, for_index_shard: bool = False) -> None:
        """Dagster's, for a database not yet stamped (which Dagster's own check leaves as it is
        once stamped: the index, every run after the first)."""
        if not stamped(Path(engine.url.database)):
            super()._initdb(engine, for_index_shard=for_index_shard)

    def _dispose_engines(self) -> None:
        while self._engines:
            self._engines.popitem()[1].dispose()

    def wipe(self) -> None:
        self._dispose_engines()  # the files are deleted: no connection may outlive them
        super().wipe()

    def dispose(self) -> None:
        self._dispose_engines()
        super().dispose()
