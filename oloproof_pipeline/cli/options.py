"""What the commands share: the Typer app, their common options, the failure they raise, and
the version a reading command reads back (never asked of the system: nothing is imported)."""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Optional

import typer

from ..model.config import Project, version_problem
from ..model.outcomes import EXIT_INCOMPLETE, EXIT_USAGE
from ..project import load_project
from ..read.results import VersionResults, load_results
from ..store.layout import stored_partitions, table_path

# Help as click writes it: typer's rich panels label every flag `<bool>` (`--help <bool>`) and
# pad each line to the terminal's width.
PLAIN_HELP = {"rich_markup_mode": None}

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    **PLAIN_HELP,
    help="Evaluate a tool-using agent by the world it leaves behind; gate its release.",
)


class CommandFailed(Exception):
    """A failure already explained to the user; carries the exit code."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def checked_version(version: Optional[str]) -> Optional[str]:
    """A version names files under .oloproof/: anything but a partition key is a usage error."""
    problem = None if version is None else version_problem(version)
    if problem is not None:
        raise typer.BadParameter(problem)
    return version


PROJECT_OPTION = typer.Option(Path("."), "--project", "-p", help="The evaluation project folder.")
VERSION_OPTION = typer.Option(
    None, "--version", "-v", help="System version (default: system.version in oloproof.yaml, else the last one stored).",
    callback=checked_version,
)
# `oloproof run`'s overrides of oloproof.yaml for one run (model/overrides.py).
SET_OPTION = typer.Option(
    [], "--set", metavar="KEY=VALUE",
    help="Override one key of oloproof.yaml for this run, validated as the file is (repeatable), "
    "e.g. --set system.model.name=gpt-x.",
)
RUN_VERSION_OPTION = typer.Option(
    None, "--version", "-v", help="Evaluate as this system version: --set system.version=V.", callback=checked_version,
)


def run_settings(settings: list[str], version: Optional[str]) -> tuple[str, ...]:
    """The run's overrides: each --set as given, then --version as system.version."""
    # Quoted, so `--version 2.0` is the text "2.0", not a YAML number.
    return (*settings, *([f"system.version={json.dumps(version)}"] if version is not None else []))


JSON_OPTION = typer.Option(
    False, "--json", help="Print one JSON document on stdout (the gate, each rule, the run); nothing else goes there."
)


def stored_version(project_dir: Path, version: str | None, table: str, loaded: Project | None = None) -> str:
    """The version to read back: the one asked for, which must be stored (else a usage error
    naming the stored ones), or by default the one oloproof.yaml declares, which may not
    have been run yet, else the one whose `table` was written last. `loaded` saves reading
    the project's files again."""
    root = project_dir.resolve()
    stored = stored_partitions(root, table)
    if version is not None:
        if version not in stored:
            raise CommandFailed(f"no {table} stored for version {version!r}{did_you_mean(version, stored, 'stored')}", EXIT_USAGE)
        return version
    declared = (loaded or load_project(root)).config.system.version
    if declared is None:
        if not stored:
            raise CommandFailed(f"no {table} stored for any version; run `oloproof run` first", EXIT_INCOMPLETE)
        return max(stored, key=lambda name: (table_path(root, table, name).stat().st_mtime_ns, name))
    if declared not in stored:
        raise CommandFailed(
            f"no {table} stored for version {declared!r}, the current one (stored: {', '.join(stored) or 'none'}); "
            "run `oloproof run` first",
            EXIT_INCOMPLETE,
        )
    return declared


def stored_results(project_dir: Path, version: str | None) -> tuple[Project, VersionResults]:
    """The project, and the stored results of the version asked for (or the default one)."""
    root = project_dir.resolve()
    loaded = load_project(root)
    return loaded, load_results(root, stored_version(root, version, "verdicts", loaded))


def did_you_mean(name: str, known: list[str], what: str) -> str:
    """` (did you mean a, b? stored: ...)`: the nearest names first, then a few of all of them."""
    nearest = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    listed = ", ".join(known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10 else "") if known else "none"
    return f" ({'did you mean ' + ', '.join(nearest) + '? ' if nearest else ''}{what}: {listed})"


def check_writable_under(path: Path, command: str) -> None:
    """Nothing can be written under a file: say so before trying (`export -o notes.txt/x.jsonl`)."""
    blocking = next((parent for parent in reversed(path.parents) if parent.exists() and not parent.is_dir()), None)
    if blocking is not None:
        raise CommandFailed(f"{command}: cannot write {path}: {blocking} is a file, not a folder", EXIT_USAGE)


def check_output_file(path: Path | None, command: str) -> None:
    """`-o` names a file to write: not a folder, and not under a file."""
    if path is None:
        return
    if path.is_dir():
        raise CommandFailed(f"{command} -o {path}: is a folder; name a file in it, e.g. {path / 'out'}", EXIT_USAGE)
    check_writable_under(path, command)
