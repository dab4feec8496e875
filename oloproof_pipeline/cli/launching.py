"""What surrounds a launched run in the terminal: a live progress line, stdout kept clean for
`--json`, and a one-line error when the Dagster instance cannot be written."""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from ..model.outcomes import EXIT_INCOMPLETE, EXIT_USAGE
from ..store.journal import Journal
from .options import CommandFailed
from .render import console


def failed_launch_exit_code(launched) -> int:
    """A launched run (`defs.launch.EvaluationRun`) that failed: 2 when every failure was a
    project's file or system found wrong mid-run (as it would be before the launch), else 5."""
    return EXIT_USAGE if launched.configuration_error else EXIT_INCOMPLETE


@contextmanager
def instance_writes(project_dir: Path) -> Iterator[None]:
    """Dagster's instance is SQLite: a full disk or a read-only folder surfaces as a database
    error with no path, so name the instance's folder."""
    try:
        yield
    except Exception as error:
        cause = getattr(error, "orig", error)  # SQLAlchemy wraps the sqlite3 error
        if not isinstance(cause, sqlite3.Error):
            raise
        from ..defs.instance import instance_home  # Dagster: only a launch needs it (imported by then)

        home = instance_home(project_dir.resolve())
        raise CommandFailed(
            f"{home}: Dagster's instance database cannot be written ({cause}); check free space and write permission",
            EXIT_INCOMPLETE,
        ) from None


@contextmanager
def stdout_to_stderr(*, enabled: bool) -> Iterator[None]:
    """Everything written to stdout goes to stderr meanwhile, at the file-descriptor level, so
    a system under test that prints, Dask's workers and Dagster cannot spoil `--json`."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def journal_line_count(project_root: Path, table: str, version: str) -> int:
    return sum(1 for _ in Journal.for_partition(project_root, table, version).rows())


@contextmanager
def journal_progress(project_root: Path, version: str, *, enabled: bool = True) -> Iterator[None]:
    """A live count of cases recorded and replayed, read from the journals the run appends
    to as each case finishes (only on a terminal: logs and pipes get the final table)."""
    if not (enabled and console.is_terminal):
        yield
        return
    tables = ("recorded_runs", "fault_replays")
    start = {table: journal_line_count(project_root, table, version) for table in tables}
    finished = threading.Event()
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task(f"evaluating {version}")

        def poll() -> None:
            while not finished.wait(0.25):
                counts = {}
                for table in tables:
                    lines = journal_line_count(project_root, table, version)
                    start[table] = min(start[table], lines)  # `--fresh` empties the journal first
                    counts[table] = lines - start[table]
                bar.update(task, description=f"evaluating {version}: recorded {counts['recorded_runs']} cases, "
                           f"replayed {counts['fault_replays']}")

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        try:
            yield
        finally:
            finished.set()
            poller.join()
