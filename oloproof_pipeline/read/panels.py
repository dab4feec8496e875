"""Each case's panel as last rendered, kept by a key of everything it shows and of the code
that renders it, so a report written again renders only the panels whose case changed and
copies the rest: a run with one case added renders that case's panels, not the suite's.

A panel is a pure function of its case's stored values (the case, its recording, its verdicts,
its fault replays, a copy's source recording), the runs its verdict rows link to, and the
report's code (`read/`, `decide/`, `model/`, templates included) with the Jinja2 release. It is
kept with its run links left as holes (`markup.RUN_LINK_HOLE`), filled in as the report is
written, so its key is a digest of all the rest, taken from the stored text without decoding
anything: a kept panel is always one the current code would render, and a new version whose
case was recorded and judged as before (the agent developer's loop: bump the version, run
again) reuses the panel the last version's report kept. One SQLite file per version
(`store.layout.report_panels_path`) holds the panels of the report last written, no others.
It is a cache: one that cannot be read is made again, one that cannot be written costs the
next report its reuse (a warning says so), never the report.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from ..model.fingerprints import ROW_KEY_CHARACTERS, producer_code_version, row_key_tail
from ..store.layout import report_panels_path

log = logging.getLogger(__name__)

# v2: kept without the runs it links to; v3: each table's share digested as streamed; v4: the
# shares digested from the tables' Arrow buffers (`arrow_bytes`) and joined as bytes.
PANEL_KEY_TAG = "report_panel/v4"
# Panels looked up, and panels rendered since the last write, this many at a time.
PANELS_AT_ONCE = 256


class PanelKeys:
    """The keys cases' panels are kept under (`key`): a digest of the code that renders them
    and the Jinja2 release, made once, then of the digests of the stored values each shows (as
    `report_scan.ReportScan` takes them), as `row_key` is (128 bits, hex)."""

    def __init__(self) -> None:
        self._code = hashlib.sha256(row_key_tail(PANEL_KEY_TAG, producer_code_version("report"), jinja2.__version__))

    def key(self, shown: bytes | bytearray) -> str:
        hashed = self._code.copy()
        hashed.update(shown)
        return hashed.hexdigest()[:ROW_KEY_CHARACTERS]


@dataclass
class PanelStore:
    """The version's kept panels (`kept`), the ones rendered now (`put`, written a batch at a
    time), and, once the report is written, only this report's panels kept (`finish`, which
    commits it all at once)."""

    path: Path
    rendered: int = 0
    reused: int = 0
    _connection: sqlite3.Connection | None = field(default=None, repr=False)
    _pending: list[tuple[str, str, str]] = field(default_factory=list, repr=False)
    _shown: list[str] = field(default_factory=list, repr=False)
    _broken: bool = field(default=False, repr=False)
    _other: sqlite3.Connection | None = field(default=None, repr=False)
    _other_looked_up: bool = field(default=False, repr=False)

    @classmethod
    def of_version(cls, project_root: Path, version: str) -> "PanelStore":
        return cls(report_panels_path(project_root, version))

    def _open(self) -> sqlite3.Connection | None:
        if self._connection is None and not self._broken:
            try:
                self._connection = self._connect()
            except sqlite3.OperationalError as error:  # locked, or a folder that cannot be written
                self._give_up(error)
            except sqlite3.DatabaseError:  # not a database any more: made again
                with suppress(OSError):
                    self.path.unlink(missing_ok=True)
                try:
                    self._connection = self._connect()
                except (sqlite3.Error, OSError) as error:
                    self._give_up(error)
            except OSError as error:
                self._give_up(error)
        return self._connection

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path, timeout=30)
        try:
            # A new file's pages hold a panel (some 4 KB) each, not spilled over two: its panels are
            # written and read in two thirds of the time (no effect on a file already made).
            connection.execute("PRAGMA page_size = 16384")
            connection.execute("CREATE TABLE IF NOT EXISTS panels (key TEXT PRIMARY KEY, case_id TEXT, html TEXT)")
            connection.execute("SELECT key FROM panels LIMIT 1").fetchall()
        except sqlite3.Error:
            connection.close()
            raise
        return connection

    def _give_up(self, error: BaseException) -> None:
        """The panels are rendered from here on, none kept; a file that is no database (any
        more) is removed, so the next report makes it again."""
        log.warning(f"{self.path}: the report's case panels cannot be kept ({error}); they are rendered")
        self._broken = True
        if self._connection is not None:
            with suppress(sqlite3.Error):
                self._connection.close()
        self._connection = None
        if isinstance(error, sqlite3.DatabaseError) and not isinstance(error, sqlite3.OperationalError):
            with suppress(OSError):
                self.path.unlink(missing_ok=True)

    def kept(self, keys: list[str]) -> dict[str, str]:
        """key -> panel, of those of `keys` that are kept (the others are to be rendered): the
        version's own, else those of the version whose report was written last (kept here too)."""
        self._shown += keys
        found = self._kept_here(keys)
        missing = [key for key in keys if key not in found]
        if missing:
            copied = self._kept_by_other_version(missing)
            found.update((key, html) for key, _, html in copied)
            if copied and not self._broken:
                self._pending += copied
                if len(self._pending) >= PANELS_AT_ONCE:
                    self._write()
        self.reused += len(found)
        return found

    def _kept_here(self, keys: list[str]) -> dict[str, str]:
        connection = self._open()
        if connection is None or not keys:
            return {}
        marks = ", ".join("?" * len(keys))
        try:
            return dict(connection.execute(f"SELECT key, html FROM panels WHERE key IN ({marks})", keys).fetchall())
        except sqlite3.Error as error:
            self._give_up(error)
            return {}

    def _kept_by_other_version(self, keys: list[str]) -> list[tuple[str, str, str]]:
        """(key, case id, panel) of those of `keys` the last other version's report kept: a new
        version whose cases were recorded and judged as before renders none of them again.
        Read only, and only a help: a file that cannot be read is passed over."""
        if not self._other_looked_up:
            self._other_looked_up = True
            self._other = self._open_other()
        if self._other is None:
            return []
        marks = ", ".join("?" * len(keys))
        try:
            return self._other.execute(f"SELECT key, case_id, html FROM panels WHERE key IN ({marks})", keys).fetchall()
        except sqlite3.Error as error:
            log.debug(f"the report's case panels of another version cannot be read ({error})")
            self._close_other()
            return []

    def _open_other(self) -> sqlite3.Connection | None:
        written = []
        for path in self.path.parent.glob("*.sqlite"):
            with suppress(OSError):
                if path != self.path:
                    written.append((path.stat().st_mtime, path))
        if not written:
            return None
        try:
            return sqlite3.connect(f"{max(written)[1].as_uri()}?mode=ro", uri=True, timeout=5)
        except sqlite3.Error:
            return None

    def _close_other(self) -> None:
        if self._other is not None:
            with suppress(sqlite3.Error):
                self._other.close()
        self._other = None

    def put(self, key: str, case_id: str, html: str) -> None:
        """A panel just rendered (none was kept under its key)."""
        self.rendered += 1
        if not self._broken:
            self._pending.append((key, case_id, html))
            if len(self._pending) >= PANELS_AT_ONCE:
                self._write()

    def _write(self) -> None:
        connection, pending, self._pending = self._open(), self._pending, []
        if connection is None or not pending:
            return
        try:  # committed with the report (`finish`): one commit, not one per batch
            connection.executemany("INSERT OR REPLACE INTO panels (key, case_id, html) VALUES (?, ?, ?)", pending)
        except sqlite3.Error as error:
            self._give_up(error)

    def finish(self) -> None:
        """The report is written: its panels kept, every other one dropped, in the one commit
        (each commit waits for the disk; a report cut short leaves the panels as they were)."""
        self._write()
        connection = self._open()
        if connection is None:
            return
        try:
            with connection:
                connection.execute("CREATE TEMP TABLE IF NOT EXISTS shown (key TEXT PRIMARY KEY)")
                connection.execute("DELETE FROM shown")
                connection.executemany("INSERT OR IGNORE INTO shown (key) VALUES (?)", ((key,) for key in self._shown))
                connection.execute("DELETE FROM panels WHERE key NOT IN (SELECT key FROM shown)")
        except sqlite3.Error as error:
            self._give_up(error)

    def close(self) -> None:
        self._close_other()
        if self._connection is not None:
            with suppress(sqlite3.Error):
                self._connection.close()
            self._connection = None

