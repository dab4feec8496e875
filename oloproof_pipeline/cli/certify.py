"""`oloproof certify`: the cases themselves checked (a do-nothing run, each case's reference)
in a Dagster run of their own; the flagged cases printed with why."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from ..model.outcomes import EXIT_ALLOW, EXIT_CASES_FLAGGED, EXIT_MEANINGS
from ..project import load_project
from ..store.layout import read_table
from .launching import failed_launch_exit_code, instance_writes
from .options import PROJECT_OPTION, CommandFailed
from .render import compact_table, console


def certify(
    project: Path = PROJECT_OPTION,
    verbose: bool = typer.Option(False, "--verbose", help="Show Dagster's log as the run goes."),
) -> None:
    """Certify the cases: a do-nothing run and each case's reference (expected.actions) judged by
    its own criteria; print the flagged cases with why. Exit 0 when none is flagged, 1 when some are."""
    load_project(project)  # a bad file is one line, before Dagster is imported
    from ..run.supervisor import start_fork_server  # the system layer (httpx): only once the files are good

    start_fork_server()
    from ..defs.launch import run_certification  # Dagster, imported while the fork server starts
    from ..run.certification import certification_summary_line, flagged_rows  # the system layer, as above

    with instance_writes(project):
        certification = run_certification(project, log_level="INFO" if verbose else "CRITICAL")
    if certification.errors:
        exit_code = failed_launch_exit_code(certification)  # a reference module that is not there: 2
        raise CommandFailed(
            f"{'; '.join(certification.errors)} (Dagster run {certification.run_id} failed: {EXIT_MEANINGS[exit_code]})",
            exit_code,
        )
    frame = read_table(project.resolve(), "case_certification")
    flagged = flagged_rows(frame)
    console.print(f"Dagster run {certification.run_id}: {certification_summary_line(frame)}", highlight=False)
    if flagged:
        console.print(certification_table(flagged))
    raise typer.Exit(EXIT_CASES_FLAGGED if flagged else EXIT_ALLOW)


def certification_table(rows: list[dict]) -> Table:
    """One row per flag: case, flag over criterion, and the reason folded to the width."""
    table = compact_table("Flagged cases")
    table.add_column("case", no_wrap=True)
    table.add_column("flag / criterion", overflow="fold", max_width=30)
    table.add_column("reason", overflow="fold", ratio=1)
    for row in rows:
        table.add_row(row["case_id"], f"{row['flag']}\n[dim]{row['criterion'] or 'every criterion'}[/]", row["reason"])
    return table
