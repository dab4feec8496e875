"""The `oloproof` command: the same Dagster assets, headless, against the project's instance."""

from __future__ import annotations

import shutil
import sys
from importlib import resources
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from .errors import ProjectError
from .gate import (
    EXIT_ALLOW,
    EXIT_BLOCK_FAIL,
    EXIT_BLOCK_INSUFFICIENT,
    EXIT_BLOCK_MANUAL_REVIEW,
    EXIT_PIPELINE_ERROR,
    EXIT_PROJECT_ERROR,
)
from .project import OUTPUT_DIR, load_project
from .storage import read_table, stored_partitions
from .tables import GATE_NESTED, rows_from_frame

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Evaluate a tool-using agent by the world it leaves behind; gate its release.",
)
# Piped output (CI logs, files) gets a wide table instead of rich's 80-column fallback.
console = Console(width=None if sys.stdout.isatty() else 160)
errors = Console(stderr=True, width=None if sys.stderr.isatty() else 200)

PROJECT_OPTION = typer.Option(Path("."), "--project", "-p", help="The evaluation project folder.")


class CommandFailed(Exception):
    """A failure already explained to the user; carries the exit code."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


# -- init ----------------------------------------------------------------------------------


def example_names() -> list[str]:
    root = resources.files("oloproof_pipeline.example_project")
    return sorted(
        entry.name.replace("_", "-")
        for entry in root.iterdir()
        if entry.is_dir() and entry.joinpath("oloproof.yaml").is_file()
    )


@app.command()
def init(
    directory: Path = typer.Argument(Path("."), help="Where to put the new project."),
    example: str = typer.Option(..., "--example", help="An example's name, or 'list' to name them."),
) -> None:
    """Start a project from one of the bundled examples."""
    names = example_names()
    if example == "list":
        for name in names:
            console.print(name)
        return
    if example not in names:
        raise CommandFailed(f"no example named {example!r} (examples: {', '.join(names)})", 2)
    if directory.exists() and any(directory.iterdir()):
        raise CommandFailed(f"{directory}: folder is not empty; choose a new one", 2)
    source = resources.files("oloproof_pipeline.example_project").joinpath(example.replace("-", "_"))
    with resources.as_file(source) as source_path:
        shutil.copytree(
            source_path, directory, dirs_exist_ok=True, ignore=shutil.ignore_patterns(OUTPUT_DIR, "__pycache__")
        )
    console.print(f"Created {directory} from the {example} example. Next: cd {directory} && oloproof run")


# -- run and gate --------------------------------------------------------------------------


@app.command()
def run(
    project: Path = PROJECT_OPTION,
    fresh: bool = typer.Option(False, "--fresh", help="Re-record every case, ignoring stored recordings."),
    verbose: bool = typer.Option(False, "--verbose", help="Show Dagster's log as the run goes."),
) -> None:
    """Record, judge and gate the system's current version; exit with the gate's code."""
    from .defs.launch import run_evaluation

    evaluation = run_evaluation(project, fresh=fresh, log_level="INFO" if verbose else "CRITICAL")
    if evaluation.errors:
        for error in evaluation.errors:
            errors.print(f"[red]error:[/red] {error}", highlight=False)
        raise CommandFailed(f"run {evaluation.run_id} failed", EXIT_PIPELINE_ERROR)
    console.print(f"Dagster run {evaluation.run_id} evaluated version {evaluation.version}.")
    show_gate(project, evaluation.version)


@app.command()
def gate(
    project: Path = PROJECT_OPTION,
    version: Optional[str] = typer.Option(None, "--version", "-v", help="System version (default: the current one)."),
) -> None:
    """Print the stored gate for a version and exit with its code."""
    show_gate(project, version or default_version(project))


def default_version(project_dir: Path) -> str:
    from .system import current_system_version

    return current_system_version(load_project(project_dir))


def show_gate(project_dir: Path, version: str) -> None:
    frame = read_table(project_dir.resolve(), "gate", version)
    if frame is None:
        stored = ", ".join(stored_partitions(project_dir.resolve(), "gate")) or "none"
        raise CommandFailed(
            f"no gate stored for version {version!r} (stored: {stored}); run `oloproof run` first",
            EXIT_PIPELINE_ERROR,
        )
    rows = rows_from_frame(frame, GATE_NESTED)
    console.print(gate_table(rows, version))
    decision = rows[0]["gate_decision"] if rows else "ALLOW"
    reasons = rows[0]["gate_reasons"] if rows else []
    colour = "green" if decision == "ALLOW" else "red"
    console.print(f"Gate: [bold {colour}]{decision}[/]" + (f"  ({'; '.join(reasons)})" if reasons else ""))
    raise typer.Exit(gate_exit_code(rows))


def gate_exit_code(rows: list[dict]) -> int:
    decisions = {row["decision"] for row in rows}
    if "FAIL" in decisions:
        return EXIT_BLOCK_FAIL
    if "INSUFFICIENT_EVIDENCE" in decisions:
        return EXIT_BLOCK_INSUFFICIENT
    if "MANUAL_REVIEW" in decisions:
        return EXIT_BLOCK_MANUAL_REVIEW
    return EXIT_ALLOW


def format_rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


METHOD_NAMES = {"clopper_pearson": "exact", "cluster_bootstrap": "bootstrap"}
DECISION_STYLES = {"PASS": "green", "FAIL": "red", "INSUFFICIENT_EVIDENCE": "yellow", "MANUAL_REVIEW": "magenta"}


def gate_table(rows: list[dict], version: str) -> Table:
    table = Table(title=f"Decisions for version {version}", title_justify="left")
    for column in ("rule / metric", "decision", "rate", "interval", "passed/judged", "missing", "excluded"):
        table.add_column(column, no_wrap=True)
    table.add_column("reasons", overflow="fold", min_width=30)
    for row in rows:
        judged = (row["passed"] or 0) + (row["failed"] or 0)
        method = METHOD_NAMES.get(row["method"], row["method"] or "")
        table.add_row(
            f"{row['rule_id']}\n[dim]{row['metric']}[/]",
            f"[{DECISION_STYLES.get(row['decision'], 'white')}]{row['decision']}[/]",
            format_rate(row["estimate"]),
            f"[{format_rate(row['lower'])}, {format_rate(row['upper'])}] [dim]{method}[/]",
            f"{row['passed']}/{judged}",
            str(row["missing"]),
            str(row["excluded"]),
            "; ".join(row["reasons"] or []),
        )
    return table


def main() -> None:
    """Entry point: known failures print one readable line and a distinct exit code."""
    try:
        # Outside standalone mode click returns a typer.Exit's code instead of exiting.
        result = app(standalone_mode=False)
        sys.exit(result if isinstance(result, int) else EXIT_ALLOW)
    except ProjectError as error:
        for problem in error.problems:
            errors.print(f"[red]error:[/red] {problem}", highlight=False, soft_wrap=True)
        sys.exit(EXIT_PROJECT_ERROR)
    except CommandFailed as error:
        errors.print(f"[red]error:[/red] {error}", highlight=False, soft_wrap=True)
        sys.exit(error.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        errors.print("aborted")
        sys.exit(130)
    except Exception as error:  # click usage errors carry their own exit code
        import click

        if isinstance(error, click.ClickException):
            error.show()
            sys.exit(error.exit_code)
        raise


if __name__ == "__main__":
    main()
