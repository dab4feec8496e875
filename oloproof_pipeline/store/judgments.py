"""The judgments journal: every judgment a model judge gave, by the digest of what it saw
(`model/judgments.py`), shared by every version of the project.

Appended a line at a time as each judgment arrives (so a run killed mid-way keeps the ones it
paid for) and read back lazily; a judgment already known is never asked for again. One store per
project folder in the process, safe for the judging threads.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from ..model.judgments import JudgmentRecord
from .journal import Journal
from .layout import judgments_path


class JudgmentStore:
    def __init__(self, path: Path):
        self.journal = Journal(path)
        self._lock = threading.Lock()
        self._known: dict[str, JudgmentRecord] = {}
        # The journal's size when last read: a line another process appended since is read on
        # the next miss, not served stale.
        self._read_size = -1
        # One lock per question being asked (see get_or_make).
        self._asking: dict[str, threading.Lock] = {}

    def get(self, key: str) -> JudgmentRecord | None:
        with self._lock:
            if key not in self._known:
                self._reread_if_grown()
            return self._known.get(key)

    def get_or_make(self, key: str, make: Callable[[], JudgmentRecord]) -> tuple[JudgmentRecord, bool]:
        """The judgment stored under `key` (and True), else `make()`'s, stored (and False). Two
        threads with the same question ask it once: the second waits and gets the first's. A
        `make` that raises stores nothing, so the question is asked again later."""
        with self._lock:
            asking = self._asking.setdefault(key, threading.Lock())
        with asking:
            known = self.get(key)
            if known is not None:
                return known, True
            made = make()
            self.put(made)
            return made, False

    def put(self, record: JudgmentRecord) -> None:
        with self._lock:
            self.journal.append(record.model_dump(mode="json"))
            self._known[record.judgment_key] = record

    def _reread_if_grown(self) -> None:
        size = self.journal.path.stat().st_size if self.journal.path.exists() else 0
        if size == self._read_size:
            return
        self._known.update((record.judgment_key, record) for record in self.journal.records(JudgmentRecord))
        self._read_size = size


_stores: dict[Path, JudgmentStore] = {}
_stores_lock = threading.Lock()


def judgment_store(project_root: Path) -> JudgmentStore:
    """This process's store for the project at `project_root`."""
    path = judgments_path(Path(project_root).resolve())
    with _stores_lock:
        if path not in _stores:
            _stores[path] = JudgmentStore(path)
        return _stores[path]
