"""What many test files share: the CLI run as a user runs it (a subprocess) or in-process (for
errors found before anything runs), a tiny stateful system, and copies of an example project."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "example_project" / "stateful_agent"
OLOPROOF = str(Path(sys.executable).parent / "oloproof-pipeline")

# A system with a world to reset and snapshot, that marks it done and answers `answer`.
TINY_STATEFUL_APP = """
import copy


class System:
    def __init__(self):
        self.state = {}

    def reset(self, state):
        self.state = state

    def snapshot(self):
        return copy.deepcopy(self.state)

    def __call__(self, request):
        self.state["done"] = True
        return {"answer": "ANSWER"}
"""


def tiny_stateful_app(answer: str = "ok") -> str:
    return TINY_STATEFUL_APP.replace("ANSWER", answer)


def cli_environment(columns: int | None = None) -> dict[str, str]:
    """The test's environment without DAGSTER_HOME (each project keeps its own instance), and
    COLUMNS only when the test sets a terminal width."""
    environment = {key: value for key, value in os.environ.items() if key not in ("DAGSTER_HOME", "COLUMNS")}
    if columns:
        environment["COLUMNS"] = str(columns)
    return environment


def oloproof(*args: str, cwd: Path, columns: int | None = None, preexec_fn=None,
             timeout: float = 300) -> subprocess.CompletedProcess:
    """The installed command, run in `cwd` as a user would."""
    return subprocess.run([OLOPROOF, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=cli_environment(columns), preexec_fn=preexec_fn)


def oloproof_in_process(*args: str, cwd: Path, columns: int | None = None) -> subprocess.CompletedProcess:
    """The command's entry point (`main`) called in this process, its stdout and stderr kept
    apart and its exit code caught: for failures found before anything is recorded (a file
    that does not load, a usage error, a stored table that cannot be read), which need no
    second Python. Never for a command that imports the project's system or starts Dagster.
    `columns` sets $COLUMNS, the width piped output is laid out to (none: not wrapped)."""
    from typer.testing import CliRunner

    from oloproof_pipeline.cli import main

    evidence_log = logging.getLogger("oloproof_pipeline")  # main() adds its warning handler to it
    handlers, propagate = list(evidence_log.handlers), evidence_log.propagate
    argv, folder = sys.argv, os.getcwd()
    code: int | str | None = 0
    with CliRunner().isolation(env={"DAGSTER_HOME": None, "COLUMNS": str(columns) if columns else None}) as (stdout, stderr, _):
        sys.argv = [OLOPROOF, *args]
        os.chdir(cwd)
        try:
            main()
        except SystemExit as exit_:
            code = exit_.code
        finally:
            sys.argv = argv
            os.chdir(folder)
            evidence_log.handlers[:] = handlers
            evidence_log.propagate = propagate
            sys.stdout.flush()
            sys.stderr.flush()
        out, err = stdout.getvalue().decode(), stderr.getvalue().decode()
    returncode = code if isinstance(code, int) else (0 if code is None else 1)
    return subprocess.CompletedProcess([OLOPROOF, *args], returncode, out, err)


def copy_project(source: Path, target: Path, *, with_store: bool = False) -> Path:
    """A copy of a project folder; its .oloproof store (tables, journal, Dagster instance) comes
    along only when asked."""
    ignored = ("__pycache__",) if with_store else (".oloproof", "__pycache__")
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(*ignored))
    return target


def watch_reads(monkeypatch, watched) -> tuple[list[str], list[int]]:
    """The columns read whole, and the row groups read, of the stored tables `watched` picks
    (a function of the table): what a stage held whole, and what a group at a time."""
    from oloproof_pipeline.store.stored import StoredTable

    read_whole: list[str] = []
    groups_read: list[int] = []
    read_columns, row_groups = StoredTable._read_columns, StoredTable.row_groups

    def noted_columns(table, names):
        if watched(table):
            read_whole.extend(names)
        return read_columns(table, names)

    def noted_groups(table):
        found = row_groups(table)
        if watched(table):
            read = found.read
            found.read = lambda group, names: groups_read.append(group) or read(group, names)
        return found

    monkeypatch.setattr(StoredTable, "_read_columns", noted_columns)
    monkeypatch.setattr(StoredTable, "row_groups", noted_groups)
    return read_whole, groups_read
