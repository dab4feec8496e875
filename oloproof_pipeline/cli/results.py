"""`oloproof report`, `export` and `compare`: a stored version's results written out or set
beside another version's, from the stored tables only (the system is never imported)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ..model.config import Project
from ..model.outcomes import EXIT_USAGE
from ..project import load_project
from ..read.ci_export import junit_text, previous_version, summary_markdown
from ..read.compare import compare_versions, interval_text
from ..read.comparison_view import comparison_view
from ..read.export import write_jsonl, write_jsonl_to
from ..read.reports import stored_trial_summaries, write_html_report
from ..read.results import VersionResults, load_results
from ..read.spend import spend_difference_line, version_spend
from ..store.layout import StorageWriteError, output_dir, stored_partitions, write_text_file
from .options import (
    PROJECT_OPTION,
    VERSION_OPTION,
    CommandFailed,
    check_output_file,
    checked_version,
    stored_results,
    stored_version,
)
from .render import Folded, compact_table, console, error_console, say

EXPORT_SUFFIXES = {"jsonl": "jsonl", "junit": "xml", "markdown": "md"}


def report(
    project: Path = PROJECT_OPTION,
    version: Optional[str] = VERSION_OPTION,
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Where to write the HTML file."),
    compare: Optional[str] = typer.Option(
        None, "--compare", help="A base version: add its gate, cost and a matrix of the cases against it.",
        callback=checked_version,
    ),
) -> None:
    """Write one offline HTML report: gate, metrics with intervals, slices, a panel per case."""
    check_output_file(output, "report")
    loaded, results = stored_results(project, version)
    comparison = None
    if compare is not None:
        base = load_results(loaded.root, stored_version(loaded.root, compare, "verdicts", loaded))
        comparison = comparison_view(base, results, loaded.release.confidence_level)
    trials = stored_trial_summaries(loaded, results.version, results.verdict_table)
    path = write_html_report(loaded.root, results, loaded.name, output, trials=trials, comparison=comparison)
    say(f"Wrote {path}")


def export(
    project: Path = PROJECT_OPTION,
    version: Optional[str] = VERSION_OPTION,
    format: str = typer.Option(
        "jsonl", "--format", help="jsonl (a line per case), junit (XML for CI test reports) or markdown (a CI job summary)."
    ),
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", help="Where to write (default under .oloproof/exports); '-' for stdout."
    ),
    base: Optional[str] = typer.Option(
        None, "--base", help="markdown: the version to list newly broken cases against (default: the one before).",
        callback=checked_version,
    ),
) -> None:
    """Write a stored version's results: JSON lines per case, JUnit XML, or a Markdown summary."""
    if format not in EXPORT_SUFFIXES:
        raise CommandFailed(f"unknown format {format!r}; use {', '.join(EXPORT_SUFFIXES)}", EXIT_USAGE)
    if base is not None and format != "markdown":
        raise CommandFailed("--base is for --format markdown (the newly broken cases)", EXIT_USAGE)
    check_output_file(output, "export")
    loaded, results = stored_results(project, version)
    if format != "jsonl":
        write_ci_export(loaded, results, format, output, base)
        return
    if output == Path("-"):
        count = write_jsonl_to(results, sys.stdout)
        sys.stdout.flush()
        say(f"Wrote {count} lines to stdout", to=error_console)
        return
    path = output or output_dir(loaded.root) / "exports" / f"results-{results.version}.jsonl"
    try:
        count = write_jsonl(results, path)
    except OSError as error:
        raise StorageWriteError(path, error) from None
    say(f"Wrote {count} lines to {path}")


def write_ci_export(loaded: Project, results: VersionResults, format: str, output: Path | None, base: str | None) -> None:
    """JUnit XML or the Markdown summary, from the stored tables only."""
    if format == "junit":
        text = junit_text(results, loaded.name)
    else:
        judged = stored_partitions(loaded.root, "verdicts")
        if base is not None:
            stored_version(loaded.root, base, "verdicts")
        if base is None and len(judged) > 1:  # the instance knows the order versions were added in
            base = previous_version(results.version, versions_in_added_order(loaded), judged)
        base_results = load_results(loaded.root, base) if base is not None else None
        text = summary_markdown(results, loaded.name, base_results, loaded.release.confidence_level)
    if output == Path("-"):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    path = output or output_dir(loaded.root) / "exports" / f"results-{results.version}.{EXPORT_SUFFIXES[format]}"
    write_text_file(path, text)
    say(f"Wrote {format} results of version {results.version} to {path}")


def versions_in_added_order(loaded: Project) -> list[str]:
    """The versions in the order the project's Dagster instance added them (none before a run)."""
    from dagster import DagsterInstance  # Dagster: only a summary choosing its base version reads the instance

    from ..defs import versions_partitions  # Dagster, as above
    from ..defs.instance import instance_home  # Dagster, as above

    home = instance_home(loaded.root)
    if not (home / "dagster.yaml").is_file():
        return []
    with DagsterInstance.from_config(str(home)) as instance:
        return list(instance.get_dynamic_partitions(versions_partitions(loaded).name))


def compare(
    base: str = typer.Argument(..., help="The base system version.", callback=checked_version),
    candidate: str = typer.Argument(..., help="The candidate system version.", callback=checked_version),
    project: Path = PROJECT_OPTION,
) -> None:
    """Pair the same cases across two versions: per criterion, what got fixed and what broke."""
    loaded = load_project(project.resolve())
    for version in (base, candidate):
        stored_version(loaded.root, version, "verdicts")
    confidence = loaded.release.confidence_level
    base_results, candidate_results = load_results(loaded.root, base), load_results(loaded.root, candidate)
    comparisons = compare_versions(base_results, candidate_results, confidence)
    console.print(ComparisonTable(comparisons, base, candidate, confidence))
    spent = [version_spend(results.run_table) for results in (base_results, candidate_results)]
    if any(side.used_a_model for side in spent):
        say(spend_difference_line(base, candidate, *spent))
    for item in comparisons:
        for label, cases, style in (("fixed", item.fixed_cases, "green"), ("broke", item.broken_cases, "red")):
            if cases:
                say(f"{item.criterion} [{style}]{label}[/] ({len(cases)}): {', '.join(cases)}")
    if comparisons:
        say(
            f"[dim]interval: {confidence:.0%} {comparisons[0].method} (Tango 1998) for the change in pass rate; "
            "an unpaired case (missing or excluded on one side) counts as broken for the lower bound and fixed "
            "for the upper[/]"
        )


class ComparisonTable:
    """Per criterion the paired counts, then the change in pass rate and its interval, on one
    line whenever the criteria keep `NAMES` columns beside them. Narrower, the cases passing or
    failing in both and the unpaired ones go under the criterion; narrower still (60 columns),
    the interval goes under the change."""

    NAMES = 20
    COUNTS = ("paired", "both\npass", "fixed", "broken", "both\nfail", "un-\npaired")
    ONE_LINE = len("+0.000 [-0.172, +0.172]")

    def __init__(self, comparisons, base: str, candidate: str, confidence: float):
        self.comparisons, self.base, self.candidate, self.confidence = comparisons, base, candidate, confidence

    def __rich_console__(self, console, options):
        def room(columns: tuple[str, ...], change: int) -> bool:
            used = sum(max(len(line) for line in header.split("\n")) + 2 for header in columns) + change + 2
            return options.max_width - used >= self.NAMES

        wide = room(self.COUNTS, self.ONE_LINE)
        counts = self.COUNTS if wide else ("paired", "fixed", "broken")
        one_line = wide or room(counts, self.ONE_LINE)
        table = compact_table(f"{self.base} -> {self.candidate} (paired cases)")
        table.add_column("criterion" if wide else "criterion\n[dim](both pass, both fail, unpaired)[/]", min_width=12)
        for column in counts:
            table.add_column(column, no_wrap=True)
        table.add_column(f"change, {self.confidence:.0%} interval" if one_line else f"change\n{self.confidence:.0%} interval",
                         no_wrap=True)
        for item in self.comparisons:
            change = "-" if item.difference is None else f"{item.difference:+.3f}"
            numbers = {"paired": str(item.paired), "both\npass": str(item.both_pass), "fixed": f"[green]{item.fixed}[/]",
                       "broken": f"[red]{item.broken}[/]", "both\nfail": str(item.both_fail), "un-\npaired": str(item.unpaired)}
            named = item.criterion if wide else (
                f"{item.criterion}\n[dim]both pass {item.both_pass}, both fail {item.both_fail}, unpaired {item.unpaired}[/]"
            )
            table.add_row(Folded(named), *(numbers[column] for column in counts),
                          f"{change}{' ' if one_line else chr(10)}{interval_text(item)}")
        yield table
