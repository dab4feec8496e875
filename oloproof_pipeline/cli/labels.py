"""`oloproof labels`: people's validity labels for metamorphic pairs (pending, import, status)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Optional

import typer

from ..model.outcomes import EXIT_USAGE
from ..project import load_project
from ..read.labelling import (
    PENDING_FORMATS,
    default_pending_path,
    import_labels,
    label_status,
    pairs_of,
    pending_pairs,
    pending_text,
    write_pending,
)
from .options import PLAIN_HELP, PROJECT_OPTION, CommandFailed, check_output_file
from .render import Folded, compact_table, console, error_console, error_line, say

labels_app = typer.Typer(
    no_args_is_help=True,
    **PLAIN_HELP,
    help="People's validity labels for metamorphic pairs: write the pending pairs, import them filled in, see the counts.",
)


@labels_app.command("pending")
def labels_pending(
    transform: str = typer.Argument(..., help="The transform whose unlabelled pairs to write, e.g. paraphrase."),
    project: Path = PROJECT_OPTION,
    output: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Where to write (default labels/TRANSFORM.pending.FORMAT); '-' for stdout."
    ),
    format: str = typer.Option("jsonl", "--format", help="jsonl or csv."),
) -> None:
    """Write the pairs with no current label (source text, copy text, pair digest) for a person to fill in `kept`."""
    if format not in PENDING_FORMATS:
        raise CommandFailed(f"unknown format {format!r}; use {' or '.join(PENDING_FORMATS)}", EXIT_USAGE)
    check_output_file(output, "labels pending")
    loaded = load_project(project)
    pending = pending_pairs(pairs_of(loaded, transform))
    if output == Path("-"):
        sys.stdout.write(pending_text(pending, format))
        sys.stdout.flush()
        say(f"{len(pending)} pending pairs of {transform}", to=error_console)
        return
    if not pending:
        say(f"Every pair of {transform} has a current label: nothing to write.")
        return
    path = output or default_pending_path(loaded, transform, format)
    write_pending(path, pending_text(pending, format))
    say(f"Wrote {len(pending)} pending pairs of {transform} to {path}")
    say(f"Fill in kept (true or false) for each, then: oloproof labels import {shlex.quote(str(path))}")


@labels_app.command("import")
def labels_import(
    file: Path = typer.Argument(..., help="A filled-in pending file (.jsonl or .csv)."),
    project: Path = PROJECT_OPTION,
) -> None:
    """Append the filled-in labels of current pairs to their transforms' labels files; refuse stale or unknown ones."""
    outcome = import_labels(load_project(project), file)
    for line in outcome.refused:
        error_line(f"[red]refused:[/red] {line}")
    for path, count in outcome.appended.items():
        say(f"Appended {count} labels to {path}")
    left = [f"{count} {'line' if count == 1 else 'lines'} {what}" for count, what in (
        (outcome.unfilled, "not filled in (kept blank)"), (outcome.already_labelled, "already labelled the same"),
        (outcome.disagreeing, "disagreeing with an earlier label (those pairs now count as rejected)"),
    ) if count]
    if not outcome.appended:
        say("No label appended.")
    if left:
        say(f"{'; '.join(left)}.")
    if outcome.refused:
        count = len(outcome.refused)
        raise CommandFailed(f"{count} {'line' if count == 1 else 'lines'} refused (the others were imported)", EXIT_USAGE)


@labels_app.command("status")
def labels_status(project: Path = PROJECT_OPTION) -> None:
    """Per transform: kept, rejected, unlabelled and stale labels, whether it is checked, and how many more kept labels would check it."""
    statuses = label_status(load_project(project))
    if not statuses:
        say("No metamorphic transforms in this project.")
        return
    table = compact_table("Validity labels (from the project's files as they are now)")
    table.add_column("transform", min_width=10)
    for column in ("pairs", "kept", "rejected", "unlabelled", "stale"):
        table.add_column(column, no_wrap=True, justify="right")
    table.add_column("checked", no_wrap=True)
    table.add_column("kept labels\nto check it", no_wrap=True, justify="right")
    for status in statuses:
        to_check = "-" if status.checked else ("none would" if status.kept_to_check is None else str(status.kept_to_check))
        table.add_row(
            Folded(status.transform), str(status.pairs), str(status.kept), str(status.rejected), str(status.unlabelled),
            str(status.stale), "[green]yes[/]" if status.checked else "[red]no[/]", to_check,
        )
    console.print(table)
    for status in statuses:
        say(status.explanation())
