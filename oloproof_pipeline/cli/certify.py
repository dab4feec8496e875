"""`oloproof certify`: the cases themselves checked (a do-nothing run, each case's reference)
in a Dagster run of their own; the flagged cases printed with why, broken cases first. With
nothing changed since the last certification, nothing is launched: the stored one is shown."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import typer
from rich.table import Table
from rich.text import Text

from ..model.fingerprints import run_inputs_digest
from ..model.outcomes import EXIT_ALLOW, EXIT_CASES_FLAGGED, EXIT_MEANINGS, PASSES_WHEN_NOTHING_IS_DONE
from ..project import load_project
from ..store.layout import read_table
from ..store.stamps import unchanged_since, write_run_stamp
from .launching import failed_launch_exit_code, instance_writes
from .options import PROJECT_OPTION, CommandFailed
from .render import Folded, compact_table, console, say
from ..model.collector import imported_aside

# The stamp of the last complete certification sits beside the versions' run stamps under this
# name: the partition the certification's own records carry (run/certification.py).
CERTIFICATION_STAMP = "certification"
CERTIFICATION_TABLE = "case_certification"


def certify(
    project: Path = PROJECT_OPTION,
    verbose: bool = typer.Option(False, "--verbose", help="Show Dagster's log as the run goes."),
    launch: bool = typer.Option(
        False, "--launch", help="Launch a Dagster run even when nothing changed since the last certification."
    ),
) -> None:
    """Certify the cases: a do-nothing run and each case's reference (expected.actions) judged by
    its own criteria; print the flagged cases with why. Exit 0 when none is flagged, 1 when some are."""
    evaluated = load_project(project)  # a bad file is one line, before Dagster is imported
    root = project.resolve()
    inputs_digest = run_inputs_digest(evaluated)
    # `ungated` marks the stamp as a certification's, never a run's of a version of that name.
    stamp = None if launch else unchanged_since(root, version=CERTIFICATION_STAMP, ungated=True, inputs_digest=inputs_digest)
    frame = read_table(root, CERTIFICATION_TABLE) if stamp is not None else None
    if frame is not None:
        say(f"The cases' certification is up to date: nothing changed since Dagster run {stamp.run_id} completed at "
            f"{stamp.finished_at}; no run launched (--launch runs it anyway).")
        show_certification(stamp.run_id, frame)
    from ..run.worker_processes import start_fork_server  # the system layer (httpx): only once the files are good

    start_fork_server()
    with imported_aside():
        from ..defs.launch import run_certification  # Dagster, imported while the fork server starts
        from .run import dagster_dev_command  # Dagster, as above

    with instance_writes(project):
        certification = run_certification(project, log_level="INFO" if verbose else "CRITICAL")
    if certification.errors:
        exit_code = failed_launch_exit_code(certification)  # a reference module that is not there: 2
        raise CommandFailed(
            f"{'; '.join(certification.errors)} (Dagster run {certification.run_id} failed: {EXIT_MEANINGS[exit_code]})",
            exit_code,
        )
    frame = read_table(root, CERTIFICATION_TABLE)
    write_run_stamp(root, version=CERTIFICATION_STAMP, ungated=True, inputs_digest=inputs_digest,
                    run_id=certification.run_id, dagster_dev=dagster_dev_command(root))
    show_certification(certification.run_id, frame)


def show_certification(run_id: str, frame: pd.DataFrame) -> None:
    """The summary line, the flagged cases, and the exit code: 1 when any case is flagged."""
    from ..run.certification import certification_summary_line, flagged_rows  # the system layer (httpx)

    flagged = flagged_rows(frame)
    say(f"Dagster run {run_id}: {certification_summary_line(frame)}")
    if flagged:
        console.print(certification_table(flagged))
    raise typer.Exit(EXIT_CASES_FLAGGED if flagged else EXIT_ALLOW)


def grouped_flags(rows: list[dict]) -> list[tuple[list[str], dict]]:
    """The flags with the same flag, criterion and reason as one entry naming every case; a
    broken case (its reference fails, its input repeats...) before a criterion that doing
    nothing passes, which is the criterion's weakness rather than the case's."""
    groups: dict[tuple, tuple[list[str], dict]] = {}
    for row in rows:
        key = (row["flag"], row["criterion"], row["reason"])
        groups.setdefault(key, ([], row))[0].append(row["case_id"])
    return sorted(groups.values(), key=lambda group: group[1]["flag"] == PASSES_WHEN_NOTHING_IS_DONE)


def certification_table(rows: list[dict]) -> Table:
    """One row per flag (cases with the same flag and reason in one row): the cases, the flag
    whole, and the criterion over the reason folded to the width."""
    table = compact_table("Flagged cases (broken cases first)")
    table.add_column("case", max_width=18)
    table.add_column("flag", no_wrap=True)
    table.add_column("criterion / reason")
    for cases, row in grouped_flags(rows):
        criterion = Text(row["criterion"] or "every criterion", style="dim")
        table.add_row(Folded(Text(", ".join(cases))), row["flag"], Folded(Text("\n").join([criterion, Text(row["reason"])])))
    return table
