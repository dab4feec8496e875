"""`oloproof gate`, and the gate as `run` prints it too: the decisions table, the reasons,
the violations caught, the flagged slices, and the exit code."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn, Optional

import typer
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..decide.trials import trials_lines
from ..model.config import NO_RELEASE_POLICY
from ..model.outcomes import ALLOW, EXIT_ALLOW, EXIT_INCOMPLETE, EXIT_MEANINGS, EXIT_USAGE, FAIL, OUTCOMES
from ..read.document import StoredGate, gate_document, stored_gate
from ..decide.formatting import rule_cells
from ..read.reports import flagged_buckets, stored_trials
from ..read.results import stored_outcome_counts
from ..read.violations import violation_summary
from ..store.layout import read_table
from ..store.stored import StoredTable
from ..store.tables import VERDICT_NESTED
from .options import JSON_OPTION, PROJECT_OPTION, VERSION_OPTION, CommandFailed, stored_version
from .render import DECISION_STYLES, Folded, compact_table, console, print_json, say, say_lines


def gate(
    project: Path = PROJECT_OPTION,
    version: Optional[str] = VERSION_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Print the stored gate for a version and exit with its code."""
    version = stored_version(project, version, "gate")
    if as_json:
        exit_with_document(gate_json(project.resolve(), version))
    show_gate(project, version)


def gate_of(project_dir: Path, version: str) -> StoredGate:
    gate = stored_gate(project_dir.resolve(), version)
    if gate is None:
        raise CommandFailed(f"no gate stored for version {version!r}; run `oloproof run` first", EXIT_INCOMPLETE)
    return gate


def gate_json(project_root: Path, version: str, *, ungated: bool = False) -> dict:
    return gate_document(project_root, version, gate_of(project_root, version), ungated=ungated)


def exit_with_document(document: dict) -> NoReturn:
    """Print a document that holds the gate (`gate --json`, `run --json`); exit with its code."""
    print_json(document)
    raise typer.Exit(document["gate"]["exit_code"])


def show_gate(project_dir: Path, version: str, *, ungated: bool = False) -> None:
    gate = gate_of(project_dir, version)
    if not gate.rows:
        show_ungated(project_dir, version, ungated=ungated)
        return
    console.print(gate_table(gate.rows, version))
    say_lines(trials_lines(stored_trials(project_dir.resolve(), version) or []))
    show_violations(project_dir, version)
    colour = "green" if gate.decision == ALLOW else "red"
    say(f"Gate: [bold {colour}]{gate.decision}[/] (exit code {gate.exit_code}: {EXIT_MEANINGS[gate.exit_code]})")
    raise typer.Exit(gate.exit_code)


def show_ungated(project_dir: Path, version: str, *, ungated: bool) -> None:
    """A version judged with no release policy: its verdict counts, and no decision. Only the
    run that was asked to be `--ungated` ends with 0; reading it back later is no ALLOW."""
    show_outcome_counts(project_dir, version)
    show_violations(project_dir, version)
    if ungated:
        say(f"Gate: none (--ungated: {NO_RELEASE_POLICY})")
        raise typer.Exit(EXIT_ALLOW)
    raise CommandFailed(f"version {version!r} was judged with {NO_RELEASE_POLICY}; write release.yaml and run `oloproof run`", EXIT_USAGE)


def show_violations(project_dir: Path, version: str) -> None:
    """The flaws the graders caught, by criterion and rule, with a few cases named."""
    # Only a FAIL carries violations: read those rows, not every verdict, a row group at a
    # time, and of them only what the summary names (not the reasons and evidence of each).
    fails = StoredTable.at(project_dir.resolve(), "verdicts", partition=version).rows_where(
        "outcome", FAIL, VERDICT_NESTED, names=("case_id", "criterion", "outcome", "details")
    )
    summary = violation_summary(fails)
    if not summary:
        return
    table = compact_table("Violations caught (step = tool call number)")
    table.add_column("criterion /\nrule", max_width=30)
    for column in ("cases", "violations"):
        table.add_column(column, no_wrap=True)
    table.add_column("for example")
    for entry in summary:
        named = Text("\n").join([Text(entry["criterion"]), Text(", ".join(entry["rules"]), style="dim")])
        table.add_row(Folded(named), str(entry["cases"]), str(entry["violations"]), Folded(Text("\n".join(entry["examples"]))))
    console.print(table)


def show_outcome_counts(project_dir: Path, version: str) -> None:
    """With no rules to decide, the verdict counts per criterion are still worth seeing."""
    verdicts = StoredTable.at(project_dir.resolve(), "verdicts", partition=version).readable("its counts are not shown")
    if not verdicts.exists or not len(verdicts):
        return
    table = compact_table(f"Verdicts for version {version}")
    table.add_column("criterion")
    for column in OUTCOMES:
        table.add_column(column, no_wrap=True)
    for criterion, counts in stored_outcome_counts(verdicts).items():
        table.add_row(Folded(criterion), *(str(counts[outcome]) for outcome in OUTCOMES))
    console.print(table)


def show_flagged_buckets(project_dir: Path, version: str) -> None:
    """Slice buckets that differ from the rest (exploratory: never gated)."""
    say_lines(f"[yellow]slice flagged[/] {line}" for line in flagged_buckets(read_table(project_dir.resolve(), "slices", version)))


class DecisionsTable:
    """The decisions, narrow enough for 60 columns: per rule its id over its metric, the
    decision, the rate over the bar, the interval over its method, and passed/judged over the
    missing and excluded cases (the shared words of decide.formatting). Below 76 columns the
    decision moves under the metric. Then each rule's reasons, wrapped to the width."""

    WIDE = 76

    def __init__(self, rows: list[dict], version: str):
        self.rows, self.version = rows, version

    def __rich_console__(self, console, options):
        wide = options.max_width >= self.WIDE
        table = compact_table(f"Decisions for version {self.version}")
        table.add_column("rule /\nmetric" if wide else "rule /\nmetric /\ndecision", min_width=12)
        if wide:
            table.add_column("decision", no_wrap=True)
        # Headers over two lines: a column is no wider than its widest value.
        for header in ("rate /\nbar", "interval /\nmethod", "passed/\njudged"):
            table.add_column(header, no_wrap=True)
        reasons = Table.grid(padding=(0, 2))
        reasons.add_column(max_width=30)
        reasons.add_column(ratio=1)
        for row in self.rows:
            cells = rule_cells(row)
            style = DECISION_STYLES.get(row["decision"], "white")
            decision = f"[{style}]{row['decision']}[/]"
            named = f"{row['rule_id']}\n[dim]{row['metric']}[/]" + ("" if wide else f"\n{decision}")
            table.add_row(
                Folded(named), *((decision,) if wide else ()),
                f"{cells['rate']}\n[dim]{cells['bar']}[/]",
                f"{cells['interval']}\n[dim]{cells['method']}[/]",
                "\n".join(counts_lines(cells)),
            )
            reasons.add_row(Folded(f"[{style}]{row['rule_id']}[/]"), Folded("\n".join(row["reasons"] or ["-"])))
        yield Group(table, "", "Reasons:", reasons)


def gate_table(rows: list[dict], version: str) -> DecisionsTable:
    return DecisionsTable(rows, version)


def counts_lines(cells: dict) -> list[str]:
    """`20/24` (passed/judged), then the missing and excluded cases when there are any."""
    lines = [cells["passed/judged"]]
    lines += [f"{cells[name]} {name}" for name in ("missing", "excluded") if cells[name]]
    return lines
