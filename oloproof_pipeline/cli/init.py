"""`oloproof init`: a new project copied from one of the examples the package ships."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import typer

from ..model.outcomes import EXIT_USAGE
from ..store.layout import OUTPUT_DIR
from .options import CommandFailed, check_writable_under
from .render import say

EXAMPLES_PACKAGE = "oloproof_pipeline.example_project"
# What a new project keeps out of version control: the pipeline's output folder, and the log and
# process-id files the README's recipe for running `dagster dev` in the background writes.
IGNORED = (f"{OUTPUT_DIR}/", "dagster.log", "dagster.pid")


def example_names() -> list[str]:
    root = resources.files(EXAMPLES_PACKAGE)
    return sorted(
        entry.name.replace("_", "-")
        for entry in root.iterdir()
        if entry.is_dir() and entry.joinpath("oloproof.yaml").is_file()
    )


def init(
    directory: Path = typer.Argument(Path("."), help="Where to put the new project."),
    example: str = typer.Option(..., "--example", help="An example's name, or 'list' to name them."),
) -> None:
    """Start a project from one of the bundled examples."""
    names = example_names()
    if example == "list":
        for name in names:
            say(name)
        return
    if example not in names:
        raise CommandFailed(f"no example named {example!r} (examples: {', '.join(names)})", EXIT_USAGE)
    check_new_project_folder(directory)
    source = resources.files(EXAMPLES_PACKAGE).joinpath(example.replace("-", "_"))
    with resources.as_file(source) as source_path:
        shutil.copytree(
            source_path, directory, dirs_exist_ok=True, ignore=shutil.ignore_patterns(OUTPUT_DIR, "__pycache__")
        )
    write_gitignore(directory)
    say(f"Created {directory} from the {example} example. Next: cd {directory} && oloproof run")


def check_new_project_folder(directory: Path) -> None:
    """`init` writes only into a new or empty folder: never over a file or through a broken link."""
    if directory.is_symlink() and not directory.exists():
        raise CommandFailed(f"{directory}: a link to {directory.readlink()}, which does not exist; choose a new folder", EXIT_USAGE)
    if directory.exists() and not directory.is_dir():
        raise CommandFailed(f"{directory}: is a file, not a folder; choose a new folder", EXIT_USAGE)
    if directory.is_dir() and any(directory.iterdir()):
        raise CommandFailed(f"{directory}: folder is not empty; choose a new one", EXIT_USAGE)
    check_writable_under(directory, "init")


def write_gitignore(directory: Path) -> None:
    """Name what the pipeline writes in the project's `.gitignore`: appended to one that exists, never over it."""
    path = directory / ".gitignore"
    existing = path.read_text(encoding="utf-8") if path.is_file() else ""
    present = {line.strip() for line in existing.splitlines()}
    missing = [entry for entry in IGNORED if entry not in present and entry.rstrip("/") not in present]
    if not missing:
        return
    prefix = "\n" if existing and not existing.endswith("\n") else ""
    with path.open("a", encoding="utf-8") as handle:
        handle.write(prefix + "".join(f"{entry}\n" for entry in missing))
